package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/sharedos/sharedos/client"
)

// A draining node is not ready and takes no new turns — they open on the
// other node — but serves the turns it holds until they close; Drain
// returns then, or at its timeout with the count still open.
func TestDrainServesOpenTurnsUntilTheyClose(t *testing.T) {
	nodes := startCluster(t, clusterConfig(t, 3))
	c := client.New(connectAs(t, nodes[1], "runtime"), nil)
	access := client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"text"}}
	draining := nodes[0].Kernel().Node()
	var held *client.Turn
	for held == nil {
		tr, err := c.Open(ctx(t), access)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Handle.Node == draining {
			held = tr
		} else if err := tr.Close(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	type drained struct {
		open int
		err  error
	}
	done := make(chan drained, 1)
	go func() {
		open, err := nodes[0].Drain(context.Background(), time.Minute)
		done <- drained{open, err}
	}()
	for nodes[0].Ready() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	for i := range 10 {
		tr, err := c.Open(ctx(t), access)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Handle.Node == draining {
			t.Fatalf("open %d landed on %s, which drains", i, draining)
		}
		if err := tr.Close(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if _, err := held.Invoke(ctx(t), "text_stats", []byte(`{"text":"a b b"}`)); err != nil {
			t.Fatalf("a call on the draining node's turn: %v", err)
		}
	}
	select {
	case d := <-done:
		t.Fatalf("drain ended (%d open, %v) with a turn still open", d.open, d.err)
	default:
	}
	if err := held.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if d := <-done; d.open != 0 || d.err != nil {
		t.Fatalf("drain: %d open, %v; want 0, nil", d.open, d.err)
	}

	// A turn that stays open: the drain ends at its timeout and says so.
	left, err := c.Open(ctx(t), access)
	if err != nil {
		t.Fatal(err)
	}
	owner := nodes[1]
	if left.Handle.Node == nodes[2].Kernel().Node() {
		owner = nodes[2]
	}
	if open, err := owner.Drain(ctx(t), 200*time.Millisecond); open != 1 || err != nil {
		t.Fatalf("drain past its timeout: %d open, %v; want 1, nil", open, err)
	}
}
