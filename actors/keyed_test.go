package actors_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/reason"
)

// A keyed call runs once per lease and request id: a retry while it runs
// waits for it, a retry after it gets its answer, neither records a call
// or spends a step; the same id with other arguments is refused, and the
// same id under another lease is another call.
func TestKeyedCallRunsOnce(t *testing.T) {
	f := conformance.NewFixture(t)
	release := make(chan struct{})
	var runs atomic.Int32
	f.Notion.Set(providers.MemoryTool{Definition: conformance.SearchDef("notion.search"), Handler: providers.HeldHandler(release, &runs, func(n int32) providers.Result {
		return providers.Result{Text: fmt.Sprintf("run %d", n)}
	})})
	k := start(t, f, nil)
	c := ctx(t)
	who, o := openAs(t, k, conformance.Ada)

	type answer struct {
		res actors.CallResult
		err error
	}
	first, retry := make(chan answer, 1), make(chan answer, 1)
	go func() {
		res, err := k.InvokeKeyed(c, who, "req-1", "notion_search", args("acme"))
		first <- answer{res, err}
	}()
	for runs.Load() == 0 {
		if _, err := k.ListTools(c, who); err != nil { // the turn keeps deciding meanwhile
			t.Fatal(err)
		}
	}
	go func() {
		res, err := k.InvokeKeyed(c, who, "req-1", "notion_search", args("acme"))
		retry <- answer{res, err}
	}()
	// The retry is waiting on the call in flight, not running it: other
	// arguments under the same id are refused while both wait.
	if _, err := k.InvokeKeyed(c, who, "req-1", "notion_search", args("other")); !errors.Is(err, reason.ErrInvalidRequest) {
		t.Fatalf("same id, other arguments: %v, want invalid_request", err)
	}
	close(release)
	a, b := <-first, <-retry
	if a.err != nil || b.err != nil {
		t.Fatalf("first %v, retry %v", a.err, b.err)
	}
	if a.res.CallID != b.res.CallID || a.res.Result.Text != "run 1" || b.res.Result.Text != "run 1" {
		t.Fatalf("first %+v, retry %+v: want one call, run once", a.res, b.res)
	}
	again, err := k.InvokeKeyed(c, who, "req-1", "notion_search", args("acme"))
	if err != nil || again.CallID != a.res.CallID || again.Result.Text != "run 1" {
		t.Fatalf("retry after the answer: %+v %v", again, err)
	}
	if runs.Load() != 1 {
		t.Fatalf("the tool ran %d times, want 1", runs.Load())
	}
	if n := len(events(f, o.TurnID, audit.ToolInvoked)); n != 1 {
		t.Fatalf("%d tool.invoked records, want 1 (retries record nothing)", n)
	}

	// Another lease of the same turn with the same id: another call.
	attach := conformance.Ada
	attach.TurnID = o.TurnID
	second, err := k.Open(c, attach)
	if err != nil {
		t.Fatal(err)
	}
	other := conformance.Ada
	other.TurnID, other.LeaseID = o.TurnID, second.LeaseID
	res, err := k.InvokeKeyed(c, other, "req-1", "notion_search", args("acme"))
	if err != nil || res.CallID == a.res.CallID || res.Result.Text != "run 2" {
		t.Fatalf("same id under another lease: %+v %v, want a new call", res, err)
	}
	// Without an id every call is its own.
	if _, err := k.Invoke(c, who, "notion_search", args("acme")); err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 3 {
		t.Fatalf("the tool ran %d times, want 3", runs.Load())
	}
}

// A turn keeps the answers of its last keyed calls only; a retry of an
// older one is refused with the call's id rather than run again, and a
// request id longer than the bound is refused before anything is decided.
func TestKeyedCallAnswersAreBounded(t *testing.T) {
	f := conformance.NewFixture(t)
	var runs atomic.Int32
	f.Notion.Set(providers.MemoryTool{Definition: conformance.SearchDef("notion.search"), Handler: func(context.Context, providers.Call) (providers.Result, error) {
		runs.Add(1)
		return providers.Result{Text: "found"}, nil
	}})
	k := start(t, f, func(o *actors.Options) { o.StepCeiling = 1000 })
	c := ctx(t)
	who, _ := openAs(t, k, conformance.Ada)
	put := args("acme")
	first, err := k.InvokeKeyed(c, who, "id-0", "notion_search", put)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 64; i++ {
		if _, err := k.InvokeKeyed(c, who, fmt.Sprintf("id-%d", i), "notion_search", put); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := k.InvokeKeyed(c, who, "id-64", "notion_search", put); err != nil {
		t.Fatalf("a recent call's retry: %v", err)
	}
	_, err = k.InvokeKeyed(c, who, "id-0", "notion_search", put)
	var ce *actors.CallError
	if !errors.As(err, &ce) || !errors.Is(err, reason.ErrInvalidRequest) || ce.CallID != first.CallID {
		t.Fatalf("retry of a call whose answer was let go: %v, want invalid_request naming %s", err, first.CallID)
	}
	if runs.Load() != 65 {
		t.Fatalf("the tool ran %d times, want 65", runs.Load())
	}
	long := make([]byte, actors.MaxRequestIDBytes+1)
	for i := range long {
		long[i] = 'x'
	}
	if _, err := k.InvokeKeyed(c, who, string(long), "notion_search", put); !errors.Is(err, reason.ErrInvalidRequest) {
		t.Fatalf("an oversized request id: %v", err)
	}
}
