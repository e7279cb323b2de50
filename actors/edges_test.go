package actors_test

// Tests for the kernel's edges (issue #10): the decision instant, bounded
// work, deadlines and every caller answered. Each failed on the kernel
// before the fix it names.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/reason"
)

// waitFor polls cond (bounded): a step of the scenario, not a timing assert.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 5000; i++ {
		if cond() {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("gave up waiting for %s", what)
}

// openAs opens a turn for who and returns who with the turn and its lease,
// ready for operations, and the open's answer.
func openAs(t *testing.T, k *actors.Kernel, who authority.AccessContext) (authority.AccessContext, actors.Opened) {
	t.Helper()
	o, err := k.Open(ctx(t), who)
	if err != nil {
		t.Fatal(err)
	}
	who.TurnID, who.LeaseID = o.TurnID, o.LeaseID
	return who, o
}

// Every event's time never decreases with seq, within a turn.
func checkMonotonic(t *testing.T, evs []*audit.Event) {
	t.Helper()
	for i := 1; i < len(evs); i++ {
		if evs[i].Time.Before(evs[i-1].Time) {
			t.Errorf("seq %d %s @%s precedes seq %d %s @%s", evs[i].Seq, evs[i].Type, evs[i].Time, evs[i-1].Seq, evs[i-1].Type, evs[i-1].Time)
		}
	}
}

// Reproduced on the old kernel: bob's grant expires at T0+60m; an invoke
// admitted at T0+59m waits behind the first resolution, which returns at
// T0+120m. It was allowed (decided with the admission stamp) and the
// trail read resolved@120m, invoked@59m, completed@120m.
func TestDecidedAtTheInstantNotAtAdmission(t *testing.T) {
	f := conformance.NewFixture(t)
	k := start(t, f, nil)
	c := ctx(t)
	who, o := openAs(t, k, conformance.Bob)
	release := f.Notion.Gate()
	f.Clock.Advance(59 * time.Minute)
	done := make(chan error, 1)
	go func() {
		_, err := k.Invoke(c, who, "notion_search", args("acme"))
		done <- err
	}()
	waitFor(t, "the first resolution to start", func() bool { return f.Notion.CatalogCalls() > 0 })
	f.Clock.Advance(61 * time.Minute) // T0+120m: the grant lapsed while the call waited
	release()
	if err := <-done; !errors.Is(err, reason.ErrNotDiscoverable) {
		t.Fatalf("call decided after the lapse: %v, want not_discoverable", err)
	}
	if n := f.Notion.InvokeCalls(); n != 0 {
		t.Fatalf("the refused call ran %d times", n)
	}
	evs := f.Sink.Events(o.TurnID)
	checkMonotonic(t, evs)
	inv := events(f, o.TurnID, audit.ToolInvoked)
	if len(inv) != 1 || !inv[0].Time.Equal(conformance.T0.Add(120*time.Minute)) {
		t.Fatalf("tool.invoked: %+v, want one at T0+120m", inv)
	}
}

// The turn's instants never run backwards even when the clock does.
func TestEventTimesNeverDecreaseWhenTheClockStepsBack(t *testing.T) {
	f := conformance.NewFixture(t)
	k := start(t, f, nil)
	c := ctx(t)
	who, o := openAs(t, k, conformance.Ada)
	if _, err := k.ListTools(c, who); err != nil {
		t.Fatal(err)
	}
	f.Clock.Advance(-time.Hour) // an NTP step back
	if _, err := k.Invoke(c, who, "notion_search", args("acme")); err != nil {
		t.Fatal(err)
	}
	checkMonotonic(t, f.Sink.Events(o.TurnID))
}

// recording is a provider that records the access context of each
// catalogue request.
type recording struct {
	mu   sync.Mutex
	seen []authority.AccessContext
}

func (r *recording) ID() string { return "rec" }
func (r *recording) Catalog(_ context.Context, a authority.AccessContext) (providers.Catalog, error) {
	r.mu.Lock()
	r.seen = append(r.seen, a)
	r.mu.Unlock()
	return providers.Catalog{}, nil
}
func (r *recording) Invoke(context.Context, providers.Call) (providers.Result, error) {
	return providers.Result{}, nil
}

// The catalogue request carries the first-need operation's instant and
// the namespaces enabled then (it carried the opening context's).
func TestCatalogueAskedWithTheFirstNeedContext(t *testing.T) {
	f := conformance.NewFixture(t)
	rec := &recording{}
	k := start(t, f, func(o *actors.Options) { o.Providers = append(o.Providers, rec) })
	c := ctx(t)
	who, _ := openAs(t, k, conformance.Ada)
	f.Clock.Advance(5 * time.Minute)
	if err := k.UpdateNamespaces(c, who, []string{"notes"}); err != nil {
		t.Fatal(err)
	}
	f.Clock.Advance(5 * time.Minute)
	if _, err := k.ListTools(c, who); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.seen) != 1 {
		t.Fatalf("%d catalogue requests, want 1", len(rec.seen))
	}
	got := rec.seen[0]
	if !got.Now.Equal(conformance.T0.Add(10*time.Minute)) || !slices.Equal(got.EnabledNamespaces, []string{"notes"}) {
		t.Fatalf("catalogue asked at %s with namespaces %v; want T0+10m with [notes]", got.Now, got.EnabledNamespaces)
	}
}

// blocking is a tool that runs until its context ends, counting the
// executions running at once.
type blocking struct {
	running, peak, ran atomic.Int64
	deadline           atomic.Value // time.Time of the last execution's ctx
}

func (b *blocking) handler(ctx context.Context, _ providers.Call) (providers.Result, error) {
	n := b.running.Add(1)
	defer b.running.Add(-1)
	b.ran.Add(1)
	for {
		p := b.peak.Load()
		if n <= p || b.peak.CompareAndSwap(p, n) {
			break
		}
	}
	if dl, ok := ctx.Deadline(); ok {
		b.deadline.Store(dl)
	}
	<-ctx.Done()
	return providers.Result{}, ctx.Err()
}

func slowProvider(b *blocking) *providers.Memory {
	return providers.NewMemory("slow", providers.MemoryTool{
		Definition: catalog.Definition{
			Name: "wait", Namespace: "notes", Description: "Waits.",
			InputSchema: json.RawMessage(`{"type":"object"}`), Capability: "notes.put", Requirement: "notes/acme/items",
		},
		Handler: b.handler,
	})
}

// Reproduced on the old kernel: max_turns 2, 300 one-operation invokes
// with 50 ms deadlines → 300 executions running, directory count 0.
func TestOneOperationTurnsAreCountedBoundedAndEnd(t *testing.T) {
	f := conformance.NewFixture(t)
	b := &blocking{}
	k := start(t, f, func(o *actors.Options) {
		o.Providers = append(o.Providers, slowProvider(b))
		o.MaxTurns = 2
	})
	ada := conformance.Ada
	var wg sync.WaitGroup
	var overloaded, late atomic.Int64
	for range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err := k.Invoke(c, ada, "notes_wait", []byte(`{}`))
			switch {
			case errors.Is(err, reason.ErrOverloaded):
				overloaded.Add(1)
			case errors.Is(err, reason.ErrDeadlineExceeded):
				late.Add(1)
			default:
				t.Errorf("one-operation invoke: %v, want overloaded or deadline_exceeded", err)
			}
		}()
	}
	wg.Wait()
	if p := b.peak.Load(); p > 2 {
		t.Fatalf("%d executions ran at once with max_turns 2", p)
	}
	if overloaded.Load() == 0 || late.Load() == 0 {
		t.Fatalf("overloaded %d, deadline_exceeded %d: want both", overloaded.Load(), late.Load())
	}
	// Each execution ends with its caller's deadline, and so does its turn.
	waitFor(t, "the one-operation turns to close", func() bool {
		n, err := k.OpenTurns(ctx(t))
		return err == nil && n == 0 && b.running.Load() == 0
	})
}

// While a one-operation turn runs it counts as an open turn, and shutdown
// closes it (answering its caller) rather than leaving it running.
func TestShutdownEndsOneOperationTurns(t *testing.T) {
	f := conformance.NewFixture(t)
	b := &blocking{}
	opts := f.Options()
	opts.Providers = append(opts.Providers, slowProvider(b))
	k, err := actors.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := k.Invoke(ctx(t), conformance.Ada, "notes_wait", []byte(`{}`))
		done <- err
	}()
	waitFor(t, "the execution to start", func() bool { return b.running.Load() == 1 })
	if n, _ := k.OpenTurns(ctx(t)); n != 1 {
		t.Fatalf("open turns %d while a one-operation turn runs, want 1", n)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = k.Shutdown(sctx) // the execution ignores the close; shutdown stops the turn
	err = <-done
	var ce *actors.CallError
	if !errors.Is(err, reason.ErrTurnClosed) || !errors.As(err, &ce) || ce.Dispatch != actors.Dispatched || ce.CallID == "" {
		t.Fatalf("caller of a stopped turn got %v, want turn_closed naming a dispatched call", err)
	}
	waitFor(t, "the execution to be cancelled", func() bool { return b.running.Load() == 0 })
	// The chain records the call's end before turn.closed.
	var turnID string
	for _, rec := range f.Sink.Records() {
		if rec.Event.Type == audit.ToolInvoked {
			turnID = rec.Event.TurnID
		}
	}
	evs := f.Sink.Events(turnID)
	if n := len(evs); n < 2 || evs[n-2].Type != audit.ToolCompleted || evs[n-2].Call.Reason != string(reason.TurnClosed) || evs[n-1].Type != audit.TurnClosed {
		t.Fatalf("chain of the stopped turn: %v", types(evs))
	}
}

func types(evs []*audit.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = fmt.Sprintf("%d:%s", ev.Seq, ev.Type)
	}
	return out
}

// hanging ignores its context: its catalogue never returns on its own.
type hanging struct{ stop chan struct{} }

func (h hanging) ID() string { return "hang" }
func (h hanging) Catalog(context.Context, authority.AccessContext) (providers.Catalog, error) {
	<-h.stop
	return providers.Catalog{}, nil
}
func (h hanging) Invoke(context.Context, providers.Call) (providers.Result, error) {
	return providers.Result{}, nil
}

// A provider that ignores its context cannot hold a turn in resolving: it
// is classified provider_timeout and the turn serves the rest.
func TestResolutionEndsWhateverTheProviderDoes(t *testing.T) {
	f := conformance.NewFixture(t)
	h := hanging{stop: make(chan struct{})}
	defer close(h.stop)
	k := start(t, f, func(o *actors.Options) {
		o.Providers = append(o.Providers, h)
		o.ResolveTimeout = 50 * time.Millisecond
	})
	c := ctx(t)
	who, o := openAs(t, k, conformance.Ada)
	l, err := k.ListTools(c, who)
	if err != nil || !slices.ContainsFunc(l.Tools, func(t actors.ListedTool) bool { return t.Alias == "notion_search" }) {
		t.Fatalf("listing past a hanging provider: %v %v", l, err)
	}
	if len(l.Degraded) != 1 || l.Degraded[0].Provider != "hang" || l.Degraded[0].Reason != string(reason.ProviderTimeout) {
		t.Fatalf("degraded providers %+v, want hang: provider_timeout", l.Degraded)
	}
	res := events(f, o.TurnID, audit.CatalogResolved)
	if len(res) != 1 {
		t.Fatalf("%d resolutions", len(res))
	}
	for _, p := range res[0].Catalog.Providers {
		if p.Provider == "hang" && (p.Status != "failed" || p.Reason != string(reason.ProviderTimeout)) {
			t.Fatalf("hang recorded %+v", p)
		}
	}
}

// The execution's deadline is the caller's (less a margin), not
// call_timeout; the caller gets deadline_exceeded naming a dispatched
// call, never internal; the trail records it.
func TestCallerDeadlineBoundsTheExecution(t *testing.T) {
	f := conformance.NewFixture(t)
	b := &blocking{}
	k := start(t, f, func(o *actors.Options) {
		o.Providers = append(o.Providers, slowProvider(b))
		o.CallTimeout = time.Hour
	})
	who, o := openAs(t, k, conformance.Ada)
	cc, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	callerDL, _ := cc.Deadline()
	_, err := k.Invoke(cc, who, "notes_wait", []byte(`{}`))
	var ce *actors.CallError
	if !errors.Is(err, reason.ErrDeadlineExceeded) || !errors.As(err, &ce) {
		t.Fatalf("got %v, want deadline_exceeded", err)
	}
	if ce.Dispatch == actors.NotDispatched || (ce.Dispatch == actors.Dispatched && ce.CallID == "") {
		t.Fatalf("call error %+v: the call was dispatched", ce)
	}
	dl, _ := b.deadline.Load().(time.Time)
	if dl.IsZero() || dl.After(callerDL) {
		t.Fatalf("the execution's deadline %s is after the caller's %s", dl, callerDL)
	}
	waitFor(t, "tool.completed", func() bool { return len(events(f, o.TurnID, audit.ToolCompleted)) == 1 })
	comp := events(f, o.TurnID, audit.ToolCompleted)[0]
	if comp.Call.Outcome != "failed" || comp.Call.Reason != string(reason.DeadlineExceeded) {
		t.Fatalf("tool.completed %+v, want failed deadline_exceeded", comp.Call)
	}
}

// A call whose caller's deadline passed while it waited for the first
// resolution is not decided at all: refused deadline_exceeded, never run.
func TestLateCallIsNotRun(t *testing.T) {
	f := conformance.NewFixture(t)
	k := start(t, f, nil)
	who, o := openAs(t, k, conformance.Ada)
	release := f.Notion.Gate()
	cc, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := k.Invoke(cc, who, "notion_search", args("acme"))
	if !errors.Is(err, reason.ErrDeadlineExceeded) {
		t.Fatalf("got %v, want deadline_exceeded", err)
	}
	release()
	waitFor(t, "the late call's decision", func() bool { return len(events(f, o.TurnID, audit.ToolInvoked)) == 1 })
	inv := events(f, o.TurnID, audit.ToolInvoked)[0]
	if inv.Call.Decision != "deny" || inv.Call.Reason != string(reason.DeadlineExceeded) || f.Notion.InvokeCalls() != 0 {
		t.Fatalf("late call recorded %+v and ran %d times", inv.Call, f.Notion.InvokeCalls())
	}
}

// Refusals name the call the turn recorded and its catalogHash.
func TestRefusalNamesTheRecordedCall(t *testing.T) {
	f := conformance.NewFixture(t)
	k := start(t, f, nil)
	c := ctx(t)
	who, o := openAs(t, k, conformance.Ada)
	_, err := k.Invoke(c, who, "notion_search", args("globex"))
	var ce *actors.CallError
	if !errors.Is(err, reason.ErrNoMatchingGrant) || !errors.As(err, &ce) {
		t.Fatalf("got %v", err)
	}
	inv := events(f, o.TurnID, audit.ToolInvoked)
	if len(inv) != 1 || ce.CallID != inv[0].Call.ID || ce.CatalogHash != inv[0].CatalogHash || ce.CatalogHash == "" || ce.Dispatch != actors.NotDispatched {
		t.Fatalf("refusal %+v does not name the recorded call %+v", ce, inv)
	}
}

// A result larger than a reply may carry is refused result_too_large and
// recorded so; a listing larger than a reply is paged, each page recorded.
func TestReplyBoundPagesListingsAndRefusesHugeResults(t *testing.T) {
	f := conformance.NewFixture(t)
	var tools []providers.MemoryTool
	for i := range 12 {
		tools = append(tools, providers.MemoryTool{Definition: catalog.Definition{
			Name: fmt.Sprintf("t%02d", i), Namespace: "notes", Description: fmt.Sprintf("%0900d", i),
			InputSchema: json.RawMessage(`{"type":"object"}`), Capability: "notes.put", Requirement: "notes/acme/items",
		}, Handler: func(context.Context, providers.Call) (providers.Result, error) {
			return providers.Result{Text: string(make([]byte, 8000))}, nil
		}})
	}
	big := providers.NewMemory("big", tools...)
	k := start(t, f, func(o *actors.Options) {
		o.Providers = append(o.Providers, big)
		o.MaxReplyBytes = actors.ReplyOverhead + 4000
	})
	c := ctx(t)
	who, o := openAs(t, k, conformance.Ada)
	var shown []string
	page := actors.ListPage{}
	pages := 0
	for {
		l, err := k.ListToolsPage(c, who, page)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, tl := range l.Tools {
			shown = append(shown, tl.Alias)
		}
		if l.NextCursor == "" {
			break
		}
		page.After = l.NextCursor
	}
	if len(shown) != 14 || pages < 3 { // 12 + notion_search + notes_put
		t.Fatalf("%d tools over %d pages: %v", len(shown), pages, shown)
	}
	if len(slices.Compact(slices.Sorted(slices.Values(shown)))) != len(shown) {
		t.Fatalf("pages repeat tools: %v", shown)
	}
	if n := len(events(f, o.TurnID, audit.CatalogListed)); n != pages {
		t.Fatalf("%d listings recorded for %d pages", n, pages)
	}
	if _, err := k.ListToolsPage(c, who, actors.ListPage{After: "no_such_tool"}); !errors.Is(err, reason.ErrInvalidRequest) {
		t.Fatalf("unknown cursor: %v", err)
	}
	_, err := k.Invoke(c, who, "notes_t00", []byte(`{}`))
	var ce *actors.CallError
	if !errors.Is(err, reason.ErrResultTooLarge) || !errors.As(err, &ce) || ce.Dispatch != actors.Dispatched {
		t.Fatalf("huge result: %v", err)
	}
	comp := events(f, o.TurnID, audit.ToolCompleted)
	if len(comp) != 1 || comp[0].Call.Reason != string(reason.ResultTooLarge) || comp[0].Call.ResultLen != 8000 {
		t.Fatalf("tool.completed %+v", comp)
	}
}

// Operations racing Shutdown never panic (the WaitGroup Add/Wait race)
// and each gets an answer.
func TestOperationsRacingShutdown(t *testing.T) {
	for range 20 {
		f := conformance.NewFixture(t)
		opts := f.Options()
		k, err := actors.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := k.ListTools(c, conformance.Ada)
				if err != nil && !errors.Is(err, reason.ErrOverloaded) && !errors.Is(err, reason.ErrTurnClosed) {
					t.Errorf("operation racing shutdown: %v", err)
				}
			}()
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := k.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		cancel()
		wg.Wait()
	}
}

// The idle rule: a lease is not a keep-alive. A turn nobody operated on
// for IdleTimeout closes with its lease still held; the holder is told
// turn_closed, and releasing the lease afterwards is harmless.
func TestIdleClosesATurnWhoseLeaseIsHeld(t *testing.T) {
	f := conformance.NewFixture(t)
	k := start(t, f, func(o *actors.Options) { o.IdleTimeout = 20 * time.Millisecond })
	c := ctx(t)
	o, err := k.Open(c, conformance.Ada)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the idle close", func() bool { return len(events(f, o.TurnID, audit.TurnClosed)) == 1 })
	if ev := events(f, o.TurnID, audit.TurnClosed)[0]; ev.Close.Reason != "idle" {
		t.Fatalf("closed for %q", ev.Close.Reason)
	}
	who := conformance.Ada
	who.TurnID, who.LeaseID = o.TurnID, o.LeaseID
	if _, err := k.ListTools(c, who); !errors.Is(err, reason.ErrTurnClosed) {
		t.Fatalf("operation after the idle close: %v", err)
	}
	if err := k.Close(c, who, o.LeaseID); err != nil {
		t.Fatalf("releasing the lease of an idled turn: %v", err)
	}
}

// Only the node mints turn ids (130 random bits): attaching to an id that
// is not open never opens a new turn, so a closed turn id cannot be
// opened again — not even after a restart, when the tombstones are gone
// (issue #9; on the old kernel it was reopened, and the verifier then
// reported its trail as forged).
func TestTurnIDsAreMintedByTheNodeOnly(t *testing.T) {
	f := conformance.NewFixture(t)
	k := start(t, f, nil)
	c := ctx(t)
	o, err := k.Open(c, conformance.Ada)
	if err != nil {
		t.Fatal(err)
	}
	if suffix, ok := strings.CutPrefix(o.TurnID, "n1."); !ok || len(suffix) != 26 || len(o.LeaseID) != 26 {
		t.Fatalf("minted turn id %q, lease %q: want n1. and 26 base32 characters (130 bits) each", o.TurnID, o.LeaseID)
	}
	chosen := conformance.Ada
	chosen.TurnID = "n1.chosen-by-the-caller"
	if _, err := k.Open(c, chosen); !errors.Is(err, reason.ErrTurnNotFound) {
		t.Fatalf("attach to an id never opened: %v, want turn_not_found", err)
	}
	who := conformance.Ada
	who.TurnID, who.LeaseID = o.TurnID, o.LeaseID
	if err := k.Close(c, who, o.LeaseID); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Open(c, who); !errors.Is(err, reason.ErrTurnClosed) {
		t.Fatalf("attach to a closed id: %v, want turn_closed", err)
	}
	// A restarted node (a new kernel, the same audit sink) has no
	// tombstones; the closed id is still not opened again.
	restarted := start(t, f, nil)
	if _, err := restarted.Open(c, who); !errors.Is(err, reason.ErrTurnNotFound) {
		t.Fatalf("attach to a closed id after a restart: %v, want turn_not_found", err)
	}
	if n := len(events(f, o.TurnID, audit.TurnOpened)) + len(events(f, chosen.TurnID, audit.TurnOpened)); n != 1 {
		t.Fatalf("%d turn.opened records, want 1", n)
	}
}

// One principal cannot take a node's every turn: MaxTurnsPerPrincipal
// bounds its open turns (turns of one operation included), others are not
// affected, and a closed turn frees its place.
func TestTurnsPerPrincipalAreBounded(t *testing.T) {
	f := conformance.NewFixture(t)
	k := start(t, f, func(o *actors.Options) { o.MaxTurnsPerPrincipal = 2 })
	c := ctx(t)
	first, err := k.Open(c, conformance.Ada)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Open(c, conformance.Ada); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Open(c, conformance.Ada); !errors.Is(err, reason.ErrOverloaded) {
		t.Fatalf("ada's third turn: %v, want overloaded", err)
	}
	if _, err := k.ListTools(c, conformance.Ada); !errors.Is(err, reason.ErrOverloaded) {
		t.Fatalf("ada's one-operation listing at her bound: %v, want overloaded", err)
	}
	if _, err := k.Open(c, conformance.Bob); err != nil {
		t.Fatalf("bob is not bound by ada's turns: %v", err)
	}
	who := conformance.Ada
	who.TurnID, who.LeaseID = first.TurnID, first.LeaseID
	if err := k.Close(c, who, first.LeaseID); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Open(c, conformance.Ada); err != nil {
		t.Fatalf("ada after closing a turn: %v", err)
	}
}

// A turn holds at most MaxLeasesPerTurn leases.
func TestLeasesPerTurnAreBounded(t *testing.T) {
	f := conformance.NewFixture(t)
	k := start(t, f, func(o *actors.Options) { o.MaxLeasesPerTurn = 2 })
	c := ctx(t)
	o, err := k.Open(c, conformance.Ada)
	if err != nil {
		t.Fatal(err)
	}
	who := conformance.Ada
	who.TurnID = o.TurnID
	if _, err := k.Open(c, who); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Open(c, who); !errors.Is(err, reason.ErrOverloaded) {
		t.Fatalf("third lease: %v, want overloaded", err)
	}
}

// Each principal's opens and calls are rate-limited on the kernel's clock:
// beyond the burst a request is refused rate_limited with the time until
// it can succeed; other principals are not affected; time refills.
func TestRatesPerPrincipal(t *testing.T) {
	f := conformance.NewFixture(t)
	k := start(t, f, func(o *actors.Options) {
		o.OpenRate = actors.RateLimit{Rate: 0.5, Burst: 1}
		o.CallRate = actors.RateLimit{Rate: 1, Burst: 2}
	})
	c := ctx(t)
	o, err := k.Open(c, conformance.Ada)
	if err != nil {
		t.Fatal(err)
	}
	_, err = k.Open(c, conformance.Ada)
	var re *reason.Error
	if !errors.As(err, &re) || re.Code != reason.RateLimited || re.RetryAfter != 2*time.Second {
		t.Fatalf("second open within the burst of 1 at 0.5/s: %v, want rate_limited, retry after 2s", err)
	}
	if _, err := k.Open(c, conformance.Bob); err != nil {
		t.Fatalf("bob is not limited by ada's opens: %v", err)
	}
	who := conformance.Ada
	who.TurnID, who.LeaseID = o.TurnID, o.LeaseID
	for i := range 2 {
		if _, err := k.Invoke(c, who, "notion_search", args("acme")); err != nil {
			t.Fatalf("call %d within the burst: %v", i, err)
		}
	}
	_, err = k.Invoke(c, who, "notion_search", args("acme"))
	if !errors.As(err, &re) || re.Code != reason.RateLimited || re.RetryAfter != time.Second {
		t.Fatalf("third call at 1/s, burst 2: %v, want rate_limited, retry after 1s", err)
	}
	if n := len(events(f, o.TurnID, audit.ToolInvoked)); n != 2 {
		t.Fatalf("%d calls reached the turn, want 2: a rate-limited call is refused before it", n)
	}
	f.Clock.Advance(time.Second)
	if _, err := k.Invoke(c, who, "notion_search", args("acme")); err != nil {
		t.Fatalf("a call a second later: %v", err)
	}
	f.Clock.Advance(2 * time.Second)
	if _, err := k.Open(c, conformance.Ada); err != nil {
		t.Fatalf("an open two seconds later: %v", err)
	}
}

// hangingSource is an authority source that ignores its context.
type hangingSource struct{ stop chan struct{} }

func (h hangingSource) Resolve(context.Context, authority.AccessContext) (authority.Authority, error) {
	<-h.stop
	return authority.Authority{}, nil
}

// An authority source that ignores its context cannot hold a turn in
// resolving either: the operation is answered provider_timeout.
func TestResolutionEndsWhateverTheAuthoritySourceDoes(t *testing.T) {
	f := conformance.NewFixture(t)
	h := hangingSource{stop: make(chan struct{})}
	defer close(h.stop)
	k := start(t, f, func(o *actors.Options) {
		o.Authority = h
		o.ResolveTimeout = 50 * time.Millisecond
	})
	who, _ := openAs(t, k, conformance.Ada)
	if _, err := k.ListTools(ctx(t), who); !errors.Is(err, reason.ErrProviderTimeout) {
		t.Fatalf("listing behind a hanging authority source: %v, want provider_timeout", err)
	}
}
