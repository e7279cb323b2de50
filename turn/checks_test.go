package turn_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/reason"
	"github.com/sharedos/sharedos/turn"
)

// A tool whose requirement has no placeholder resolves the same resource
// whatever the arguments are, so only the schema check can refuse
// schema-invalid arguments to it.
func TestSchemaCheckRefusesWhatTheRequirementWouldAccept(t *testing.T) {
	access := authority.AccessContext{Tenant: "acme", Principal: "ada", TurnID: "t1", Now: t0, EnabledNamespaces: []string{"notes"}}
	m, _ := turn.New(turn.Config{Incarnation: "i", StepCeiling: 10}, access)
	m.Resolve(t0, turn.Resolution{
		Authority: grants(t, authority.GrantSpec{ID: "g", Capability: "notes.*", Resource: "notes/**"}),
		Registry:  registry(t, def("search", "notes", "notes.search", "notes/search")),
	})
	for _, args := range []string{`{"x":1}`, `{"w":1}`, `[]`, `{"w":"ok","w":`} {
		d, rec := m.Decide(t0, turn.Invocation{Alias: "notes_search", Arguments: json.RawMessage(args)})
		if d.Err == nil || d.Err.Code != reason.InvalidArguments {
			t.Fatalf("%s: got %v, want invalid_arguments", args, d.Err)
		}
		if d.Resource != "" || rec.Event.Call.Resource != "" || rec.Event.Call.Reason != string(reason.InvalidArguments) {
			t.Fatalf("%s: refused after the requirement was resolved: %+v", args, rec.Event.Call)
		}
	}
	// The same tool with valid arguments is allowed: the grant covers it.
	d, _ := m.Decide(t0, turn.Invocation{Alias: "notes_search", Arguments: json.RawMessage(`{"w":"ok"}`)})
	if d.Err != nil || d.Resource != "notes/search" || d.Grant != "g" {
		t.Fatalf("valid call: %+v", d)
	}
}

// Each check of decide has an input only it refuses; the order is the
// documented one, so a call failing two checks names the first.
func TestDecideFirstFailingCheckNamesTheReason(t *testing.T) {
	m, _ := newTurn(t, turn.Config{StepCeiling: 1, MaxInFlight: 1})
	for _, tc := range []struct {
		name  string
		inv   turn.Invocation
		at    time.Time
		want  reason.Code
		field string // the resource recorded
	}{
		{"late beats everything", turn.Invocation{Alias: "nope", Late: true}, t0, reason.DeadlineExceeded, ""},
		{"unknown alias", turn.Invocation{Alias: "nope", Arguments: json.RawMessage(`{"x":1}`)}, t0, reason.UnknownTool, ""},
		{"invalid args before requirement", turn.Invocation{Alias: "notion_search", Arguments: json.RawMessage(`{"w":".."`)}, t0, reason.InvalidArguments, ""},
		{"requirement refuses a path segment", turn.Invocation{Alias: "notion_search", Arguments: json.RawMessage(`{"w":"a/b"}`)}, t0, reason.InvalidArguments, ""},
		{"grant: resource outside", turn.Invocation{Alias: "notion_search", Arguments: json.RawMessage(`{"w":"globex"}`)}, t0, reason.NoMatchingGrant, "notion/globex/search"},
		{"discoverable until the instant it expires", turn.Invocation{Alias: "notion_search", Arguments: json.RawMessage(`{"w":"globex"}`)}, t0.Add(time.Hour - time.Nanosecond), reason.NoMatchingGrant, "notion/globex/search"},
		{"expired at the instant", turn.Invocation{Alias: "notion_search", Arguments: json.RawMessage(`{"w":"acme"}`)}, t0.Add(time.Hour), reason.NotDiscoverable, ""},
	} {
		d, rec := m.Decide(tc.at, tc.inv)
		if d.Err == nil || d.Err.Code != tc.want {
			t.Errorf("%s: got %v, want %s", tc.name, d.Err, tc.want)
			continue
		}
		if rec.Event.Call.Decision != "deny" || rec.Event.Call.Reason != string(tc.want) || rec.Event.Call.Resource != tc.field || rec.Event.Call.Step != 0 {
			t.Errorf("%s: recorded %+v", tc.name, rec.Event.Call)
		}
	}
	if m.Steps() != 0 || m.InFlight() != 0 {
		t.Fatalf("refusals counted: steps %d, in flight %d", m.Steps(), m.InFlight())
	}
	// The in-flight bound refuses a call the ceiling would allow ...
	ok := turn.Invocation{Alias: "notes_put", Arguments: json.RawMessage(`{"w":"x"}`)}
	d1, _ := m.Decide(t0, ok)
	if d1.Err != nil || m.InFlight() != 1 || m.Steps() != 1 {
		t.Fatalf("first call: %v (in flight %d, steps %d)", d1.Err, m.InFlight(), m.Steps())
	}
	// ... but here the ceiling (1 step, used) comes first.
	d2, _ := m.Decide(t0, ok)
	if d2.Err == nil || d2.Err.Code != reason.StepCeilingExceeded {
		t.Fatalf("second call: %v, want step_ceiling_exceeded", d2.Err)
	}
	if _, err := m.Complete(t0, turn.Completion{CallID: d1.CallID}); err != nil {
		t.Fatal(err)
	}
	// A completed call is no longer in flight; a second completion is unknown.
	if m.InFlight() != 0 {
		t.Fatalf("in flight %d after completion", m.InFlight())
	}
	if _, err := m.Complete(t0, turn.Completion{CallID: d1.CallID}); err == nil {
		t.Fatal("second completion of one call accepted")
	}
}

// The in-flight bound alone: a large ceiling, a bound of two.
func TestInFlightBoundIsPerTurnAndExact(t *testing.T) {
	m, _ := newTurn(t, turn.Config{StepCeiling: 100, MaxInFlight: 2})
	ok := turn.Invocation{Alias: "notes_put", Arguments: json.RawMessage(`{"w":"x"}`)}
	var ids []string
	for i := range 2 {
		d, _ := m.Decide(t0, ok)
		if d.Err != nil {
			t.Fatalf("call %d: %v", i, d.Err)
		}
		ids = append(ids, d.CallID)
	}
	if d, _ := m.Decide(t0, ok); d.Err == nil || d.Err.Code != reason.Overloaded {
		t.Fatalf("third concurrent call: %v, want overloaded", d.Err)
	}
	if ids[0] == ids[1] {
		t.Fatalf("call ids repeat: %v", ids)
	}
	// MaxInFlight 0 is unbounded.
	u, _ := newTurn(t, turn.Config{StepCeiling: 100})
	for i := range 5 {
		if d, _ := u.Decide(t0, ok); d.Err != nil {
			t.Fatalf("unbounded, call %d: %v", i, d.Err)
		}
	}
}

func TestOperationsBeforeResolutionAreRefused(t *testing.T) {
	access := authority.AccessContext{Tenant: "acme", Principal: "ada", TurnID: "t1", Now: t0, EnabledNamespaces: []string{"notes"}}
	m, _ := turn.New(turn.Config{Incarnation: "i", StepCeiling: 1}, access)
	if m.Resolved() || m.Registry() != nil {
		t.Fatal("a new turn holds a catalogue")
	}
	d, rec := m.Decide(t0, turn.Invocation{Alias: "notes_put", Arguments: json.RawMessage(`{"w":"x"}`)})
	if d.Err == nil || d.Err.Code != reason.Internal || rec != nil || d.Alias != "notes_put" {
		t.Fatalf("decide before resolution: %+v, record %v", d, rec)
	}
	if _, _, rec, err := m.List(t0); !errors.Is(err, reason.ErrInternal) || rec != nil {
		t.Fatalf("list before resolution: %v, record %v", err, rec)
	}
	if _, err := m.ListNamespaces(); !errors.Is(err, reason.ErrInternal) {
		t.Fatalf("namespaces before resolution: %v", err)
	}
	// A failed resolution holds nothing either.
	m.Resolve(t0, turn.Resolution{Err: reason.New(reason.ProviderUnavailable, "down")})
	if _, err := m.ListNamespaces(); !errors.Is(err, reason.ErrInternal) {
		t.Fatalf("namespaces after a failed resolution: %v", err)
	}
}

func TestOperationsOnAClosedTurnAreRefused(t *testing.T) {
	for _, finish := range []bool{false, true} {
		m, _ := newTurn(t, turn.Config{})
		if m.Closed() {
			t.Fatal("a new turn is closed")
		}
		if !m.BeginClose() {
			t.Fatal("BeginClose with nothing in flight must say done")
		}
		if finish {
			if m.Finish(t0, "closed") == nil {
				t.Fatal("no turn.closed")
			}
		}
		if !m.Closed() {
			t.Fatalf("finish=%v: not closed", finish)
		}
		d, rec := m.Decide(t0, turn.Invocation{Alias: "notes_put", Arguments: json.RawMessage(`{"w":"x"}`)})
		if d.Err == nil || d.Err.Code != reason.TurnClosed || rec != nil {
			t.Fatalf("finish=%v: decide: %v, record %v", finish, d.Err, rec)
		}
		if _, _, rec, err := m.List(t0); !errors.Is(err, reason.ErrTurnClosed) || rec != nil {
			t.Fatalf("finish=%v: list: %v", finish, err)
		}
		if _, err := m.ListNamespaces(); !errors.Is(err, reason.ErrTurnClosed) {
			t.Fatalf("finish=%v: namespaces: %v", finish, err)
		}
		if rec, err := m.UpdateNamespaces(t0, []string{"notes"}); !errors.Is(err, reason.ErrTurnClosed) || rec != nil {
			t.Fatalf("finish=%v: update namespaces: %v", finish, err)
		}
		if err := m.CheckAccess(m.Access()); !errors.Is(err, reason.ErrTurnClosed) {
			t.Fatalf("finish=%v: check access: %v", finish, err)
		}
		// BeginClose again keeps it closed (never reopens a closed turn).
		m.BeginClose()
		if !m.Closed() {
			t.Fatalf("finish=%v: BeginClose reopened", finish)
		}
	}
}

// A closed turn stays closed: BeginClose after Finish must not move it
// back to closing, where a second Finish would record again.
func TestBeginCloseAfterFinishRecordsNothing(t *testing.T) {
	m, _ := newTurn(t, turn.Config{})
	m.BeginClose()
	m.Finish(t0, "closed")
	m.BeginClose()
	if rec := m.Finish(t0, "again"); rec != nil {
		t.Fatalf("second turn.closed: %+v", rec.Event)
	}
}

func TestUpdateNamespacesLimits(t *testing.T) {
	m, _ := newTurn(t, turn.Config{})
	long := strings.Repeat("n", 128)
	many := make([]string, 1024)
	for i := range many {
		many[i] = "n" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26%26))
	}
	for _, tc := range []struct {
		name string
		ns   []string
		ok   bool
	}{
		{"empty name", []string{"notes", ""}, false},
		{"128 bytes", []string{long}, true},
		{"129 bytes", []string{long + "n"}, false},
		{"1024 names", many, true},
		{"1025 names", append(append([]string{}, many...), "z"), false},
		{"none", nil, true},
	} {
		before := m.Namespaces()
		rec, err := m.UpdateNamespaces(t0, tc.ns)
		if tc.ok {
			if err != nil || rec == nil || rec.Event.Type != audit.NamespacesUpdated {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, reason.ErrInvalidRequest) || rec != nil {
			t.Errorf("%s: got %v, want invalid_request", tc.name, err)
		}
		if !reflect.DeepEqual(m.Namespaces(), before) {
			t.Errorf("%s: a refused update changed the namespaces to %v", tc.name, m.Namespaces())
		}
	}
	// The list is normalized: sorted, duplicates dropped, and a copy.
	rec, _ := m.UpdateNamespaces(t0, []string{"notion", "notes", "notion"})
	if want := []string{"notes", "notion"}; !reflect.DeepEqual(rec.Event.Namespaces, want) || !reflect.DeepEqual(m.Namespaces(), want) {
		t.Fatalf("namespaces %v / %v", rec.Event.Namespaces, m.Namespaces())
	}
	m.Namespaces()[0] = "x"
	if m.Namespaces()[0] != "notes" {
		t.Fatal("Namespaces returned the turn's own slice")
	}
}

func TestListNamespacesSortedWithCounts(t *testing.T) {
	access := authority.AccessContext{Tenant: "acme", Principal: "ada", TurnID: "t1", Now: t0, EnabledNamespaces: []string{"b"}}
	m, _ := turn.New(turn.Config{Incarnation: "i", StepCeiling: 1}, access)
	m.Resolve(t0, turn.Resolution{
		Authority: grants(t),
		Registry:  registry(t, def("x", "c", "c.x", "c/x"), def("y", "a", "a.y", "a/y"), def("z", "b", "b.z", "b/z"), def("w", "c", "c.w", "c/w")),
	})
	got, err := m.ListNamespaces()
	want := []turn.NamespaceInfo{{Name: "a", Tools: 1}, {Name: "b", Enabled: true, Tools: 1}, {Name: "c", Tools: 2}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}
}

func TestListPages(t *testing.T) {
	access := authority.AccessContext{Tenant: "acme", Principal: "ada", TurnID: "t1", Now: t0, EnabledNamespaces: []string{"a", "b"}}
	m, _ := turn.New(turn.Config{Incarnation: "i", StepCeiling: 1}, access)
	m.Resolve(t0, turn.Resolution{
		Authority: grants(t, authority.GrantSpec{ID: "g", Capability: "**", Resource: "**"}),
		Registry:  registry(t, def("t1", "a", "a.t1", "a/1"), def("t2", "a", "a.t2", "a/2"), def("t3", "c", "c.t3", "c/3"), def("t4", "b", "b.t4", "b/4")),
	})
	all, hash, rec, err := m.List(t0)
	if err != nil || hash != m.Registry().Hash() || rec.Event.CatalogHash != hash {
		t.Fatalf("list: %v", err)
	}
	var aliases []string
	for _, l := range all {
		aliases = append(aliases, l.Alias)
	}
	if want := []string{"a_t1", "a_t2", "b_t4"}; !reflect.DeepEqual(aliases, want) || !reflect.DeepEqual(rec.Event.Listed, want) {
		t.Fatalf("listed %v / %v", aliases, rec.Event.Listed)
	}
	size := turn.ListedSize(all[0].Alias, all[0].Tool)
	// A page of exactly one tool's size holds one tool; the next page starts after it.
	page, next, _, rec, err := m.ListPage(t0, turn.Page{MaxBytes: size})
	if err != nil || len(page) != 1 || page[0].Alias != "a_t1" || next != "a_t1" || !reflect.DeepEqual(rec.Event.Listed, []string{"a_t1"}) {
		t.Fatalf("first page: %v next %q %v", page, next, err)
	}
	// A bound below one tool's size still shows one tool.
	page, next, _, _, _ = m.ListPage(t0, turn.Page{After: "a_t1", MaxBytes: 1})
	if len(page) != 1 || page[0].Alias != "a_t2" || next != "a_t2" {
		t.Fatalf("second page: %v next %q", page, next)
	}
	// The rest fits: the last page has no cursor.
	page, next, _, _, _ = m.ListPage(t0, turn.Page{After: "a_t2", MaxBytes: 10 * size})
	if len(page) != 1 || page[0].Alias != "b_t4" || next != "" {
		t.Fatalf("last page: %v next %q", page, next)
	}
	if _, _, _, rec, err := m.ListPage(t0, turn.Page{After: "zz"}); !errors.Is(err, reason.ErrInvalidRequest) || rec != nil {
		t.Fatalf("unknown cursor: %v", err)
	}
	// After the last alias: an empty page.
	page, next, _, rec, err = m.ListPage(t0, turn.Page{After: "b_t4"})
	if err != nil || len(page) != 0 || next != "" || len(rec.Event.Listed) != 0 {
		t.Fatalf("past the end: %v %q %v", page, next, err)
	}
}

func TestDegradedListsProvidersNotOK(t *testing.T) {
	access := authority.AccessContext{Tenant: "acme", Principal: "ada", TurnID: "t1", Now: t0}
	m, _ := turn.New(turn.Config{Incarnation: "i", StepCeiling: 1}, access)
	ps := []audit.ProviderStatus{{Provider: "a", Status: "ok"}, {Provider: "b", Status: "failed", Reason: "provider_timeout"}, {Provider: "c", Status: "partial", Refused: []string{"x"}}}
	m.Resolve(t0, turn.Resolution{Authority: grants(t), Registry: registry(t, def("x", "n", "n.x", "n/x")), Providers: ps})
	if got := m.Degraded(); !reflect.DeepEqual(got, ps[1:]) {
		t.Fatalf("degraded %+v", got)
	}
}

// Every record the machine produces, field by field: the identity and chain
// position shared by all, and each type's own fields.
func TestEveryRecordFieldByField(t *testing.T) {
	access := authority.AccessContext{
		Tenant: "acme", Principal: "ada", CredentialProfile: "prof", TurnID: "t9", Now: t0,
		EnabledNamespaces: []string{"notion", "notes", "notion"}, Attributes: map[string]string{"plan": "pro"},
	}
	cfg := turn.Config{Node: "node-1", Incarnation: "inc", StepCeiling: 5, OneOperation: true}
	m, opened := turn.New(cfg, access)
	if m.TurnID() != "t9" || m.Key() != authority.TurnAuthorityKey(access) || !reflect.DeepEqual(m.Access(), access) {
		t.Fatalf("identity: %s %s", m.TurnID(), m.Key())
	}
	recs := []*audit.Record{opened}
	at := func(d time.Duration) time.Time { return t0.Add(d).In(time.FixedZone("x", 3600)) }

	ps := []audit.ProviderStatus{{Provider: "p", Status: "ok", Tools: 2, DurationMicros: 7}}
	reg := registry(t, def("search", "notion", "notion.search", "notion/{w}/search"), def("put", "notes", "notes.put", "notes/{w}"))
	resolved := m.Resolve(at(time.Second), turn.Resolution{
		Authority: grants(t, authority.GrantSpec{ID: "g-notes", Capability: "notes.*", Resource: "notes/**"}),
		Registry:  reg, Providers: ps,
	})
	recs = append(recs, resolved)
	put, _ := reg.Lookup("notes_put")
	search, _ := reg.Lookup("notion_search")

	_, _, listed, err := m.List(at(2 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	recs = append(recs, listed)
	args := json.RawMessage(`{"w":"x"}`)
	d, invoked := m.Decide(at(3*time.Second), turn.Invocation{Alias: "notes_put", Arguments: args})
	recs = append(recs, invoked)
	_, denied := m.Decide(at(4*time.Second), turn.Invocation{Alias: "notion_search", Arguments: args})
	recs = append(recs, denied)
	updated, err := m.UpdateNamespaces(at(5*time.Second), []string{"notes"})
	if err != nil {
		t.Fatal(err)
	}
	recs = append(recs, updated)
	completed, err := m.Complete(at(5*time.Second+1500*time.Microsecond), turn.Completion{CallID: d.CallID, ResultLen: 42, IsError: true})
	if err != nil {
		t.Fatal(err)
	}
	recs = append(recs, completed)
	m.BeginClose()
	recs = append(recs, m.Finish(at(6*time.Second), "one_operation"))

	h := reg.Hash()
	sum := sha256.Sum256(args)
	argsHash := hex.EncodeToString(sum[:])
	var tools []audit.Tool
	for _, tl := range []struct {
		alias string
		t     *catalog.Tool
	}{{"notes_put", put}, {"notion_search", search}} {
		tools = append(tools, audit.Tool{Alias: tl.alias, Provider: "p", Name: tl.t.Identity.Name, Namespace: tl.t.Namespace, Revision: tl.t.Revision})
	}
	if tools[0].Name != "put" || tools[1].Name != "search" {
		t.Fatalf("identities %+v", tools)
	}
	ns := []string{"notes", "notion"}
	want := []audit.Event{
		{Type: audit.TurnOpened, Namespaces: ns},
		{Type: audit.CatalogResolved, CatalogHash: h, Catalog: &audit.Catalog{Tools: tools, Providers: ps}},
		{Type: audit.CatalogListed, CatalogHash: h, Namespaces: ns, Listed: []string{"notes_put"}},
		{Type: audit.ToolInvoked, CatalogHash: h, Namespaces: ns, Call: &audit.Call{
			ID: "c1", Alias: "notes_put", Provider: "p", Name: "put", Revision: put.Revision, Step: 1,
			Decision: "allow", Resource: "notes/x", Grant: "g-notes", ArgsHash: argsHash}},
		{Type: audit.ToolInvoked, CatalogHash: h, Namespaces: ns, Call: &audit.Call{
			ID: "c2", Alias: "notion_search", Provider: "p", Name: "search", Revision: search.Revision,
			Decision: "deny", Reason: string(reason.NotDiscoverable), ArgsHash: argsHash}},
		{Type: audit.NamespacesUpdated, Namespaces: []string{"notes"}},
		{Type: audit.ToolCompleted, CatalogHash: h, Call: &audit.Call{
			ID: "c1", Alias: "notes_put", Provider: "p", Name: "put", Revision: put.Revision,
			Outcome: "tool_error", Duration: 2001500, ResultLen: 42}},
		{Type: audit.TurnClosed, CatalogHash: h, Close: &audit.Close{Reason: "one_operation", Steps: 1, Events: 8}},
	}
	times := []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 5 * time.Second, 5*time.Second + 1500*time.Microsecond, 6 * time.Second}
	if len(recs) != len(want) {
		t.Fatalf("%d records", len(recs))
	}
	prev := ""
	for i, rec := range recs {
		w := want[i]
		w.ID = "inc-" + string(rune('0'+i))
		w.Time = t0.Add(times[i]).UTC()
		w.Node, w.Tenant, w.Principal, w.CredentialProfile, w.TurnID = "node-1", "acme", "ada", "prof", "t9"
		w.OneOperation, w.Seq, w.PrevHash = true, uint64(i), prev
		if !reflect.DeepEqual(*rec.Event, w) {
			t.Errorf("record %d (%s):\n got  %+v\n want %+v", i, w.Type, *rec.Event, w)
			if rec.Event.Call != nil && w.Call != nil {
				t.Errorf("  call got %+v\n  want %+v", *rec.Event.Call, *w.Call)
			}
		}
		if rec.Event.Time.Location() != time.UTC {
			t.Errorf("record %d: time not in UTC", i)
		}
		var decoded audit.Event
		if err := json.Unmarshal(rec.Data, &decoded); err != nil || !reflect.DeepEqual(decoded, w) {
			t.Errorf("record %d: encoded bytes decode to %+v (%v)", i, decoded, err)
		}
		if rec.Hash != audit.HashData(rec.Data) {
			t.Errorf("record %d: hash is not the hash of its bytes", i)
		}
		prev = rec.Hash
	}
	var data [][]byte
	for _, r := range recs {
		data = append(data, r.Data)
	}
	if rep := audit.Verify(data, false); !rep.OK() {
		t.Fatalf("chain: %v", rep.Violations)
	}
}

// A failed resolution records its providers and an empty tool list, no hash.
func TestFailedResolutionRecord(t *testing.T) {
	access := authority.AccessContext{Tenant: "acme", Principal: "ada", TurnID: "t1", Now: t0}
	m, _ := turn.New(turn.Config{Incarnation: "i", StepCeiling: 1}, access)
	ps := []audit.ProviderStatus{{Provider: "p", Status: "failed", Reason: "provider_unavailable"}}
	rec := m.Resolve(t0, turn.Resolution{Err: reason.New(reason.ProviderUnavailable, "down"), Providers: ps,
		Registry: registry(t, def("x", "n", "n.x", "n/x"))})
	want := &audit.Catalog{Tools: []audit.Tool{}, Providers: ps}
	if !reflect.DeepEqual(rec.Event.Catalog, want) || rec.Event.CatalogHash != "" || m.Resolved() || m.Degraded() != nil {
		t.Fatalf("failed resolution: %+v", rec.Event)
	}
	// Closing a turn that never held a catalogue records no hash.
	m.BeginClose()
	closed := m.Finish(t0, "idle")
	if closed.Event.CatalogHash != "" || closed.Event.Close.Events != 3 || closed.Event.Close.Steps != 0 || closed.Event.Seq != 2 {
		t.Fatalf("turn.closed %+v %+v", closed.Event, closed.Event.Close)
	}
}

// ListedSize counts every field a listing shows, each by its length.
func TestListedSizeCountsEveryField(t *testing.T) {
	base := catalog.Tool{
		Identity: catalog.Identity{Provider: "p", Name: "n"}, Namespace: "ns", Revision: "r", Description: "d",
		InputSchema: json.RawMessage(`{}`), OutputSchema: json.RawMessage(`{}`), Annotations: json.RawMessage(`{}`),
	}
	want := 160 + len("a") + 1 + 1 + 2 + 1 + 1 + 2 + 2 + 2
	if got := turn.ListedSize("a", &base); got != want {
		t.Fatalf("ListedSize = %d, want %d", got, want)
	}
	for name, grow := range map[string]func(tl *catalog.Tool){
		"provider":      func(tl *catalog.Tool) { tl.Identity.Provider += "xyz" },
		"name":          func(tl *catalog.Tool) { tl.Identity.Name += "xyz" },
		"namespace":     func(tl *catalog.Tool) { tl.Namespace += "xyz" },
		"revision":      func(tl *catalog.Tool) { tl.Revision += "xyz" },
		"description":   func(tl *catalog.Tool) { tl.Description += "xyz" },
		"input schema":  func(tl *catalog.Tool) { tl.InputSchema = json.RawMessage(`{xyz}`) },
		"output schema": func(tl *catalog.Tool) { tl.OutputSchema = json.RawMessage(`{xyz}`) },
		"annotations":   func(tl *catalog.Tool) { tl.Annotations = json.RawMessage(`{xyz}`) },
	} {
		tl := base
		grow(&tl)
		if got := turn.ListedSize("a", &tl); got != want+3 {
			t.Errorf("%s grown: ListedSize = %d, want %d", name, got, want+3)
		}
	}
	if got := turn.ListedSize("abcd", &base); got != want+3 {
		t.Errorf("longer alias: ListedSize = %d, want %d", got, want+3)
	}
}

// A page's byte budget is spent by the sum of its tools, not by each.
func TestListPageBudgetIsCumulative(t *testing.T) {
	access := authority.AccessContext{Tenant: "acme", Principal: "ada", TurnID: "t1", Now: t0, EnabledNamespaces: []string{"a"}}
	m, _ := turn.New(turn.Config{Incarnation: "i", StepCeiling: 1}, access)
	m.Resolve(t0, turn.Resolution{
		Authority: grants(t, authority.GrantSpec{ID: "g", Capability: "**", Resource: "**"}),
		Registry:  registry(t, def("t1", "a", "a.t1", "a/1"), def("t2", "a", "a.t2", "a/2"), def("t3", "a", "a.t3", "a/3")),
	})
	all, _, _, _ := m.List(t0)
	two := turn.ListedSize(all[0].Alias, all[0].Tool) + turn.ListedSize(all[1].Alias, all[1].Tool)
	for _, tc := range []struct {
		budget int
		want   int
	}{{two, 2}, {two - 1, 1}, {two + turn.ListedSize(all[2].Alias, all[2].Tool), 3}, {0, 3}} {
		page, next, _, _, err := m.ListPage(t0, turn.Page{MaxBytes: tc.budget})
		if err != nil || len(page) != tc.want {
			t.Errorf("budget %d: %d tools, want %d (%v)", tc.budget, len(page), tc.want, err)
			continue
		}
		if wantNext := page[len(page)-1].Alias; tc.want < 3 && next != wantNext || tc.want == 3 && next != "" {
			t.Errorf("budget %d: next %q", tc.budget, next)
		}
	}
}

// The conformance proof's switch: without a held registry every operation
// re-resolves, but never while a call is in flight (its completion joins
// the catalogue it was decided against).
func TestReresolvePerOperationSwitch(t *testing.T) {
	m, _ := newTurn(t, turn.Config{Switches: turn.Switches{ReresolvePerOperation: true}})
	d, _ := m.Decide(t0, turn.Invocation{Alias: "notes_put", Arguments: json.RawMessage(`{"w":"x"}`)})
	if d.Err != nil || !m.Resolved() {
		t.Fatalf("dropped the registry with a call in flight: %v resolved=%v", d.Err, m.Resolved())
	}
	if _, err := m.Complete(t0, turn.Completion{CallID: d.CallID}); err != nil || m.Resolved() {
		t.Fatalf("kept the registry after the last completion: %v resolved=%v", err, m.Resolved())
	}
	m2, _ := newTurn(t, turn.Config{Switches: turn.Switches{ReresolvePerOperation: true}})
	if _, _, _, err := m2.List(t0); err != nil || m2.Resolved() {
		t.Fatalf("kept the registry after a listing: %v", err)
	}
	m3, _ := newTurn(t, turn.Config{})
	m3.List(t0)
	if !m3.Resolved() {
		t.Fatal("dropped the registry without the switch")
	}
}

// An instant earlier than one the turn already recorded is clamped to it:
// the record carries the later time and the decision is judged at it.
// Switches.StampAtAdmission (the conformance proof) turns the clamp off.
func TestEarlierInstantsAreClampedToTheLatest(t *testing.T) {
	late := t0.Add(2 * time.Hour) // g-notion expired at t0+1h
	call := turn.Invocation{Alias: "notion_search", Arguments: json.RawMessage(`{"w":"acme"}`)}
	for _, stamp := range []bool{false, true} {
		m, c := newTurn(t, turn.Config{Switches: turn.Switches{StampAtAdmission: stamp}})
		d, rec := m.Decide(late, call)
		c.add(rec)
		if d.Err == nil || d.Err.Code != reason.NotDiscoverable || !rec.Event.Time.Equal(late) {
			t.Fatalf("stamp=%v: at +2h: %v at %s", stamp, d.Err, rec.Event.Time)
		}
		d, rec = m.Decide(t0, call)
		c.add(rec)
		if !stamp {
			if d.Err == nil || d.Err.Code != reason.NotDiscoverable || !rec.Event.Time.Equal(late) {
				t.Fatalf("clamped: %v at %s, want not_discoverable at %s", d.Err, rec.Event.Time, late)
			}
			if rep := audit.Verify(c.recs, true); !rep.OK() {
				t.Fatalf("clamped chain: %v", rep.Violations)
			}
			// A later instant moves the clamp on.
			_, rec = m.Decide(late.Add(time.Second), call)
			if !rec.Event.Time.Equal(late.Add(time.Second)) {
				t.Fatalf("later instant recorded at %s", rec.Event.Time)
			}
			continue
		}
		if d.Err != nil || !rec.Event.Time.Equal(t0) {
			t.Fatalf("stamped at admission: %v at %s, want allowed at %s", d.Err, rec.Event.Time, t0)
		}
		if rep := audit.Verify(c.recs, true); rep.OK() || !strings.Contains(rep.Violations[0].Reason, "time regressed") {
			t.Fatalf("unclamped chain verified: %v", rep.Violations)
		}
	}
}
