package mcpprovider_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/internal/mcpprovider"
)

// dispatch is how the kernel reports a failed call: its CallError's
// Dispatch.
func dispatch(t *testing.T, err error) actors.Dispatch {
	t.Helper()
	var ce *actors.CallError
	if !errors.As(err, &ce) {
		t.Fatalf("not a call error: %v", err)
	}
	return ce.Dispatch
}

// A call whose server is gone and cannot be started again (its restart
// fails before the handshake completes) never reached the server: the
// kernel reports it not dispatched, so a retry is known to be safe. A call
// the server received and then lost its connection over may have run:
// dispatched.
func TestDispatchedOnlyWhenWrittenToAnInitializedSession(t *testing.T) {
	f := newFake(t, nil, tool("a", objSchema))
	f.ttlMs = ptr(3600000)
	var down atomic.Bool
	p := start(t, setup{servers: func(string) *fake {
		if down.Load() {
			return nil // the restart fails: no session
		}
		return f
	}, cfg: mcpprovider.Config{TTL: mcpprovider.Duration(time.Hour)}})
	k, _ := kernelWith(t, p)
	_, who := openTurn(t, k)
	if _, err := k.ListTools(ctxT(t), who); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Invoke(ctxT(t), who, "work_a", []byte(`{"q":"x"}`)); err != nil {
		t.Fatal(err)
	}

	// The server receives the call and its connection drops before it
	// answers.
	f.onCall = func() error { f.drop(0); return errors.New("gone") }
	_, err := k.Invoke(ctxT(t), who, "work_a", []byte(`{"q":"x"}`))
	if err == nil || dispatch(t, err) != actors.Dispatched {
		t.Fatalf("a call the server received: %v, want dispatched", err)
	}
	calls := f.calls.Load()

	// The server is gone and cannot be restarted.
	down.Store(true)
	_, err = k.Invoke(ctxT(t), who, "work_a", []byte(`{"q":"x"}`))
	if err == nil || dispatch(t, err) != actors.NotDispatched {
		t.Fatalf("a call no session took: %v, want not dispatched", err)
	}
	if f.calls.Load() != calls {
		t.Fatal("the server received the call")
	}
}
