package actors_test

import (
	"errors"
	"testing"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/reason"
)

// Describe names the catalogue the turn holds (the hash its listings and
// calls carry), needs the turn's lease, and records no listing.
func TestDescribeNamesTheHeldCatalogue(t *testing.T) {
	f := conformance.NewFixture(t)
	k := start(t, f, nil)
	c := ctx(t)
	who, o := openAs(t, k, conformance.Ada)
	info, err := k.Describe(c, who)
	if err != nil {
		t.Fatal(err)
	}
	if info.TurnID != o.TurnID || info.Tenant != "acme" || info.Principal != "ada" || info.StepCeiling != 64 || info.Steps != 0 {
		t.Fatalf("describe: %+v", info)
	}
	if got := len(events(f, o.TurnID, audit.CatalogListed)); got != 0 {
		t.Fatalf("describe recorded %d listings, want none", got)
	}
	l, err := k.ListTools(c, who)
	if err != nil {
		t.Fatal(err)
	}
	if l.CatalogHash != info.CatalogHash || info.CatalogHash == "" {
		t.Fatalf("describe says %q, the listing %q", info.CatalogHash, l.CatalogHash)
	}
	noLease := who
	noLease.LeaseID = "not-a-lease"
	if _, err := k.Describe(c, noLease); !errors.Is(err, &reason.Error{Code: reason.TurnNotFound}) {
		t.Fatalf("describe without the lease: %v, want turn_not_found", err)
	}
	oneOp := conformance.Ada
	if _, err := k.Describe(c, oneOp); !errors.Is(err, &reason.Error{Code: reason.InvalidRequest}) {
		t.Fatalf("describe naming no turn: %v, want invalid_request", err)
	}
}

// The transport an operation came through is recorded on its listing and
// call events; a page cut by MaxTools continues where it stopped.
func TestTransportRecordedAndPagesCutByCount(t *testing.T) {
	f := conformance.NewFixture(t)
	k := start(t, f, nil)
	c := ctx(t)
	who, o := openAs(t, k, conformance.Ada)
	who.Transport = "mcp"
	first, err := k.ListToolsPage(c, who, actors.ListPage{MaxTools: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Tools) != 1 || first.NextCursor != first.Tools[0].Alias {
		t.Fatalf("first page: %+v", first)
	}
	rest, err := k.ListToolsPage(c, who, actors.ListPage{After: first.NextCursor, MaxTools: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rest.Tools) != 1 || rest.NextCursor != "" || rest.Tools[0].Alias == first.Tools[0].Alias {
		t.Fatalf("second page: %+v", rest)
	}
	if _, err := k.Invoke(c, who, first.Tools[0].Alias, nil); err == nil {
		t.Fatal("a call without arguments was allowed")
	}
	for _, typ := range []audit.Type{audit.CatalogListed, audit.ToolInvoked} {
		for _, ev := range events(f, o.TurnID, typ) {
			if ev.Transport != "mcp" {
				t.Fatalf("%s recorded transport %q, want mcp", typ, ev.Transport)
			}
		}
	}
	if got := events(f, o.TurnID, audit.TurnOpened)[0].Transport; got != "" {
		t.Fatalf("turn.opened carries transport %q", got)
	}
}
