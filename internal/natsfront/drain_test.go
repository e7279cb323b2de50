package natsfront_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/natsfront"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

// A draining front takes no new turns — every open goes to the other
// node — while the turns it holds keep being served, each request
// answered once, until it stops.
func TestDrainingFrontServesItsTurnsAndTakesNoOpens(t *testing.T) {
	_, nc := natstest.Start(t, false)
	f1, f2 := conformance.NewFixture(t), conformance.NewFixture(t)
	o1, o2 := f1.Options(), f2.Options()
	o1.Node, o2.Node = "n1", "n2"
	_, front1 := serve(t, nc, o1, natsfront.Options{})
	serve(t, nc, o2, natsfront.Options{})
	c := client.New(nc, nil)
	access := client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notion"}}
	var held *client.Turn
	for held == nil {
		tr, err := c.Open(ctx(t), access)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Handle.Node == "n1" {
			held = tr
		} else if err := tr.Close(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if err := front1.Drain(); err != nil {
		t.Fatal(err)
	}
	if err := front1.Drain(); err != nil { // idempotent
		t.Fatal(err)
	}
	for i := range 20 {
		tr, err := c.Open(ctx(t), access)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Handle.Node != "n2" {
			t.Fatalf("open %d landed on the draining node %s", i, tr.Handle.Node)
		}
		// A turn of one operation also goes to the other node.
		if rep, err := c.ListTools(ctx(t), access); err != nil || len(rep.Tools) == 0 {
			t.Fatalf("one-operation listing while n1 drains: %v", err)
		}
	}
	for range 5 {
		if _, err := held.Invoke(ctx(t), "notion_search", []byte(`{"workspace":"acme","query":"q"}`)); err != nil {
			t.Fatalf("a call on the draining node's turn: %v", err)
		}
	}
	before := len(eventsOf(f1, held.Handle.TurnID, "tool.invoked"))
	if before != 5 {
		t.Fatalf("%d calls recorded on the held turn, want 5 (each request answered once)", before)
	}
	if err := held.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := front1.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Drain passes through a moment when the node has two services — the
// old one and the one taking its turn endpoints over — and the drain
// above cannot catch that moment. Two fronts of one kernel hold the same
// state for as long as wanted: a request to one of the node's turns is
// handled by one of them, never by both (they share the node's queue
// group).
func TestTwoServicesOfOneNodeHandleEachTurnRequestOnce(t *testing.T) {
	_, nc := natstest.Start(t, false)
	var handled atomic.Int32
	opts := natsfront.Options{Observe: func(op messages.Op, _ reason.Code, _ time.Duration) {
		if op == messages.OpList {
			handled.Add(1)
		}
	}}
	k, first := serve(t, nc, conformance.NewFixture(t).Options(), opts)
	second, err := natsfront.Serve(nc, k, opts)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := client.New(nc, nil).Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notion"}})
	if err != nil {
		t.Fatal(err)
	}
	const lists = 20
	for range lists {
		if _, err := tr.ListTools(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []*natsfront.Front{second, first} { // Stop waits for the requests in flight
		if err := f.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := handled.Load(); n != lists {
		t.Fatalf("%d listings handled for %d requests", n, lists)
	}
}
