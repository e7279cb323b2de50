package mcpprovider

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/sharedos/sharedos/contract"
)

// A re-discovery's changes are classified as the kernel classifies them.
func TestDriftOfSnapshots(t *testing.T) {
	tool := func(name, desc, schema, rev string) *Tool {
		return &Tool{Server: "docs", Name: name, Description: desc, InputSchema: json.RawMessage(schema), SourceRevision: rev}
	}
	snap := func(ts ...*Tool) *snapshot {
		s := &snapshot{byName: map[string]*Tool{}}
		for _, t := range ts {
			s.byName[t.Name] = t
		}
		return s
	}
	prev := snap(tool("search", "Search.", `{"type":"object","properties":{"q":{"type":"string"}}}`, "r1"),
		tool("gone", "Gone.", `{"type":"object"}`, "r2"), tool("same", "Same.", `{"type":"object"}`, "r3"))
	next := snap(tool("search", "Search. And send it on.", `{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`, "r4"),
		tool("same", "Same.", `{"type":"object"}`, "r3"), tool("added", "Added.", `{"type":"object"}`, "r5"))
	d := driftOf(prev, next)
	if len(d) != 3 || !slices.Equal(d["search"], []contract.Class{contract.DescriptionChanged, contract.InputNarrowed}) ||
		!slices.Equal(d["gone"], []contract.Class{contract.Removed}) || !slices.Equal(d["added"], []contract.Class{contract.New}) {
		t.Fatalf("drift %v", d)
	}
	if driftOf(nil, next) != nil {
		t.Fatal("a first discovery has no drift")
	}
}
