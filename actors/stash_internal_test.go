package actors

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/reason"
)

// Operations stashed while the catalogue resolves are replayed in order;
// those queued behind a close are told turn_closed and nothing breaks.
// Messages from one sender reach a mailbox in order, so the three requests
// below are stashed exactly as sent.
func TestStashReplaysInOrderAcrossAClose(t *testing.T) {
	gated := providers.NewMemory("p")
	release := gated.Gate()
	src, _ := authority.NewStaticSource(nil)
	k, err := New(Options{Node: "n1", Providers: []providers.ContextToolProvider{gated}, Authority: src})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Shutdown(context.Background())
	access := authority.AccessContext{Tenant: "acme", Principal: "ada"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, err := k.Open(ctx, access)
	if err != nil {
		t.Fatal(err)
	}
	access.TurnID, access.LeaseID = o.TurnID, o.LeaseID
	access.Now = time.Now()
	pid := actor.NewPID(k.system.Address(), directoryName+"/"+o.TurnID)
	root := k.system.Root
	before := root.RequestFuture(pid, &listTools{access: access}, 10*time.Second)
	closing := root.RequestFuture(pid, &closeTurn{why: "closed"}, 10*time.Second)
	after := root.RequestFuture(pid, &listTools{access: access}, 10*time.Second)
	for gated.CatalogCalls() == 0 {
		time.Sleep(time.Millisecond)
	}
	release()
	if res, err := before.Result(); err != nil {
		t.Fatal(err)
	} else if _, ok := res.(*ToolList); !ok {
		t.Fatalf("the operation before the close got %v", res)
	}
	if res, err := closing.Result(); err != nil || res != true {
		t.Fatalf("close: %v %v", res, err)
	}
	res, err := after.Result()
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := res.(error); !ok || !errors.Is(e, reason.ErrTurnClosed) {
		t.Fatalf("the operation after the close got %v, want turn_closed", res)
	}
}
