package projection_test

import (
	"encoding/json"
	"testing"

	"github.com/sharedos/sharedos/projection"
)

// FuzzProject: whatever bytes a tool's schema holds, Project neither
// panics nor emits invalid JSON, and the tool is either emitted or
// reported with at least one reason
// (go test -run '^$' -fuzz FuzzProject ./projection).
func FuzzProject(f *testing.F) {
	for _, d := range fixtureDefs {
		f.Add(d.schema)
	}
	f.Add(`{"type":"object","properties":{"x":{"type":5,"enum":"a","required":"x"}}}`)
	f.Add(`{"type":"object","$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"properties":{"x":{"$ref":"#/$defs/a"}}}`)
	f.Add(`{"type":"object","properties":{"x":{"$ref":"#/nope"},"y":{"$ref":"http://example.com/s"}}}`)
	f.Fuzz(func(t *testing.T, schema string) {
		for _, p := range projection.Profiles() {
			proj, err := projection.Project(one(schema), p, projection.Options{MaxSchemaNodes: 256})
			if err != nil {
				t.Fatal(err)
			}
			if len(proj.Tools)+len(proj.Unrepresentable)+len(proj.OverLimit) != 1 {
				t.Fatalf("%s: tool neither emitted nor reported", p)
			}
			if !json.Valid(proj.Listing) {
				t.Fatalf("%s: invalid listing %s", p, proj.Listing)
			}
			for _, u := range proj.Unrepresentable {
				if len(u.Reasons) == 0 {
					t.Fatalf("%s: unrepresentable without a reason", p)
				}
			}
		}
	})
}
