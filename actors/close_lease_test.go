package actors_test

import (
	"errors"
	"testing"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/reason"
)

// A close takes its lease from access.LeaseID when it names none of its
// own, as every other operation on the turn does; a close naming no lease
// at all is refused, and the turn stays open.
func TestCloseTakesTheLeaseFromAccess(t *testing.T) {
	f := conformance.NewFixture(t)
	k := start(t, f, nil)
	c := ctx(t)
	o, err := k.Open(c, conformance.Ada)
	if err != nil {
		t.Fatal(err)
	}
	who := conformance.Ada
	who.TurnID = o.TurnID

	if err := k.Close(c, who, ""); !errors.Is(err, reason.ErrInvalidRequest) {
		t.Fatalf("close naming no lease: %v, want invalid_request", err)
	}
	who.LeaseID = o.LeaseID
	if _, err := k.ListTools(c, who); err != nil {
		t.Fatalf("the turn after a refused close: %v", err)
	}
	if got := events(f, who.TurnID, audit.TurnClosed); len(got) != 0 {
		t.Fatalf("a close naming no lease closed the turn: %+v", got)
	}

	if err := k.Close(c, who, ""); err != nil {
		t.Fatalf("close with the lease in access: %v", err)
	}
	if got := events(f, who.TurnID, audit.TurnClosed); len(got) != 1 || got[0].Close.Reason != "released" {
		t.Fatalf("turn.closed after a close with the lease in access: %+v", got)
	}
	if _, err := k.ListTools(c, who); !errors.Is(err, reason.ErrTurnClosed) {
		t.Fatalf("list after close: %v, want turn_closed", err)
	}
}
