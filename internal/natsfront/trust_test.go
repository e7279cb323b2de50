package natsfront_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/internal/natsfront"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

// trustWorld is a node on a bus with identities, and its trail.
type trustWorld struct {
	bus   *conformance.Bus
	f     *conformance.Fixture
	front *natsfront.Front
}

func newTrustWorld(t *testing.T, extra []identity.Identity, opts natsfront.Options) *trustWorld {
	t.Helper()
	bus := conformance.StartBusWith(t, extra)
	f := conformance.NewFixture(t)
	opts.Identities, opts.TrustUnstamped = bus.Identities(), true
	kopts := f.Options()
	kopts.SharesTurns = bus.Identities().SharesTurns
	_, front := serve(t, bus.Connect(t, "node"), kopts, opts)
	return &trustWorld{bus: bus, f: f, front: front}
}

func (w *trustWorld) as(t *testing.T, name string) *client.Client {
	return client.New(w.bus.Connect(t, name), nil)
}

// closedWith returns the turns of the trail closed with reason why, each
// as its records.
func closedWith(sink *audit.Memory, why string) [][]*audit.Record {
	byTurn := map[string][]*audit.Record{}
	var order []string
	for _, r := range sink.Records() {
		id := r.Event.TurnID
		if _, ok := byTurn[id]; !ok {
			order = append(order, id)
		}
		byTurn[id] = append(byTurn[id], r)
	}
	var out [][]*audit.Record
	for _, id := range order {
		recs := byTurn[id]
		if last := recs[len(recs)-1].Event; last.Type == audit.TurnClosed && last.Close != nil && last.Close.Reason == why {
			out = append(out, recs)
		}
	}
	return out
}

// A credential profile names secrets, so naming one is asking for
// authority: a runtime of globex naming acme's profile, and ada naming
// bob's, are refused credential_forbidden at open and in a turn of one
// operation, each attempt recorded in the tenant's trail; the profiles
// bound to the principal still open.
func TestCredentialProfileIsBoundToItsPrincipal(t *testing.T) {
	w := newTrustWorld(t, nil, natsfront.Options{})
	acme, globex := w.as(t, conformance.AcmeRuntime), w.as(t, conformance.GlobexRuntime)
	adaWithBobs := messages.AccessOf(conformance.Ada)
	adaWithBobs.Credential = conformance.Bob.CredentialProfile
	gusWithAdas := messages.Access{Tenant: "globex", Principal: "gus", Credential: conformance.Ada.CredentialProfile}
	for _, tc := range []struct {
		name   string
		c      *client.Client
		access messages.Access
	}{
		{"ada names bob's profile", acme, adaWithBobs},
		{"globex names acme's profile", globex, gusWithAdas},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.c.Open(ctx(t), tc.access); !errors.Is(err, reason.ErrCredentialForbidden) {
				t.Fatalf("open: %v, want credential_forbidden", err)
			}
			if _, err := tc.c.ListTools(ctx(t), tc.access); !errors.Is(err, reason.ErrCredentialForbidden) {
				t.Fatalf("a turn of one operation: %v, want credential_forbidden", err)
			}
		})
	}
	refused := closedWith(w.f.Sink, string(reason.CredentialForbidden))
	if len(refused) != 4 {
		t.Fatalf("%d refusals recorded, want 4 (two opens, two one-operation lists)", len(refused))
	}
	for _, recs := range refused {
		opened := recs[0].Event
		if len(recs) != 2 || opened.Type != audit.TurnOpened || opened.Caller == "" || opened.CredentialProfile == "" {
			t.Fatalf("a refusal is turn.opened (with caller and profile) then turn.closed: %+v", opened)
		}
	}
	for _, ok := range []messages.Access{messages.AccessOf(conformance.Ada), {Tenant: "acme", Principal: "bob", Credential: conformance.SharedProfile}} {
		turn, err := acme.Open(ctx(t), ok)
		if err != nil {
			t.Fatalf("%s/%s with %s: %v", ok.Tenant, ok.Principal, ok.Credential, err)
		}
		_ = turn.Close(ctx(t))
	}
}

// A runtime narrowed to some credential profiles cannot name another,
// even one its principal is bound to.
func TestRuntimeNarrowedToCredentials(t *testing.T) {
	w := newTrustWorld(t, nil, natsfront.Options{})
	rt := w.as(t, conformance.AdaRuntime)
	shared := messages.AccessOf(conformance.Ada)
	shared.Credential = conformance.SharedProfile
	if _, err := rt.Open(ctx(t), shared); !errors.Is(err, reason.ErrCredentialForbidden) {
		t.Fatalf("narrowed runtime, another bound profile: %v, want credential_forbidden", err)
	}
	if _, err := w.as(t, conformance.AcmeRuntime).Open(ctx(t), shared); err != nil {
		t.Fatalf("the unnarrowed runtime may use it: %v", err)
	}
	turn, err := rt.Open(ctx(t), messages.AccessOf(conformance.Ada))
	if err != nil {
		t.Fatalf("narrowed runtime, its own profile: %v", err)
	}
	_ = turn.Close(ctx(t))
}

// A malformed access is invalid_request whoever sends it — before any
// tenant binding is judged — and nothing is recorded for it.
func TestMalformedAccessIsInvalidBeforeForbidden(t *testing.T) {
	w := newTrustWorld(t, nil, natsfront.Options{})
	globex := w.as(t, conformance.GlobexRuntime)
	long := strings.Repeat("a", 257)
	ada := messages.AccessOf(conformance.Ada)
	for name, a := range map[string]messages.Access{
		"no tenant":           {Principal: "ada"},
		"no principal":        {Tenant: "acme"},
		"257-byte tenant":     {Tenant: long, Principal: "ada"},
		"dotted tenant":       {Tenant: "acme.>", Principal: "ada"},
		"wildcard tenant":     {Tenant: "*", Principal: "ada"},
		"257-byte principal":  {Tenant: "acme", Principal: long},
		"257-byte credential": {Tenant: "acme", Principal: "ada", Credential: long},
		"long namespace":      {Tenant: "acme", Principal: "ada", Namespaces: []string{strings.Repeat("n", 129)}},
		"long attribute":      {Tenant: "acme", Principal: "ada", Attributes: map[string]string{"plan": long}},
		"namespaces of ada":   {Tenant: ada.Tenant, Principal: ada.Principal, Namespaces: make([]string, 1025)},
	} {
		t.Run(name, func(t *testing.T) {
			before := len(w.f.Sink.Records())
			if _, err := globex.Open(ctx(t), a); !errors.Is(err, reason.ErrInvalidRequest) {
				t.Fatalf("open: %v, want invalid_request", err)
			}
			if _, err := globex.ListTools(ctx(t), a); !errors.Is(err, reason.ErrInvalidRequest) {
				t.Fatalf("list: %v, want invalid_request", err)
			}
			if after := len(w.f.Sink.Records()); after != before {
				t.Fatalf("%d records for a malformed request", after-before)
			}
		})
	}
}

// A refused request costs the named tenant's trail one small turn: the
// claimed namespaces and attributes are not recorded, and past the
// identity's refusal rate nothing is recorded at all.
func TestRefusalsAreBoundedAndRateLimited(t *testing.T) {
	w := newTrustWorld(t, nil, natsfront.Options{})
	globex := w.as(t, conformance.GlobexRuntime)
	claim := messages.Access{Tenant: "acme", Principal: "ada", Attributes: map[string]string{}}
	for i := range 1024 {
		claim.Namespaces = append(claim.Namespaces, fmt.Sprintf("%0128d", i))
	}
	for i := range 64 {
		claim.Attributes[fmt.Sprintf("k%03d", i)] = strings.Repeat("v", 256)
	}
	const tries = 40
	start := time.Now()
	for range tries {
		if _, err := globex.Open(ctx(t), claim); !errors.Is(err, reason.ErrTenantForbidden) {
			t.Fatalf("open for acme as globex: %v, want tenant_forbidden", err)
		}
	}
	// The bucket refills at the limit's rate while the tries run, however
	// long a loaded machine makes them take.
	refilled := int(math.Ceil(time.Since(start).Seconds() * natsfront.DefaultRefusalRate.Rate))
	refused := closedWith(w.f.Sink, string(reason.TenantForbidden))
	burst := natsfront.DefaultRefusalRate.Burst
	if len(refused) < burst || len(refused) > burst+refilled {
		t.Fatalf("%d of %d refusals recorded; want the burst (%d), and at most the %d refilled meanwhile besides", len(refused), tries, burst, refilled)
	}
	if got := w.front.UnrecordedRefusals(); got != int64(tries-len(refused)) {
		t.Fatalf("%d refusals counted unrecorded, want %d", got, tries-len(refused))
	}
	for _, recs := range refused {
		opened := recs[0].Event
		if len(opened.Namespaces) != 0 {
			t.Fatalf("a refusal recorded the %d claimed namespaces", len(opened.Namespaces))
		}
		if n := len(recs[0].Data); n > 2<<10 {
			t.Fatalf("a refusal's turn.opened is %d bytes", n)
		}
		if opened.Caller != conformance.GlobexRuntime || opened.Tenant != "acme" {
			t.Fatalf("a refusal names tenant %q and caller %q", opened.Tenant, opened.Caller)
		}
	}
}

// Only the identity that opened a turn attaches to it: another runtime
// of the same tenant, holding the turn's id (it is in every audit event)
// and its authority, is answered as if there were no such turn — unless
// the opener shares its turns with it.
func TestAttachIsForTheOpener(t *testing.T) {
	const sharer = "acme-sharer"
	w := newTrustWorld(t, []identity.Identity{
		{Name: sharer, Role: identity.Runtime, Tenants: []string{"acme"}, SharesTurnsWith: []string{conformance.AcmePeer}},
	}, natsfront.Options{})
	owner, peer := w.as(t, conformance.AcmeRuntime), w.as(t, conformance.AcmePeer)
	turn, err := owner.Open(ctx(t), messages.AccessOf(conformance.Ada))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Attach(ctx(t), turn.Handle, messages.AccessOf(conformance.Ada)); !errors.Is(err, reason.ErrTurnNotFound) {
		t.Fatalf("another identity attached: %v, want turn_not_found", err)
	}
	again, err := owner.Attach(ctx(t), turn.Handle, messages.AccessOf(conformance.Ada))
	if err != nil {
		t.Fatalf("the opener attaches again: %v", err)
	}
	_ = again.Close(ctx(t))
	_ = turn.Close(ctx(t))

	shared, err := w.as(t, sharer).Open(ctx(t), messages.AccessOf(conformance.Ada))
	if err != nil {
		t.Fatal(err)
	}
	joined, err := peer.Attach(ctx(t), shared.Handle, messages.AccessOf(conformance.Ada))
	if err != nil {
		t.Fatalf("a runtime the opener shares with: %v", err)
	}
	if _, err := joined.ListTools(ctx(t)); err != nil {
		t.Fatalf("the sharing runtime lists: %v", err)
	}
	for _, ev := range w.f.Sink.Events(shared.Handle.TurnID) {
		if ev.Type == audit.TurnAttached && ev.Caller != conformance.AcmePeer {
			t.Fatalf("turn.attached names %q, want %s", ev.Caller, conformance.AcmePeer)
		}
	}
}
