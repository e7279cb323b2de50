package projection_test

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/projection"
)

var nameRules = map[projection.Profile]*regexp.Regexp{
	projection.OpenAI:           regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`),
	projection.OpenAIStrict:     regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`),
	projection.Anthropic:        regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`),
	projection.AnthropicStrict:  regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`),
	projection.Gemini:           regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_.-]{0,63}$`),
	projection.GeminiJSONSchema: regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_.-]{0,63}$`),
	projection.MCP:              regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,128}$`),
}

func randomName(rng *rand.Rand) string {
	parts := []string{"search", "get", "1x", "-", "_", "ä", "検", ".", "a", "B", strings.Repeat("long", 20), "9"}
	var b strings.Builder
	for range 1 + rng.IntN(4) {
		b.WriteString(parts[rng.IntN(len(parts))])
	}
	return b.String()
}

// randomListing builds a registry of tools with names chosen to collide
// (shared namespaces, names that sanitize alike, overlong ones) and lists
// a random subset of it, as a turn would.
func randomListing(t *testing.T, rng *rand.Rand) []projection.Listed {
	seen := map[catalog.Identity]bool{}
	var tools []*catalog.Tool
	for range 1 + rng.IntN(40) {
		id := catalog.Identity{Provider: []string{"p", "p-2", "q", "1p", "prov.x"}[rng.IntN(5)], Name: randomName(rng)}
		if seen[id] || strings.ContainsAny(id.Name, " /") {
			continue
		}
		seen[id] = true
		tools = append(tools, &catalog.Tool{Identity: id, Namespace: []string{"ns", "ns-", "n_s", id.Provider}[rng.IntN(4)],
			Revision: "r", InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`), Annotations: json.RawMessage(`{}`)})
	}
	reg, err := catalog.Build(tools)
	if err != nil {
		t.Fatal(err)
	}
	var listed []projection.Listed
	for i := range reg.Len() {
		if rng.IntN(4) != 0 {
			tool, alias := reg.At(i)
			listed = append(listed, projection.Listed{Alias: alias, Tool: tool})
		}
	}
	return listed
}

// TestAliasesUniqueAndRoundTrip: for random listings in every profile,
// aliases are valid under the profile's name rules, unique, Lookup maps
// each back to its tool's identity, the same listing gives the same
// aliases (whatever its order), and where the turn's alias is valid for
// the profile and uncontested it is the one shown.
func TestAliasesUniqueAndRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for range 300 {
		listed := randomListing(t, rng)
		for _, p := range projection.Profiles() {
			proj, err := projection.Project(listed, p, projection.Options{})
			if err != nil {
				t.Fatal(err)
			}
			// anthropic-strict emits at most 20 tools a request; the rest
			// are over its limit, the emitted ones a prefix.
			if len(proj.Tools)+len(proj.OverLimit) != len(listed) {
				t.Fatalf("%s: %d of %d emitted: %+v", p, len(proj.Tools), len(listed), proj.Unrepresentable)
			}
			aliasOf := map[catalog.Identity]string{}
			seen := map[string]bool{}
			for i, tool := range proj.Tools {
				if !nameRules[p].MatchString(tool.Alias) {
					t.Fatalf("%s: alias %q breaks the name rules", p, tool.Alias)
				}
				if seen[tool.Alias] {
					t.Fatalf("%s: alias %q twice", p, tool.Alias)
				}
				seen[tool.Alias] = true
				if id, ok := proj.Lookup(tool.Alias); !ok || id != listed[i].Tool.Identity {
					t.Fatalf("%s: Lookup(%q) = %v, %v; want %v", p, tool.Alias, id, ok, listed[i].Tool.Identity)
				}
				if nameRules[p].MatchString(listed[i].Alias) && p != projection.Gemini && p != projection.GeminiJSONSchema && tool.Alias != listed[i].Alias {
					t.Fatalf("%s: turn alias %q valid for the profile but shown as %q", p, listed[i].Alias, tool.Alias)
				}
				aliasOf[tool.Identity] = tool.Alias
			}
			if _, ok := proj.Lookup("no_such_alias__"); ok {
				t.Fatal("Lookup found an alias it never gave")
			}
			shuffled := append([]projection.Listed(nil), listed...)
			rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			again, _ := projection.Project(shuffled, p, projection.Options{})
			for _, tool := range again.Tools {
				if a, ok := aliasOf[tool.Identity]; ok && a != tool.Alias {
					t.Fatalf("%s: %v is %q in one order, %q in another", p, tool.Identity, aliasOf[tool.Identity], tool.Alias)
				}
			}
		}
	}
}

// TestAliasesSameIdentityTwice: a tool listed twice still gets two
// distinct names, both leading back to it.
func TestAliasesSameIdentityTwice(t *testing.T) {
	l := one(`{"type":"object"}`)
	l = append(l, l[0])
	proj, err := projection.Project(l, projection.MCP, projection.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(proj.Tools) != 2 || proj.Tools[0].Alias == proj.Tools[1].Alias {
		t.Fatalf("aliases %+v", proj.Tools)
	}
	for _, tool := range proj.Tools {
		if id, _ := proj.Lookup(tool.Alias); id != l[0].Tool.Identity {
			t.Fatalf("Lookup(%q) = %v", tool.Alias, id)
		}
	}
}

// Names a turn assigned over its whole catalogue are shown as given, in
// any subset and order; a listing mixing given and missing names, or
// giving an invalid or repeated one, is refused.
func TestGivenModelNames(t *testing.T) {
	tools := fixture(t)
	if len(tools) < 3 {
		t.Fatal("the fixture has fewer than three tools")
	}
	names, err := projection.Aliases(tools, projection.OpenAI)
	if err != nil {
		t.Fatal(err)
	}
	sub := []projection.Listed{tools[2], tools[0]}
	sub[0].ModelName, sub[1].ModelName = "given_"+names[2], "given_"+names[0]
	p, err := projection.Project(sub, projection.OpenAI, projection.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range p.Tools {
		if !strings.HasPrefix(tl.Alias, "given_") {
			t.Fatalf("%s shown as %q, not as given", tl.Identity, tl.Alias)
		}
		if id, ok := p.Lookup(tl.Alias); !ok || id != tl.Identity {
			t.Fatalf("%q looks up %v", tl.Alias, id)
		}
	}
	with := func(l projection.Listed, name string) projection.Listed { l.ModelName = name; return l }
	for name, bad := range map[string][]projection.Listed{
		"mixed":    {with(tools[0], "a"), tools[1]},
		"invalid":  {with(tools[0], "a b")},
		"repeated": {with(tools[0], "n"), with(tools[1], "n")},
	} {
		if _, err := projection.Project(bad, projection.OpenAI, projection.Options{}); !errors.Is(err, projection.ErrOptions) {
			t.Errorf("%s: %v, want ErrOptions", name, err)
		}
	}
}
