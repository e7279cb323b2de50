package natsfront_test

import (
	"testing"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/natsfront"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

// A CloseRequest carrying its lease only in access.lease releases it (the
// turn closes, recorded released); one carrying no lease is refused
// invalid_request, and the turn stays open.
func TestCloseWithTheLeaseInAccess(t *testing.T) {
	n := startNode(t, natsfront.Options{})
	c := client.New(n.nc, nil)
	closeRaw := func(turn *client.Turn, lease string) *messages.Error {
		t.Helper()
		req := &messages.CloseRequest{V: messages.Version, Access: messages.Access{Tenant: "acme", Principal: "ada", TurnID: turn.Handle.TurnID, Lease: lease}}
		msg, err := n.nc.RequestWithContext(ctx(t), messages.TurnSubject("sharedos", turn.Handle.Node, messages.OpClose), mustEncode(t, req))
		if err != nil {
			t.Fatal(err)
		}
		var rep messages.AckReply
		if err := messages.Decode(msg.Data, &rep, messages.DefaultLimits()); err != nil {
			t.Fatal(err)
		}
		return rep.Error
	}
	open := func() *client.Turn {
		turn, err := c.Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notion"}})
		if err != nil {
			t.Fatal(err)
		}
		return turn
	}

	a := open()
	if e := closeRaw(a, a.LeaseID); e != nil {
		t.Fatalf("close with the lease in access.lease: %+v", e)
	}
	if got := eventsOf(n.f, a.Handle.TurnID, audit.TurnClosed); len(got) != 1 || got[0].Close.Reason != audit.CloseReleased {
		t.Fatalf("turn.closed after the close: %+v", got)
	}

	b := open()
	if e := closeRaw(b, ""); e == nil || e.Code != string(reason.InvalidRequest) {
		t.Fatalf("close with no lease: %+v, want invalid_request", e)
	}
	if _, err := b.ListTools(ctx(t)); err != nil {
		t.Fatalf("the turn after a refused close: %v", err)
	}
	if err := b.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}
}
