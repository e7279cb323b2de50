package projection_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/projection"
)

// TestDeterministicAndHashed: the same input and profile give
// byte-identical listings, with or without a cache, and projection_hash is
// the SHA-256 of the listing; each profile's listing differs.
func TestDeterministicAndHashed(t *testing.T) {
	listed := fixture(t)
	cache := projection.NewCache(1024)
	hashes := map[string]projection.Profile{}
	for _, p := range projection.Profiles() {
		a, err := projection.Project(listed, p, projection.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			b, _ := projection.Project(listed, p, projection.Options{Cache: cache})
			if !bytes.Equal(a.Listing, b.Listing) || a.Hash != b.Hash || a.Tokens != b.Tokens {
				t.Fatalf("%s: projections differ", p)
			}
		}
		sum := sha256.Sum256(a.Listing)
		if a.Hash != hex.EncodeToString(sum[:]) {
			t.Fatalf("%s: hash is not the listing's SHA-256", p)
		}
		if q, dup := hashes[a.Hash]; dup {
			t.Fatalf("%s and %s have the same listing", p, q)
		}
		hashes[a.Hash] = p
	}
}

// TestCacheConcurrentAndBounded: projections sharing one cache from many
// goroutines agree with an uncached one, and the cache stays within its
// bound.
func TestCacheConcurrentAndBounded(t *testing.T) {
	listed := synthetic(t, 120)
	want, _ := projection.Project(listed, projection.OpenAIStrict, projection.Options{})
	cache := projection.NewCache(100)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := projection.Profiles()[g%len(projection.Profiles())]
			for range 3 {
				got, err := projection.Project(listed, p, projection.Options{Cache: cache})
				if err != nil {
					errs <- err
					return
				}
				if p == projection.OpenAIStrict && got.Hash != want.Hash {
					errs <- errors.New("cached projection differs")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := cache.Len(); n > 100 || n == 0 {
		t.Fatalf("cache holds %d entries, bound 100", n)
	}
}

// TestBudget: over budget, tools are left out from the end of the given
// order until the rest fits; the ones kept are whole and first.
func TestBudget(t *testing.T) {
	listed := synthetic(t, 20)
	full, _ := projection.Project(listed, projection.OpenAI, projection.Options{})
	budget := full.Tools[0].Tokens + full.Tools[1].Tokens + full.Tools[2].Tokens + full.Tools[3].Tokens/2
	proj, err := projection.Project(listed, projection.OpenAI, projection.Options{Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	if len(proj.Tools) != 3 || proj.Tokens > budget || len(proj.OverBudget) != 17 {
		t.Fatalf("%d tools, %d tokens of %d, %d over budget", len(proj.Tools), proj.Tokens, budget, len(proj.OverBudget))
	}
	for i, tool := range proj.Tools {
		if !bytes.Equal(tool.JSON, full.Tools[i].JSON) || tool.Identity != listed[i].Tool.Identity {
			t.Fatalf("tool %d changed under the budget", i)
		}
	}
	for i, id := range proj.OverBudget {
		if id != listed[3+i].Tool.Identity {
			t.Fatalf("over budget %d is %v, want %v", i, id, listed[3+i].Tool.Identity)
		}
	}
	// A later small tool does not jump the queue: a prefix is kept.
	ranked := []projection.Listed{listed[0], listed[1]}
	tiny := one(`{"type":"object"}`)[0]
	ranked = append(ranked, tiny)
	proj, _ = projection.Project(ranked, projection.OpenAI, projection.Options{Budget: full.Tools[0].Tokens + 1})
	if len(proj.Tools) != 1 || len(proj.OverBudget) != 2 || proj.OverBudget[1] != tiny.Tool.Identity {
		t.Fatalf("kept %d, over budget %v", len(proj.Tools), proj.OverBudget)
	}
	if _, err := projection.Project(listed, projection.OpenAI, projection.Options{Budget: -1}); !errors.Is(err, projection.ErrOptions) {
		t.Fatalf("negative budget: %v", err)
	}
	if _, err := projection.Project(listed, "claude", projection.Options{}); !errors.Is(err, projection.ErrProfile) {
		t.Fatalf("unknown profile: %v", err)
	}
}

// TestSearch: BM25 over the given tools only, best first, ties in listing
// order, top k, in the requested profile.
func TestSearch(t *testing.T) {
	listed := fixture(t)
	proj, err := projection.Search(listed, "search issues", 2, projection.OpenAI, projection.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(proj.Tools) != 2 || proj.Tools[0].Identity != (catalog.Identity{Provider: "github-personal", Name: "search"}) {
		t.Fatalf("top 2: %+v", proj.Tools)
	}
	// Ties: the three "search" tools whose text differs only elsewhere
	// are ordered as listed; the same query twice gives the same bytes.
	a, _ := projection.Search(listed, "search", 0, projection.MCP, projection.Options{})
	b, _ := projection.Search(listed, "search", 0, projection.MCP, projection.Options{})
	if a.Hash != b.Hash || len(a.Tools) < 3 {
		t.Fatalf("search not deterministic or too few hits: %d", len(a.Tools))
	}
	// Only the given tools: a tool outside them is never found.
	var without []projection.Listed
	for _, l := range listed {
		if l.Tool.Identity.Provider != "weather" {
			without = append(without, l)
		}
	}
	if p, _ := projection.Search(without, "forecast weather", 0, projection.OpenAI, projection.Options{}); len(p.Tools) != 0 {
		t.Fatalf("found %+v outside the given tools", p.Tools)
	}
	if p, _ := projection.Search(listed, "forecast weather", 0, projection.OpenAI, projection.Options{}); len(p.Tools) != 1 || p.Tools[0].Identity.Provider != "weather" {
		t.Fatalf("forecast: %+v", p.Tools)
	}
	// Title and camelCase/snake_case words are searched; unicode too.
	if p, _ := projection.Search(listed, "Wörterbuch", 1, projection.MCP, projection.Options{}); len(p.Tools) != 1 || p.Tools[0].Identity.Name != "nachschlagen" {
		t.Fatalf("unicode title: %+v", p.Tools)
	}
	if p, _ := projection.Search(listed, "contact", 1, projection.MCP, projection.Options{}); len(p.Tools) != 1 || p.Tools[0].Identity.Name != "upsert_contact" {
		t.Fatalf("snake_case: %+v", p.Tools)
	}
	// In a strict profile, a hit that is unrepresentable is reported.
	if p, _ := projection.Search(listed, "echo", 1, projection.OpenAIStrict, projection.Options{}); len(p.Tools) != 0 || len(p.Unrepresentable) != 1 {
		t.Fatalf("echo strict: %+v %+v", p.Tools, p.Unrepresentable)
	}
}

// TestWalkerBounds: a schema over the package's own bounds is reported,
// not walked, even when the catalogue would have let it through.
func TestWalkerBounds(t *testing.T) {
	big := `{"type":"object","properties":{"x":{"type":"string","description":"` + string(bytes.Repeat([]byte("a"), 70<<10)) + `"}},"required":["x"]}`
	for _, c := range []struct {
		schema   string
		opts     projection.Options
		want     string
		profiles []projection.Profile
	}{
		{big, projection.Options{}, projection.ReasonTooLarge, projection.Profiles()},
		{nested(10), projection.Options{MaxSchemaDepth: 8}, projection.ReasonTooDeep, projection.Profiles()},
		// Only subset profiles walk subschemas; the others emit the bytes.
		{nested(10), projection.Options{MaxSchemaNodes: 5}, projection.ReasonTooLarge, subsetProfiles},
		{`[1]`, projection.Options{}, projection.ReasonMalformed, projection.Profiles()},
	} {
		for _, p := range c.profiles {
			proj, _ := projection.Project(one(c.schema), p, c.opts)
			if len(proj.Unrepresentable) != 1 || !slices.ContainsFunc(proj.Unrepresentable[0].Reasons, func(r projection.Reason) bool { return r.Reason == c.want }) {
				t.Errorf("%s: %+v, want %s", p, proj.Unrepresentable, c.want)
			}
		}
	}
}

// TestRequestLimits: anthropic-strict emits a prefix of the listing that
// keeps within its per-request limits (20 strict tools, 24 optional
// properties, 16 anyOf or type-array schemas) and reports the rest.
func TestRequestLimits(t *testing.T) {
	many := func(n int, schema string) []projection.Listed {
		var l []projection.Listed
		for i := range n {
			tool := *one(schema)[0].Tool
			tool.Identity.Name = fmt.Sprintf("tool%02d", i)
			l = append(l, projection.Listed{Tool: &tool})
		}
		return l
	}
	for _, c := range []struct {
		schema string
		n      int
		kept   int
	}{
		{`{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`, 25, 20},
		{`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"},"c":{"type":"string"}},"required":["a"]}`, 25, 12},
		{`{"type":"object","properties":{"a":{"type":["string","null"]},"b":{"anyOf":[{"type":"string"},{"type":"integer"}]},"c":{"type":"string"}},"required":["a","b","c"]}`, 25, 8},
	} {
		proj, err := projection.Project(many(c.n, c.schema), projection.AnthropicStrict, projection.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(proj.Tools) != c.kept || len(proj.OverLimit) != c.n-c.kept || len(proj.Unrepresentable) != 0 {
			t.Errorf("%s: kept %d (want %d), over limit %d", c.schema, len(proj.Tools), c.kept, len(proj.OverLimit))
		}
		// openai-strict has no such request limits.
		if p, _ := projection.Project(many(c.n, c.schema), projection.OpenAI, projection.Options{}); len(p.Tools) != c.n {
			t.Errorf("openai kept %d of %d", len(p.Tools), c.n)
		}
	}
}
