package actors_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/reason"
)

// Turns lists the named open turns of the tenants asked for; Inspect shows
// one turn's held catalogue, hash and steps, records nothing and needs no
// lease; a turn that is not open is turn_not_found.
func TestTurnsAndInspect(t *testing.T) {
	f := conformance.NewFixture(t)
	k := start(t, f, nil)
	c := ctx(t)
	who, o := openAs(t, k, conformance.Ada)
	_, g := openAs(t, k, authority.AccessContext{Tenant: "globex", Principal: "gus"})
	all, err := k.Turns(c, nil, 0)
	if err != nil || len(all) != 2 || all[0].TurnID != o.TurnID || all[1].TurnID != g.TurnID {
		t.Fatalf("all turns: %+v %v", all, err)
	}
	acme, err := k.Turns(c, func(t string) bool { return t == "acme" }, 0)
	if err != nil || len(acme) != 1 || acme[0].TurnID != o.TurnID || acme[0].Resolved {
		t.Fatalf("acme's turns: %+v %v", acme, err)
	}
	l, err := k.ListTools(c, who)
	if err != nil {
		t.Fatal(err)
	}
	before := len(f.Sink.Events(o.TurnID))
	v, err := k.Inspect(c, o.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Resolved || v.CatalogHash != l.CatalogHash || len(v.Tools) == 0 || v.Tenant != "acme" || v.Leases != 1 || v.StepCeiling != 64 {
		t.Fatalf("inspect: %+v", v)
	}
	if after := len(f.Sink.Events(o.TurnID)); after != before {
		t.Fatalf("inspect recorded %d events", after-before)
	}
	if _, err := k.Inspect(c, "no-such-turn"); !errors.Is(err, reason.ErrTurnNotFound) {
		t.Fatalf("inspect of no turn: %v", err)
	}
}

// Inspecting a turn is not activity: a turn inspected without pause
// still idles out (were inspection counted, it would stay open).
func TestInspectingDoesNotKeepATurnOpen(t *testing.T) {
	f := conformance.NewFixture(t)
	k := start(t, f, func(o *actors.Options) { o.IdleTimeout = 20 * time.Millisecond })
	c := ctx(t)
	_, o := openAs(t, k, conformance.Ada)
	for {
		_, err := k.Inspect(c, o.TurnID)
		if errors.Is(err, reason.ErrTurnNotFound) {
			return
		}
		if c.Err() != nil {
			t.Fatal("a turn inspected without pause never idled out")
		}
		time.Sleep(time.Millisecond)
	}
}
