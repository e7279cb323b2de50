package catalog_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sharedos/sharedos/catalog"
)

// BenchmarkParseArgumentsNested: a 4 KiB argument object with nested
// objects, arrays, numbers and escaped strings, against a permissive
// schema, so the cost is mostly decoding.
func BenchmarkParseArgumentsNested(b *testing.B) {
	tl, err := catalog.Normalize("x", catalog.Definition{Name: "put", Description: "d",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"},"items":{"type":"array"}},"required":["id"]}`),
		Capability:  "x.put", Requirement: "x/items/{id}"}, catalog.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	var items []string
	for i := range 40 {
		items = append(items, fmt.Sprintf(`{"n":%d,"price":%d.25,"tags":["a","b\n\"c\""],"note":"caf\u00e9 %d","ok":true,"x":null}`, i, i, i))
	}
	raw := []byte(`{"id":"mine","items":[` + strings.Join(items, ",") + `]}`)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tl.ParseArguments(raw); err != nil {
			b.Fatal(err)
		}
	}
}
