package actors_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/reason"
)

// completionGate is a receipt its test completes, with err.
type completionGate struct {
	done chan struct{}
	err  error
}

func (g *completionGate) Done() <-chan struct{} { return g.done }
func (g *completionGate) Err() error            { return g.err }

// holdingSink stores every record in next and completes every receipt at
// once, but for tool.completed while hold is set: those wait for release.
type holdingSink struct {
	next *audit.Memory
	hold atomic.Bool
	mu   sync.Mutex
	held []*completionGate
}

func (s *holdingSink) Emit(rec *audit.Record) audit.Receipt {
	s.next.Emit(rec)
	if !s.hold.Load() || rec.Event.Type != audit.ToolCompleted {
		return audit.Completed(nil)
	}
	g := &completionGate{done: make(chan struct{})}
	s.mu.Lock()
	s.held = append(s.held, g)
	s.mu.Unlock()
	return g
}

// release completes every held receipt with err.
func (s *holdingSink) release(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.held {
		g.err = err
		close(g.done)
	}
	s.held = nil
}

func (s *holdingSink) holding() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// quiet is how long a test watches for something that must not happen.
// It bounds only how soon a defect is seen, never whether a correct
// kernel passes.
const quiet = 200 * time.Millisecond

// A call is answered once its tool.invoked is stored, without waiting for
// its tool.completed; that record is stored before anything later of the
// turn runs or is answered: the next call's tool waits for it, and runs
// once it is stored.
func TestAnswerPrecedesItsCompletionRecordNotTheNextOperation(t *testing.T) {
	f := conformance.NewFixture(t)
	sink := &holdingSink{next: f.Sink}
	k := start(t, f, func(o *actors.Options) { o.Sink = sink })
	c := ctx(t)
	who, _ := openAs(t, k, conformance.Ada)
	sink.hold.Store(true)
	if _, err := k.Invoke(c, who, "notion_search", args("acme")); err != nil {
		t.Fatalf("a call whose completion record is not yet stored: %v", err)
	}
	if sink.holding() != 1 {
		t.Fatalf("%d completion records held, want the call's one", sink.holding())
	}
	second := make(chan error, 1)
	go func() {
		_, err := k.Invoke(c, who, "notion_search", args("acme"))
		second <- err
	}()
	listed := make(chan error, 1)
	go func() {
		_, err := k.ListTools(c, who)
		listed <- err
	}()
	select {
	case err := <-second:
		t.Fatalf("the next call was answered (%v) before the first call's completion record was stored", err)
	case err := <-listed:
		t.Fatalf("a listing was answered (%v) before the first call's completion record was stored", err)
	case <-time.After(quiet):
	}
	if n := f.Notion.InvokeCalls(); n != 1 {
		t.Fatalf("the tool ran %d times before the first call's completion record was stored, want once", n)
	}
	sink.hold.Store(false)
	sink.release(nil)
	if err := <-second; err != nil {
		t.Fatalf("the next call once the record was stored: %v", err)
	}
	if err := <-listed; err != nil {
		t.Fatalf("the listing once the record was stored: %v", err)
	}
	if n := f.Notion.InvokeCalls(); n != 2 {
		t.Fatalf("the tool ran %d times, want twice", n)
	}
}

// A completion record the stream does not store stops the turn: the next
// call, decided before the loss was known, does not run and is answered
// audit_unavailable, and the turn closes for its audit.
func TestLostCompletionRecordRunsNothingLater(t *testing.T) {
	f := conformance.NewFixture(t)
	sink := &holdingSink{next: f.Sink}
	k := start(t, f, func(o *actors.Options) { o.Sink = sink })
	c := ctx(t)
	who, o := openAs(t, k, conformance.Ada)
	sink.hold.Store(true)
	if _, err := k.Invoke(c, who, "notion_search", args("acme")); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() {
		_, err := k.Invoke(c, who, "notion_search", args("acme"))
		second <- err
	}()
	waitFor(t, "the second call decided", func() bool { return len(events(f, o.TurnID, audit.ToolInvoked)) == 2 })
	sink.hold.Store(false)
	sink.release(errors.New("stream unavailable"))
	err := <-second
	var ce *actors.CallError
	if !errors.Is(err, reason.ErrAuditUnavailable) || !errors.As(err, &ce) || ce.Dispatch != actors.NotDispatched {
		t.Fatalf("the call after a lost completion record: %v, want audit_unavailable, not dispatched", err)
	}
	if n := f.Notion.InvokeCalls(); n != 1 {
		t.Fatalf("the tool ran %d times, want once: nothing runs after a record the stream lost", n)
	}
	waitFor(t, "the turn closed for its audit", func() bool {
		got := events(f, o.TurnID, audit.TurnClosed)
		return len(got) == 1 && got[0].Close.Reason == "audit_unavailable"
	})
}

// With AwaitCompletion a call's answer waits for its tool.completed.
func TestAwaitCompletionHoldsTheAnswer(t *testing.T) {
	f := conformance.NewFixture(t)
	sink := &holdingSink{next: f.Sink}
	k := start(t, f, func(o *actors.Options) { o.Sink, o.AwaitCompletion = sink, true })
	c := ctx(t)
	who, _ := openAs(t, k, conformance.Ada)
	sink.hold.Store(true)
	answered := make(chan error, 1)
	go func() {
		_, err := k.Invoke(c, who, "notion_search", args("acme"))
		answered <- err
	}()
	waitFor(t, "the completion record emitted", func() bool { return sink.holding() == 1 })
	select {
	case err := <-answered:
		t.Fatalf("answered (%v) before its completion record was stored", err)
	case <-time.After(quiet):
	}
	sink.release(nil)
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
}
