package turn_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/reason"
	"github.com/sharedos/sharedos/turn"
)

var t0 = time.Date(2026, 9, 8, 9, 0, 0, 0, time.UTC)

func def(name, ns, capability, req string) catalog.Definition {
	return catalog.Definition{
		Name: name, Namespace: ns, Description: name,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"w":{"type":"string"}},"required":["w"]}`),
		Capability:  capability, Requirement: req,
	}
}

func registry(t *testing.T, defs ...catalog.Definition) *catalog.Registry {
	t.Helper()
	var tools []*catalog.Tool
	for _, d := range defs {
		tl, err := catalog.Normalize("p", d, catalog.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		tools = append(tools, tl)
	}
	r, err := catalog.Build(tools)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func grants(t *testing.T, specs ...authority.GrantSpec) authority.Authority {
	t.Helper()
	var gs []authority.Grant
	for _, s := range specs {
		g, err := s.Compile()
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	return authority.NewAuthority(gs)
}

type chain struct {
	t    *testing.T
	recs [][]byte
}

func (c *chain) add(r *audit.Record) *audit.Record {
	c.t.Helper()
	if r == nil {
		c.t.Fatal("expected a record")
	}
	c.recs = append(c.recs, r.Data)
	return r
}

func newTurn(t *testing.T, cfg turn.Config) (*turn.Machine, *chain) {
	access := authority.AccessContext{Tenant: "acme", Principal: "ada", TurnID: "t1", Now: t0, EnabledNamespaces: []string{"notion", "notes"}}
	if cfg.StepCeiling == 0 {
		cfg.StepCeiling = 10
	}
	cfg.Incarnation = "inc"
	m, rec := turn.New(cfg, access)
	c := &chain{t: t}
	c.add(rec)
	c.add(m.Resolve(t0, turn.Resolution{
		Authority: grants(t,
			authority.GrantSpec{ID: "g-notion", Capability: "notion.*", Resource: "notion/acme/**", ExpiresAt: t0.Add(time.Hour)},
			authority.GrantSpec{ID: "g-notes", Capability: "notes.*", Resource: "notes/**"}),
		Registry: registry(t,
			def("search", "notion", "notion.search", "notion/{w}/search"),
			def("export", "notion", "notion.admin.export", "notion/{w}/export"),
			def("put", "notes", "notes.put", "notes/{w}")),
	}))
	return m, c
}

func TestDecideOrderAndReasons(t *testing.T) {
	m, c := newTurn(t, turn.Config{})
	cases := []struct {
		name  string
		alias string
		args  string
		at    time.Time
		want  reason.Code
	}{
		{"allowed", "notion_search", `{"w":"acme"}`, t0, ""},
		{"unknown tool", "notion_delete", `{"w":"acme"}`, t0, reason.UnknownTool},
		{"not discoverable: capability outside every grant", "notion_export", `{"w":"acme"}`, t0, reason.NotDiscoverable},
		{"invalid arguments", "notion_search", `{"x":1}`, t0, reason.InvalidArguments},
		{"requirement climbs the tree", "notion_search", `{"w":".."}`, t0, reason.InvalidArguments},
		{"no matching grant: resource outside", "notion_search", `{"w":"globex"}`, t0, reason.NoMatchingGrant},
		{"grant lapsed at the instant", "notion_search", `{"w":"acme"}`, t0.Add(time.Hour), reason.NotDiscoverable},
	}
	for _, tc := range cases {
		d, rec := m.Decide(tc.at, turn.Invocation{Alias: tc.alias, Arguments: json.RawMessage(tc.args)})
		c.add(rec)
		got := reason.Code("")
		if d.Err != nil {
			got = d.Err.Code
		}
		if got != tc.want {
			t.Errorf("%s: got %q (%v), want %q", tc.name, got, d.Err, tc.want)
		}
		ev := rec.Event
		if ev.Type != audit.ToolInvoked || ev.CatalogHash != m.Registry().Hash() || ev.Call.Alias != tc.alias {
			t.Errorf("%s: event %+v", tc.name, ev)
		}
		if (ev.Call.Decision == "deny") != (tc.want != "") || ev.Call.Reason != string(tc.want) {
			t.Errorf("%s: recorded decision %s/%s", tc.name, ev.Call.Decision, ev.Call.Reason)
		}
		if d.Err == nil {
			c.add(mustComplete(t, m, tc.at, turn.Completion{CallID: d.CallID}))
		}
	}
	if m.Steps() != 1 {
		t.Errorf("steps = %d, want 1 (refusals are not steps)", m.Steps())
	}
	m.BeginClose()
	c.add(m.Finish(t0.Add(time.Hour), "closed")) // not before the last decision: times never decrease in a chain
	if rep := audit.Verify(c.recs, false); !rep.OK() {
		t.Fatalf("chain does not verify: %v", rep.Violations)
	}
}

func mustComplete(t *testing.T, m *turn.Machine, at time.Time, comp turn.Completion) *audit.Record {
	t.Helper()
	rec, err := m.Complete(at, comp)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func TestNamespacesApplyPerOperation(t *testing.T) {
	m, c := newTurn(t, turn.Config{})
	c.add(mustUpdate(t, m, []string{"notes"}))
	d, rec := m.Decide(t0, turn.Invocation{Alias: "notion_search", Arguments: json.RawMessage(`{"w":"acme"}`)})
	c.add(rec)
	if !errors.Is(d.Err, reason.ErrNamespaceDisabled) {
		t.Fatalf("got %v, want namespace_disabled", d.Err)
	}
	listed, _, rec, err := m.List(t0)
	c.add(rec)
	if err != nil || len(listed) != 1 || listed[0].Alias != "notes_put" {
		t.Fatalf("listing with notion disabled: %v %v", listed, err)
	}
	ns, _ := m.ListNamespaces()
	if len(ns) != 2 || ns[0].Name != "notes" || !ns[0].Enabled || ns[1].Name != "notion" || ns[1].Enabled || ns[1].Tools != 2 {
		t.Fatalf("namespaces = %+v", ns)
	}
}

func mustUpdate(t *testing.T, m *turn.Machine, ns []string) *audit.Record {
	t.Helper()
	rec, err := m.UpdateNamespaces(t0, ns)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func TestStepCeilingAndInFlightBound(t *testing.T) {
	m, c := newTurn(t, turn.Config{StepCeiling: 2, MaxInFlight: 1})
	call := turn.Invocation{Alias: "notes_put", Arguments: json.RawMessage(`{"w":"x"}`)}
	d1, rec := m.Decide(t0, call)
	c.add(rec)
	if d1.Err != nil {
		t.Fatal(d1.Err)
	}
	d2, rec := m.Decide(t0, call)
	c.add(rec)
	if !errors.Is(d2.Err, reason.ErrOverloaded) {
		t.Fatalf("second concurrent call: %v, want overloaded", d2.Err)
	}
	c.add(mustComplete(t, m, t0, turn.Completion{CallID: d1.CallID}))
	d3, rec := m.Decide(t0, call)
	c.add(rec)
	c.add(mustComplete(t, m, t0, turn.Completion{CallID: d3.CallID, IsError: true}))
	d4, rec := m.Decide(t0, call)
	c.add(rec)
	if d3.Err != nil || !errors.Is(d4.Err, reason.ErrStepCeilingExceeded) {
		t.Fatalf("third: %v, fourth: %v", d3.Err, d4.Err)
	}
	if _, err := m.Complete(t0, turn.Completion{CallID: "nope"}); err == nil {
		t.Fatal("completion of an unknown call accepted")
	}
}

func TestCloseWaitsForInFlight(t *testing.T) {
	m, c := newTurn(t, turn.Config{})
	d, rec := m.Decide(t0, turn.Invocation{Alias: "notes_put", Arguments: json.RawMessage(`{"w":"x"}`)})
	c.add(rec)
	if m.BeginClose() {
		t.Fatal("BeginClose said done with a call in flight")
	}
	if _, _, _, err := m.List(t0); !errors.Is(err, reason.ErrTurnClosed) {
		t.Fatalf("list while closing: %v", err)
	}
	c.add(mustComplete(t, m, t0, turn.Completion{CallID: d.CallID, Err: reason.New(reason.ProviderTimeout, "slow")}))
	closed := c.add(m.Finish(t0, "released"))
	if closed.Event.Close.Steps != 1 || closed.Event.Close.Events != uint64(len(c.recs)) {
		t.Fatalf("turn.closed = %+v, chain has %d", closed.Event.Close, len(c.recs))
	}
	if m.Finish(t0, "again") != nil {
		t.Fatal("second Finish recorded again")
	}
	if rep := audit.Verify(c.recs, false); !rep.OK() {
		t.Fatalf("chain: %v", rep.Violations)
	}
	var completed *audit.Event
	for _, r := range c.recs {
		var ev audit.Event
		_ = json.Unmarshal(r, &ev)
		if ev.Type == audit.ToolCompleted {
			completed = &ev
		}
	}
	if completed == nil || completed.Call.Outcome != "failed" || completed.Call.Reason != "provider_timeout" {
		t.Fatalf("tool.completed = %+v", completed)
	}
}

func TestFailedResolutionHoldsNothing(t *testing.T) {
	access := authority.AccessContext{Tenant: "acme", Principal: "ada", TurnID: "t1", Now: t0}
	m, _ := turn.New(turn.Config{Incarnation: "i", StepCeiling: 1}, access)
	rec := m.Resolve(t0, turn.Resolution{Err: reason.New(reason.ProviderUnavailable, "down")})
	if m.Resolved() || rec.Event.CatalogHash != "" {
		t.Fatal("a failed resolution was held")
	}
	if err := m.CheckAccess(authority.AccessContext{Tenant: "acme", Principal: "eve", TurnID: "t1"}); !errors.Is(err, reason.ErrTurnNotFound) {
		t.Fatalf("another principal's access: %v", err)
	}
	if err := m.CheckAccess(authority.AccessContext{Tenant: "acme", Principal: "ada", TurnID: "t1", Now: t0.Add(time.Hour), EnabledNamespaces: []string{"x"}}); err != nil {
		t.Fatalf("same authority at another instant: %v", err)
	}
}
