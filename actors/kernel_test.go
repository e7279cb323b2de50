package actors_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/projection"
	"github.com/sharedos/sharedos/reason"
	"github.com/sharedos/sharedos/turn"
)

// protoactor's dead-letter throttle starts a goroutine that ends by itself
// one throttle interval after a message to a stopped turn; it is the
// library's, bounded, and not ours to stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

func start(t *testing.T, f *conformance.Fixture, adjust func(*actors.Options)) *actors.Kernel {
	t.Helper()
	opts := f.Options()
	if adjust != nil {
		adjust(&opts)
	}
	k, err := actors.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := k.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return k
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func args(ws string) []byte { return []byte(`{"workspace":"` + ws + `","query":"q"}`) }

func events(f *conformance.Fixture, turnID string, typ audit.Type) []*audit.Event {
	var out []*audit.Event
	for _, ev := range f.Sink.Events(turnID) {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func TestLeaseSharedUntilLastRelease(t *testing.T) {
	f := conformance.NewFixture(t)
	k := start(t, f, nil)
	c := ctx(t)
	first, err := k.Open(c, conformance.Ada)
	if err != nil {
		t.Fatal(err)
	}
	who := conformance.Ada
	who.TurnID = first.TurnID
	second, err := k.Open(c, who)
	if err != nil || !second.Attached || second.LeaseID == first.LeaseID {
		t.Fatalf("attach: %+v %v", second, err)
	}
	who.LeaseID = first.LeaseID
	if _, err := k.ListTools(c, who); err != nil {
		t.Fatal(err)
	}
	if err := k.Close(c, who, first.LeaseID); err != nil {
		t.Fatal(err)
	}
	// A released lease no longer operates on the turn.
	if _, err := k.ListTools(c, who); !errors.Is(err, reason.ErrTurnNotFound) {
		t.Fatalf("operation with a released lease: %v, want turn_not_found", err)
	}
	// Still held by the second lease, with the same catalogue.
	who.LeaseID = second.LeaseID
	if _, err := k.Invoke(c, who, "notion_search", args("acme")); err != nil {
		t.Fatalf("call after first release: %v", err)
	}
	if a, d := events(f, who.TurnID, audit.TurnAttached), events(f, who.TurnID, audit.TurnDetached); len(a) != 1 || a[0].Lease.Holders != 2 ||
		len(d) != 1 || d[0].Lease.Holders != 1 || d[0].Lease.IDHash == a[0].Lease.IDHash {
		t.Fatalf("turn.attached %+v, turn.detached %+v: want one each (2 then 1 holders), for different leases", a, d)
	}
	if err := k.Close(c, who, first.LeaseID); err != nil {
		t.Fatalf("releasing a lease twice: %v", err)
	}
	if err := k.Close(c, who, second.LeaseID); err != nil {
		t.Fatal(err)
	}
	if got := events(f, who.TurnID, audit.TurnClosed); len(got) != 1 || got[0].Close.Reason != "released" {
		t.Fatalf("turn.closed events: %+v", got)
	}
	if _, err := k.ListTools(c, who); !errors.Is(err, reason.ErrTurnClosed) {
		t.Fatalf("list after close: %v, want turn_closed", err)
	}
	if _, err := k.Open(c, who); !errors.Is(err, reason.ErrTurnClosed) {
		t.Fatalf("reopening a closed turn id: %v, want turn_closed", err)
	}
	if f.Notion.CatalogCalls() != 1 {
		t.Fatalf("provider asked %d times across two leases", f.Notion.CatalogCalls())
	}
}

func TestTurnBelongsToItsAuthority(t *testing.T) {
	f := conformance.NewFixture(t)
	k := start(t, f, nil)
	c := ctx(t)
	o, err := k.Open(c, conformance.Ada)
	if err != nil {
		t.Fatal(err)
	}
	eve := conformance.Bob
	eve.TurnID, eve.LeaseID = o.TurnID, o.LeaseID
	if _, err := k.ListTools(c, eve); !errors.Is(err, reason.ErrTurnNotFound) {
		t.Fatalf("another principal on ada's turn: %v, want turn_not_found", err)
	}
	if _, err := k.Open(c, eve); !errors.Is(err, reason.ErrInvalidRequest) {
		t.Fatalf("another principal opening ada's turn id: %v", err)
	}
	ghost := conformance.Ada
	ghost.TurnID = "n1.never-opened"
	if _, err := k.Invoke(c, ghost, "notion_search", args("acme")); !errors.Is(err, reason.ErrTurnNotFound) {
		t.Fatalf("unknown turn: %v, want turn_not_found", err)
	}
	ghost.TurnID = "../directory"
	if _, err := k.ListTools(c, ghost); !errors.Is(err, reason.ErrTurnNotFound) {
		t.Fatalf("path-like turn id: %v", err)
	}
	if _, err := k.Open(c, ghost); !errors.Is(err, reason.ErrInvalidRequest) {
		t.Fatalf("open with path-like turn id: %v", err)
	}
	if _, err := k.Open(c, authority.AccessContext{Tenant: "acme"}); !errors.Is(err, reason.ErrInvalidRequest) {
		t.Fatalf("open without principal: %v", err)
	}
}

func TestIdleTurnCloses(t *testing.T) {
	f := conformance.NewFixture(t)
	k := start(t, f, func(o *actors.Options) { o.IdleTimeout = 20 * time.Millisecond })
	c := ctx(t)
	o, err := k.Open(c, conformance.Ada)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Sink.WaitFor(c, func(recs []*audit.Record) bool {
		for _, r := range recs {
			if r.Event.TurnID == o.TurnID && r.Event.Type == audit.TurnClosed && r.Event.Close.Reason == "idle" {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatal("turn never idled out")
	}
	who := conformance.Ada
	who.TurnID, who.LeaseID = o.TurnID, o.LeaseID
	// The directory hears of the stop asynchronously; the answer is
	// turn_closed once it has, and never anything but closed/not-found.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := k.ListTools(c, who)
		if errors.Is(err, reason.ErrTurnClosed) {
			break
		}
		if !errors.Is(err, reason.ErrTurnNotFound) || time.Now().After(deadline) {
			t.Fatalf("after idle close: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	if n, _ := k.OpenTurns(c); n != 0 {
		t.Fatalf("%d turns still open", n)
	}
}

func TestProviderFailuresAreClassifiedAndRecorded(t *testing.T) {
	f := conformance.NewFixture(t)
	f.Notes.FailWith(reason.New(reason.ProviderUnavailable, "no responders"))
	k := start(t, f, nil)
	c := ctx(t)
	l, err := k.ListTools(c, conformance.Ada)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Tools) != 1 || l.Tools[0].Alias != "notion_search" {
		t.Fatalf("a failed provider's tools must be absent, others present: %+v", l.Tools)
	}
	res := events(f, "", audit.CatalogResolved)
	if len(res) != 1 {
		t.Fatalf("%d resolutions", len(res))
	}
	var notes audit.ProviderStatus
	for _, p := range res[0].Catalog.Providers {
		if p.Provider == "notes" {
			notes = p
		}
	}
	if notes.Status != "failed" || notes.Reason != "provider_unavailable" {
		t.Fatalf("notes status recorded as %+v", notes)
	}

	// Required: the whole resolution fails with the class.
	f2 := conformance.NewFixture(t)
	f2.Notes.FailWith(context.DeadlineExceeded)
	k2 := start(t, f2, func(o *actors.Options) { o.Required = []string{"notes"} })
	if _, err := k2.ListTools(c, conformance.Ada); !errors.Is(err, reason.ErrProviderTimeout) {
		t.Fatalf("required provider timing out: %v, want provider_timeout", err)
	}
}

type panicky struct{ providers.ContextToolProvider }

func (panicky) Catalog(context.Context, authority.AccessContext) (providers.Catalog, error) {
	panic("catalogue exploded")
}

func TestPanickingProvidersDoNotSinkTheNode(t *testing.T) {
	f := conformance.NewFixture(t)
	boom := providers.NewMemory("boom")
	f.Notion.Set(providers.MemoryTool{Definition: conformance.SearchDef("notion.search"), Handler: func(context.Context, providers.Call) (providers.Result, error) {
		panic("tool exploded")
	}})
	k := start(t, f, func(o *actors.Options) { o.Providers = append(o.Providers, panicky{boom}) })
	c := ctx(t)
	who, _ := openAs(t, k, conformance.Ada)
	if _, err := k.Invoke(c, who, "notion_search", args("acme")); !errors.Is(err, reason.ErrProviderError) {
		t.Fatalf("panicking tool: %v, want provider_error", err)
	}
	if _, err := k.Invoke(c, who, "notes_put", []byte(`{"space":"acme","title":"t"}`)); err != nil {
		t.Fatalf("the turn keeps serving: %v", err)
	}
}

func TestExecutionDoesNotBlockTheTurn(t *testing.T) {
	f := conformance.NewFixture(t)
	release := make(chan struct{})
	var running atomic.Int32
	f.Notion.Set(providers.MemoryTool{Definition: conformance.SearchDef("notion.search"), Handler: providers.HeldHandler(release, &running, func(int32) providers.Result {
		return providers.Result{Text: "done"}
	})})
	k := start(t, f, nil)
	c := ctx(t)
	who, _ := openAs(t, k, conformance.Ada)
	slow := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := k.Invoke(c, who, "notion_search", args("acme"))
			slow <- err
		}()
	}
	// While both executions are in flight the turn still decides and answers.
	for running.Load() < 2 {
		if _, err := k.ListTools(c, who); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := k.Invoke(c, who, "notes_put", []byte(`{"space":"acme","title":"t"}`)); err != nil {
		t.Fatalf("a call while two slow ones run: %v", err)
	}
	close(release)
	for range 2 {
		if err := <-slow; err != nil {
			t.Fatal(err)
		}
	}
}

func TestCallTimeoutIsProviderTimeout(t *testing.T) {
	f := conformance.NewFixture(t)
	f.Notion.Set(providers.MemoryTool{Definition: conformance.SearchDef("notion.search"), Handler: func(ctx context.Context, _ providers.Call) (providers.Result, error) {
		<-ctx.Done()
		return providers.Result{}, ctx.Err()
	}})
	k := start(t, f, func(o *actors.Options) { o.CallTimeout = 20 * time.Millisecond })
	if _, err := k.Invoke(ctx(t), conformance.Ada, "notion_search", args("acme")); !errors.Is(err, reason.ErrProviderTimeout) {
		t.Fatalf("got %v, want provider_timeout", err)
	}
	done := events(f, "", audit.ToolCompleted)
	if len(done) != 1 || done[0].Call.Outcome != "failed" || done[0].Call.Reason != "provider_timeout" {
		t.Fatalf("tool.completed: %+v", done)
	}
}

func TestChangedContractIsRefusedCapabilityChanged(t *testing.T) {
	f := conformance.NewFixture(t)
	k := start(t, f, nil)
	c := ctx(t)
	who, _ := openAs(t, k, conformance.Ada)
	if _, err := k.ListTools(c, who); err != nil {
		t.Fatal(err)
	}
	changed := conformance.SearchDef("notion.search")
	changed.InputSchema = json.RawMessage(`{"type":"object","properties":{"workspace":{"type":"string"},"query":{"type":"string"},"limit":{"type":"integer"}},"required":["workspace","query","limit"]}`)
	f.Notion.Set(providers.MemoryTool{Definition: changed})
	f.Notion.Retire("search")
	if _, err := k.Invoke(c, who, "notion_search", args("acme")); !errors.Is(err, reason.ErrCapabilityChanged) {
		t.Fatalf("got %v, want capability_changed", err)
	}
}

func TestShutdownClosesTurnsAndRefusesNewWork(t *testing.T) {
	f := conformance.NewFixture(t)
	opts := f.Options()
	k, err := actors.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	c := ctx(t)
	var ids []string
	for range 5 {
		o, err := k.Open(c, conformance.Ada)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.TurnID)
	}
	if err := k.Shutdown(c); err != nil {
		t.Fatal(err)
	}
	if err := k.Shutdown(c); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
	for _, id := range ids {
		if got := events(f, id, audit.TurnClosed); len(got) != 1 || got[0].Close.Reason != "shutdown" {
			t.Fatalf("turn %s: %+v", id, got)
		}
	}
	if _, err := k.Open(c, conformance.Ada); !errors.Is(err, reason.ErrOverloaded) {
		t.Fatalf("open after shutdown: %v", err)
	}
	var data [][]byte
	for _, r := range f.Sink.Records() {
		data = append(data, r.Data)
	}
	if rep := audit.Verify(data, false); !rep.OK() {
		t.Fatalf("trail after shutdown: %v", rep.Violations)
	}
}

func TestMaxTurnsIsOverloaded(t *testing.T) {
	f := conformance.NewFixture(t)
	k := start(t, f, func(o *actors.Options) { o.MaxTurns = 2 })
	c := ctx(t)
	for range 2 {
		if _, err := k.Open(c, conformance.Ada); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := k.Open(c, conformance.Ada); !errors.Is(err, reason.ErrOverloaded) {
		t.Fatalf("third open: %v, want overloaded", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	f := conformance.NewFixture(t)
	bad := map[string]func(*actors.Options){
		"no authority":     func(o *actors.Options) { o.Authority = nil },
		"bad node id":      func(o *actors.Options) { o.Node = "a/b" },
		"duplicate":        func(o *actors.Options) { o.Providers = append(o.Providers, f.Notion) },
		"unknown required": func(o *actors.Options) { o.Required = []string{"ghost"} },
		"negative ceiling": func(o *actors.Options) { o.StepCeiling = -1 },
	}
	for name, adjust := range bad {
		opts := f.Options()
		opts.Logger = slog.New(slog.DiscardHandler)
		adjust(&opts)
		if _, err := actors.New(opts); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// failingSink stores every record in next but, once failing is set, reports
// them not stored (a stream that went away).
type failingSink struct {
	next    *audit.Memory
	failing atomic.Bool
}

func (s *failingSink) Emit(rec *audit.Record) audit.Receipt {
	s.next.Emit(rec)
	if s.failing.Load() {
		return audit.Completed(errors.New("stream unavailable"))
	}
	return audit.Completed(nil)
}

// After a record is not stored the turn fails closed: the call whose
// tool.invoked was lost does not run, later operations are refused, and
// the turn closes with reason audit_unavailable.
func TestTurnFailsClosedWhenAuditIsNotStored(t *testing.T) {
	f := conformance.NewFixture(t)
	sink := &failingSink{next: f.Sink}
	k := start(t, f, func(o *actors.Options) { o.Sink = sink })
	c := ctx(t)
	who, o := openAs(t, k, conformance.Ada)
	if _, err := k.ListTools(c, who); err != nil {
		t.Fatal(err)
	}
	sink.failing.Store(true)
	if _, err := k.Invoke(c, who, "notion_search", args("acme")); !errors.Is(err, reason.ErrAuditUnavailable) {
		t.Fatalf("call whose record was lost: %v, want audit_unavailable", err)
	}
	if f.Notion.InvokeCalls() != 0 {
		t.Fatal("the tool ran although its tool.invoked was not stored")
	}
	sink.failing.Store(false) // the stream is back: the turn must still not carry on
	_, err := k.ListTools(c, who)
	if !errors.Is(err, reason.ErrAuditUnavailable) && !errors.Is(err, reason.ErrTurnClosed) {
		t.Fatalf("operation after a lost record: %v, want audit_unavailable or turn_closed", err)
	}
	if got := events(f, o.TurnID, audit.TurnClosed); len(got) != 1 || got[0].Close.Reason != "audit_unavailable" {
		t.Fatalf("turn.closed: %+v", got)
	}
}

// heldReceipt completes when its channel is closed, with err.
type heldReceipt struct {
	done <-chan struct{}
	err  error
}

func (r heldReceipt) Done() <-chan struct{} { return r.done }
func (r heldReceipt) Err() error            { return r.err }

// lostStreamSink stores every record in next; once lost is set, the next
// tool.invoked fails when fail is closed (the writer's retry window ran
// out) and every later record never completes (the stream stays gone).
type lostStreamSink struct {
	next  *audit.Memory
	lost  atomic.Bool
	fail  chan struct{}
	never chan struct{}
}

func (s *lostStreamSink) Emit(rec *audit.Record) audit.Receipt {
	s.next.Emit(rec)
	switch {
	case !s.lost.Load():
		return audit.Completed(nil)
	case rec.Event.Type == audit.ToolInvoked:
		return heldReceipt{done: s.fail, err: errors.New("stream unavailable")}
	default:
		return heldReceipt{done: s.never}
	}
}

// A call whose tool.invoked the stream did not store is answered
// audit_unavailable as soon as that is known — not after a second wait
// for its completion record, which cannot be stored either — and a retry
// of it, reaching the turn that is failing closed for it, gets that same
// answer (its call id), not turn_closed or a refusal that hides it.
func TestLostInvokedRecordAnsweredOnceAndToRetries(t *testing.T) {
	f := conformance.NewFixture(t)
	sink := &lostStreamSink{next: f.Sink, fail: make(chan struct{}), never: make(chan struct{})}
	t.Cleanup(func() { close(sink.never) })
	k := start(t, f, func(o *actors.Options) { o.Sink = sink })
	c := ctx(t)
	who, _ := openAs(t, k, conformance.Ada)
	if _, err := k.ListTools(c, who); err != nil {
		t.Fatal(err)
	}
	sink.lost.Store(true)
	first := make(chan error, 1)
	go func() {
		_, err := k.InvokeKeyed(c, who, "req-1", "notion_search", args("acme"))
		first <- err
	}()
	if err := f.Sink.WaitFor(c, func(rs []*audit.Record) bool {
		return slices.ContainsFunc(rs, func(r *audit.Record) bool { return r.Event.Type == audit.ToolInvoked })
	}); err != nil {
		t.Fatal(err)
	}
	close(sink.fail)
	err := <-first
	var ce *actors.CallError
	if !errors.Is(err, reason.ErrAuditUnavailable) || !errors.As(err, &ce) || ce.CallID == "" || ce.Dispatch != actors.NotDispatched {
		t.Fatalf("the call whose tool.invoked was lost: %v, want audit_unavailable naming its call, not dispatched", err)
	}
	if f.Notion.InvokeCalls() != 0 {
		t.Fatal("the tool ran although its tool.invoked was not stored")
	}
	for range 2 { // while the turn fails closed, and once it has closed
		_, rerr := k.InvokeKeyed(c, who, "req-1", "notion_search", args("acme"))
		var re *actors.CallError
		if !errors.Is(rerr, reason.ErrAuditUnavailable) || !errors.As(rerr, &re) || re.CallID != ce.CallID {
			t.Fatalf("a retry of the lost call: %v, want its first answer (audit_unavailable, call %s)", rerr, ce.CallID)
		}
	}
	if _, err := k.InvokeKeyed(c, who, "req-2", "notion_search", args("acme")); err == nil || reason.Of(err) != reason.AuditUnavailable && reason.Of(err) != reason.TurnClosed {
		t.Fatalf("a new call on the failed turn: %v, want audit_unavailable or turn_closed", err)
	}
}

// A model-facing listing goes through the turn like any listing: judged
// at its instant, recorded, and a name it showed calls the tool it was
// shown for, on the turn and in a turn of one operation alike.
func TestListForAndInvokeAs(t *testing.T) {
	f := conformance.NewFixture(t)
	k := start(t, f, nil)
	c := ctx(t)
	who, _ := openAs(t, k, conformance.Ada)
	ml, err := k.ListFor(c, who, turn.ProjectionRequest{Profile: projection.OpenAIStrict})
	if err != nil {
		t.Fatal(err)
	}
	if len(ml.Projection.Tools) == 0 || ml.CatalogHash == "" || len(ml.Projection.Hash) != 64 {
		t.Fatalf("listing: %+v", ml)
	}
	name := ""
	for _, tl := range ml.Projection.Tools {
		if tl.Identity.Name == "search" {
			name = tl.Alias
		}
	}
	if name == "" {
		t.Fatalf("notion search not shown: %+v", ml.Projection.Tools)
	}
	res, err := k.InvokeAs(c, who, "", projection.OpenAIStrict, name, args("acme"))
	if err != nil || res.Identity.Name != "search" {
		t.Fatalf("invoke by the shown name: %+v, %v", res, err)
	}
	if _, err := k.InvokeAs(c, who, "", projection.Gemini, name, args("acme")); !errors.Is(err, reason.ErrUnknownTool) {
		t.Fatalf("a name never shown to gemini: %v, want unknown_tool", err)
	}
	one := conformance.Ada
	if _, err := k.ListFor(c, one, turn.ProjectionRequest{Profile: projection.MCP, Query: "notion pages"}); err != nil {
		t.Fatalf("a search in a turn of one operation: %v", err)
	}
}
