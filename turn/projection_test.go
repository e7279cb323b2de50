package turn_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/projection"
	"github.com/sharedos/sharedos/reason"
	"github.com/sharedos/sharedos/turn"
)

func decodeEvent(t *testing.T, rec *audit.Record) audit.Event {
	t.Helper()
	var ev audit.Event
	if err := json.Unmarshal(rec.Data, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

// A model-facing listing shows the tools visible now in the profile's
// form, records the turn's aliases of what it sent with the profile, the
// projection_hash and the model-facing names, and only names it showed
// can be called; the call is recorded under the turn's alias.
func TestProjectRecordsAndOnlyShownNamesCall(t *testing.T) {
	m, c := newTurn(t, turn.Config{})
	p, rec, err := m.Project(t0, turn.ProjectionRequest{Profile: projection.OpenAI})
	if err != nil {
		t.Fatal(err)
	}
	c.add(rec)
	ev := decodeEvent(t, rec)
	if ev.Type != audit.CatalogListed || ev.Projection == nil || ev.Projection.Profile != "openai" || ev.Projection.Hash != p.Hash {
		t.Fatalf("record: %+v", ev)
	}
	// notion_export is not discoverable: neither sent nor left out (it is not visible).
	if want := []string{"notes_put", "notion_search"}; !slices.Equal(slices.Sorted(slices.Values(ev.Listed)), want) {
		t.Fatalf("listed %v, want %v", ev.Listed, want)
	}
	if len(ev.Projection.Names) != len(ev.Listed) || len(p.Tools) != len(ev.Listed) {
		t.Fatalf("names %v for listed %v", ev.Projection.Names, ev.Listed)
	}
	name := p.Tools[slices.IndexFunc(p.Tools, func(t projection.Tool) bool { return t.Identity.Name == "search" })].Alias
	d, rec := m.Decide(t0, turn.Invocation{Alias: name, Profile: projection.OpenAI, Arguments: json.RawMessage(`{"w":"acme"}`)})
	c.add(rec)
	if d.Err != nil || d.Tool.Identity.Name != "search" {
		t.Fatalf("a shown name: %+v", d)
	}
	if got := decodeEvent(t, rec).Call.Alias; got != "notion_search" {
		t.Fatalf("the call is recorded as %q, want the turn's alias", got)
	}
	for _, inv := range []turn.Invocation{
		{Alias: name, Profile: projection.Anthropic},         // shown to openai, never to anthropic
		{Alias: "notion_export", Profile: projection.OpenAI}, // in the catalogue, never shown
		{Alias: "notion_searc", Profile: projection.OpenAI},  // no fuzzy match
	} {
		inv.Arguments = json.RawMessage(`{"w":"acme"}`)
		d, rec := m.Decide(t0, inv)
		c.add(rec)
		if reason.Of(d.Err) != reason.UnknownTool {
			t.Fatalf("%q under %s: %v, want unknown_tool", inv.Alias, inv.Profile, d.Err)
		}
	}
	m.BeginClose()
	c.add(mustComplete(t, m, t0, turn.Completion{CallID: d.CallID}))
	c.add(m.Finish(t0, "closed"))
	if rep := audit.Verify(c.recs, false); !rep.OK() {
		t.Fatalf("the chain does not verify: %+v", rep)
	}
}

// The same held catalogue, instant and request give byte-identical
// output; a grant that lapsed changes what is sent, and the hash with it.
func TestProjectDeterministicAndJudgedAtItsInstant(t *testing.T) {
	m, _ := newTurn(t, turn.Config{})
	a, _, err := m.Project(t0, turn.ProjectionRequest{Profile: projection.Anthropic})
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := m.Project(t0, turn.ProjectionRequest{Profile: projection.Anthropic})
	if err != nil {
		t.Fatal(err)
	}
	if string(a.Listing) != string(b.Listing) || a.Hash != b.Hash {
		t.Fatal("the same request gave different bytes")
	}
	later, _, err := m.Project(t0.Add(2*time.Hour), turn.ProjectionRequest{Profile: projection.Anthropic})
	if err != nil {
		t.Fatal(err)
	}
	if later.Hash == a.Hash || len(later.Tools) != len(a.Tools)-1 {
		t.Fatalf("after the notion grant lapsed: %d tools (hash equal %v), want one fewer", len(later.Tools), later.Hash == a.Hash)
	}
}

// A search ranks only the visible held tools, records its query's hash
// (not the query), and what it returned is callable under its names.
func TestSearchStaysOnThePin(t *testing.T) {
	m, _ := newTurn(t, turn.Config{})
	p, rec, err := m.Project(t0, turn.ProjectionRequest{Profile: projection.MCP, Query: "export search put", K: 5})
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range p.Tools {
		if tl.Identity.Name == "export" {
			t.Fatal("search returned a tool its principal cannot discover")
		}
	}
	ev := decodeEvent(t, rec)
	if ev.Projection == nil || len(ev.Projection.QueryHash) != 64 || ev.Projection.K != 5 {
		t.Fatalf("search record: %+v", ev.Projection)
	}
	if _, _, err := m.Project(t0, turn.ProjectionRequest{Profile: "cobol"}); reason.Of(err) != reason.InvalidRequest {
		t.Fatalf("unknown profile: %v", err)
	}
}
