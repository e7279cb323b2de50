package catalog_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sharedos/sharedos/catalog"
)

func searchDef() catalog.Definition {
	return catalog.Definition{
		Name:        "search",
		Namespace:   "notion",
		Description: "Search pages in a Notion workspace.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"workspace":{"type":"string"},"query":{"type":"string","minLength":1}},"required":["workspace","query"],"additionalProperties":false}`),
		Annotations: json.RawMessage(`{"readOnlyHint":true,"title":"Search"}`),
		Capability:  "notion.search",
		Requirement: "notion/workspace/{workspace}",
	}
}

func mustTool(t testing.TB, provider string, d catalog.Definition) *catalog.Tool {
	t.Helper()
	tool, err := catalog.Normalize(provider, d, catalog.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func mustRegistry(t testing.TB, tools ...*catalog.Tool) *catalog.Registry {
	t.Helper()
	r, err := catalog.Build(tools)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// reformat re-encodes JSON with shuffled object keys and random whitespace,
// keeping its meaning.
func reformat(t testing.TB, rng *rand.Rand, raw json.RawMessage) json.RawMessage {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	ws := func() {
		b.WriteString([]string{"", " ", "\n  ", "\t"}[rng.IntN(4)])
	}
	var write func(v any)
	write = func(v any) {
		ws()
		switch x := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			b.WriteString("{")
			for i, k := range keys {
				if i > 0 {
					b.WriteString(",")
				}
				kb, _ := json.Marshal(k)
				ws()
				b.Write(kb)
				ws()
				b.WriteString(":")
				write(x[k])
			}
			b.WriteString("}")
		case []any:
			b.WriteString("[")
			for i, e := range x {
				if i > 0 {
					b.WriteString(",")
				}
				write(e)
			}
			b.WriteString("]")
		default:
			eb, _ := json.Marshal(x)
			b.Write(eb)
		}
		ws()
	}
	write(v)
	return json.RawMessage(b.String())
}

func sampleDefs() []catalog.Definition {
	defs := []catalog.Definition{searchDef()}
	for i := range 6 {
		d := searchDef()
		d.Name = fmt.Sprintf("tool%d", i)
		d.Capability = fmt.Sprintf("notion.tool%d", i)
		d.Annotations = json.RawMessage(fmt.Sprintf(`{"idx":%d,"nested":{"a":[1,2,{"b":"c"}],"z":null}}`, i))
		defs = append(defs, d)
	}
	return defs
}

func hashOf(t testing.TB, defs []catalog.Definition) string {
	t.Helper()
	tools := make([]*catalog.Tool, len(defs))
	for i, d := range defs {
		tools[i] = mustTool(t, "notion", d)
	}
	return mustRegistry(t, tools...).Hash()
}

// Property: key order, whitespace and definition order never change the hash.
func TestCatalogHashIgnoresFormattingAndOrder(t *testing.T) {
	want := hashOf(t, sampleDefs())
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		defs := sampleDefs()
		for i := range defs {
			defs[i].InputSchema = reformat(t, rng, defs[i].InputSchema)
			defs[i].Annotations = reformat(t, rng, defs[i].Annotations)
			defs[i].Description = "  " + defs[i].Description + "\r\n"
		}
		rng.Shuffle(len(defs), func(i, j int) { defs[i], defs[j] = defs[j], defs[i] })
		if got := hashOf(t, defs); got != want {
			t.Fatalf("trial %d: hash changed under reformatting: %s != %s", trial, got, want)
		}
	}
}

// Property: every change of meaning changes the hash.
func TestCatalogHashChangesWithMeaning(t *testing.T) {
	base := hashOf(t, sampleDefs())
	mutations := map[string]func(d *catalog.Definition){
		"description": func(d *catalog.Definition) { d.Description += " Now deletes too." },
		"schema keyword": func(d *catalog.Definition) {
			d.InputSchema = json.RawMessage(strings.Replace(string(d.InputSchema), `"minLength":1`, `"minLength":2`, 1))
		},
		"schema addition": func(d *catalog.Definition) {
			d.InputSchema = json.RawMessage(strings.Replace(string(d.InputSchema), `"additionalProperties":false`, `"additionalProperties":true`, 1))
		},
		"capability": func(d *catalog.Definition) { d.Capability = "notion.admin.export" },
		"annotation": func(d *catalog.Definition) {
			d.Annotations = json.RawMessage(`{"readOnlyHint":false,"title":"Search"}`)
		},
		"requirement":   func(d *catalog.Definition) { d.Requirement = "notion/{workspace}" },
		"namespace":     func(d *catalog.Definition) { d.Namespace = "docs" },
		"output schema": func(d *catalog.Definition) { d.OutputSchema = json.RawMessage(`{"type":"object"}`) },
		"name":          func(d *catalog.Definition) { d.Name = "search2" },
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for name, mutate := range mutations {
		for range 20 {
			defs := sampleDefs()
			i := rng.IntN(len(defs))
			if name == "name" || name == "capability" || name == "description" || name == "requirement" {
				i = 0 // the base definition: fields the others derive from
			}
			mutate(&defs[i])
			if hashOf(t, defs) == base {
				t.Fatalf("%s changed on definition %d but catalogHash did not", name, i)
			}
		}
	}
	if hashOf(t, sampleDefs()[1:]) == base {
		t.Fatal("removing a tool kept the hash")
	}
}

func TestRevisionIsPerContract(t *testing.T) {
	a := mustTool(t, "notion", searchDef())
	d := searchDef()
	d.InputSchema = reformat(t, rand.New(rand.NewPCG(5, 6)), d.InputSchema)
	if b := mustTool(t, "notion", d); b.Revision != a.Revision {
		t.Fatal("formatting changed the revision")
	}
	if c := mustTool(t, "notion-personal", searchDef()); c.Revision == a.Revision {
		t.Fatal("same tool on another provider has the same revision: identity must be hashed")
	}
}

func TestParseArgumentsAndRequirement(t *testing.T) {
	tool := mustTool(t, "notion", searchDef())
	args, err := tool.ParseArguments([]byte(`{"workspace":"acme","query":"q3 plan"}`))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := tool.Requirement.Resolve(args); err != nil || res != "notion/workspace/acme" {
		t.Fatalf("Resolve = %q, %v", res, err)
	}
	for name, raw := range map[string]string{
		"missing required": `{"workspace":"acme"}`,
		"wrong type":       `{"workspace":"acme","query":7}`,
		"extra property":   `{"workspace":"acme","query":"x","admin":true}`,
		"not an object":    `["acme"]`,
		"malformed":        `{"workspace":`,
		"too deep":         `{"workspace":"a","query":"b","x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
		"too large":        `{"workspace":"a","query":"` + strings.Repeat("y", 300<<10) + `"}`,
	} {
		if _, err := tool.ParseArguments([]byte(raw)); !errors.Is(err, catalog.ErrInvalidArguments) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	for _, ws := range []string{"..", ".", "acme/../evil", "", "a\x00b", strings.Repeat("w", 300)} {
		args := map[string]any{"workspace": ws, "query": "q"}
		if res, err := tool.Requirement.Resolve(args); err == nil {
			t.Errorf("workspace %q resolved to %q", ws, res)
		}
	}
}

func TestAliasesAreUniqueAndReversible(t *testing.T) {
	work := mustTool(t, "github-work", catalog.Definition{Name: "search", Namespace: "github", Description: "w",
		InputSchema: json.RawMessage(`{"type":"object"}`), Capability: "github.search", Requirement: "github/work"})
	personal := mustTool(t, "github-personal", catalog.Definition{Name: "search", Namespace: "github", Description: "p",
		InputSchema: json.RawMessage(`{"type":"object"}`), Capability: "github.search", Requirement: "github/personal"})
	notion := mustTool(t, "notion", searchDef())
	r := mustRegistry(t, work, personal, notion)
	// Both claim github_search, so both take the hashed alias of their
	// identity; notion keeps its preferred alias.
	want := map[string]catalog.Identity{
		"github-work_search__" + identityHash(work.Identity):         work.Identity,
		"github-personal_search__" + identityHash(personal.Identity): personal.Identity,
		"notion_search": notion.Identity,
	}
	for alias, id := range want {
		tool, ok := r.Lookup(alias)
		if !ok || tool.Identity != id {
			t.Errorf("Lookup(%q) = %v, %v; want %v", alias, tool, ok, id)
		}
		if r.Alias(id) != alias {
			t.Errorf("Alias(%v) = %q, want %q", id, r.Alias(id), alias)
		}
	}
	if _, ok := r.Lookup("github_search"); ok {
		t.Error("a claimed preferred alias resolves")
	}
	if r.Alias(catalog.Identity{Provider: "notion", Name: "ghost"}) != "" {
		t.Error("an unknown identity has an alias")
	}
	if _, err := catalog.Build([]*catalog.Tool{notion, notion}); !errors.Is(err, catalog.ErrDuplicateIdentity) {
		t.Errorf("duplicate identity: err = %v", err)
	}
}

func TestNormalizerSharesIdenticalTools(t *testing.T) {
	n := catalog.NewNormalizer(catalog.Limits{}, 100)
	a, err := n.Normalize("notion", searchDef())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := n.Normalize("notion", searchDef())
	if a != b {
		t.Error("identical definitions not shared")
	}
	c, _ := n.Normalize("notion-2", searchDef())
	if c == a {
		t.Error("different provider shared a tool")
	}
}

func BenchmarkNormalize(b *testing.B) {
	d := searchDef()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := catalog.Normalize("notion", d, catalog.Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseArguments(b *testing.B) {
	tool := mustTool(b, "notion", searchDef())
	raw := []byte(`{"workspace":"acme","query":"q3 plan"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tool.ParseArguments(raw); err != nil {
			b.Fatal(err)
		}
	}
}
