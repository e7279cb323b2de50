package catalog_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/sharedos/sharedos/catalog"
)

func titled() catalog.Definition {
	return catalog.Definition{
		Name: "find", Description: "Finds pages.", Capability: "notion.find", Requirement: "notion/pages",
		InputSchema: json.RawMessage(`{"type":"object"}`),
	}
}

// A title is part of the hashed contract (clients show it); icons are
// display only: kept, canonical, and not hashed. A definition without a
// title hashes as one did before titles existed.
func TestTitleIsContractIconsAreNot(t *testing.T) {
	norm := func(d catalog.Definition) *catalog.Tool {
		t.Helper()
		ct, err := catalog.Normalize("notion", d, catalog.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		return ct
	}
	plain := norm(titled())
	// The contract of titled() as hashed before titles (golden).
	if want := `{"annotations":{},"capability":"notion.find","description":"Finds pages.","input_schema":{"type":"object"},"name":"find","namespace":"notion","output_schema":null,"provider":"notion","requirement":"notion/pages","v":1}`; string(plain.Contract) != want {
		t.Fatalf("contract without a title %s", plain.Contract)
	}
	d := titled()
	d.Title = " Find pages "
	withTitle := norm(d)
	if withTitle.Revision == plain.Revision || withTitle.Title != "Find pages" || withTitle.Definition().Title != "Find pages" {
		t.Fatalf("title: revision %s (plain %s), title %q", withTitle.Revision, plain.Revision, withTitle.Title)
	}
	d = titled()
	d.Icons = json.RawMessage(`[ {"src":"https://e.x/i.png", "mimeType":"image/png"} ]`)
	withIcons := norm(d)
	if withIcons.Revision != plain.Revision || string(withIcons.Icons) != `[{"mimeType":"image/png","src":"https://e.x/i.png"}]` || string(withIcons.Definition().Icons) != string(withIcons.Icons) {
		t.Fatalf("icons: revision %s (plain %s), icons %s", withIcons.Revision, plain.Revision, withIcons.Icons)
	}
	for _, bad := range []string{`{"src":"x"}`, `[1]`, `[{"mimeType":"image/png"}]`, `[`} {
		d.Icons = json.RawMessage(bad)
		if _, err := catalog.Normalize("notion", d, catalog.Limits{}); !errors.Is(err, catalog.ErrInvalidDefinition) {
			t.Errorf("icons %s: %v", bad, err)
		}
	}
}
