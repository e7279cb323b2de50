package authority_test

import (
	"context"
	"testing"
	"time"

	"github.com/sharedos/sharedos/authority"
)

// A turn's Authority from a Live source keeps the grants it resolved, but
// judges each against the policy as it is at the decision: revoked is not
// valid, a shortened window is the shorter one, a changed pattern is not
// the held grant, and a grant added later is not the turn's.
func TestLiveValidityJudgedAtEachDecision(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	who := [2]string{"acme", "ada"}
	notion := authority.GrantSpec{ID: "notion", Capability: "notion.*", Resource: "notion/**"}
	notes := authority.GrantSpec{ID: "notes", Capability: "notes.*", Resource: "notes/**"}
	live, err := authority.NewLive(map[[2]string][]authority.GrantSpec{who: {notion, notes}},
		[]authority.CredentialBinding{{Tenant: "acme", Profile: "work", Principals: []string{"ada"}}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := live.Resolve(context.Background(), authority.AccessContext{Tenant: "acme", Principal: "ada", CredentialProfile: "work"})
	if err != nil || !a.IsLive() {
		t.Fatalf("resolve: %v live=%v", err, a.IsLive())
	}
	if _, ok := a.CanInvoke("notion.search", "notion/p", t0); !ok || !a.CredentialInForce() {
		t.Fatal("held grant refused before any change")
	}

	// Revoke notion, shorten notes, add github.
	short := notes
	short.ExpiresAt = t0.Add(time.Minute)
	if err := live.SetGrants("acme", "ada", []authority.GrantSpec{short, {ID: "github", Capability: "github.*", Resource: "github/**"}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.CanInvoke("notion.search", "notion/p", t0); ok || a.CanDiscover("notion.search", t0) {
		t.Error("revoked grant still allows the open turn")
	}
	if _, ok := a.Held().CanInvoke("notion.search", "notion/p", t0); !ok {
		t.Error("Held() judges live validity")
	}
	if _, ok := a.CanInvoke("notes.put", "notes/x", t0); !ok {
		t.Error("shortened grant refused inside its new window")
	}
	if _, ok := a.CanInvoke("notes.put", "notes/x", t0.Add(time.Minute)); ok {
		t.Error("shortened grant allowed after its new expiry")
	}
	if a.CanDiscover("github.search", t0) {
		t.Error("a grant added after resolution widened the open turn")
	}
	b, _ := live.Resolve(context.Background(), authority.AccessContext{Tenant: "acme", Principal: "ada"})
	if !b.CanDiscover("github.search", t0) || b.CanDiscover("notion.search", t0) {
		t.Error("a new turn does not see the current grants")
	}

	// A changed pattern under the same id is not the held grant.
	if err := live.SetGrants("acme", "ada", []authority.GrantSpec{{ID: "notes", Capability: "notes.**", Resource: "notes/**"}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.CanInvoke("notes.put", "notes/x", t0); ok {
		t.Error("a grant whose pattern changed still allows the turn that held the old one")
	}

	// A withdrawn credential binding.
	if err := live.Replace(map[[2]string][]authority.GrantSpec{who: {notion}}, nil); err != nil {
		t.Fatal(err)
	}
	if a.CredentialInForce() {
		t.Error("withdrawn credential binding still in force")
	}
	// An invalid replacement changes nothing.
	if err := live.Replace(map[[2]string][]authority.GrantSpec{who: {{ID: "x", Capability: "", Resource: "a"}}}, nil); err == nil {
		t.Error("invalid policy accepted")
	}
	if err := live.SetGrants("acme", "ada", []authority.GrantSpec{notion, notion}); err == nil {
		t.Error("a grant id listed twice was accepted")
	}
	if _, ok := a.CanInvoke("notion.search", "notion/p", t0); !ok {
		t.Error("a refused replacement changed the policy")
	}
}

// A view unconfirmed for longer than its bound is stale; confirming it
// again makes it current. Without a bound it is never stale.
func TestLiveStaleness(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	live, err := authority.NewLive(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := live.Resolve(context.Background(), authority.AccessContext{Tenant: "acme", Principal: "ada"})
	if a.Stale(t0) {
		t.Fatal("stale without a bound")
	}
	live.SetMaxStaleness(time.Second)
	live.Confirm(t0)
	if a.Stale(t0.Add(time.Second)) {
		t.Error("stale at exactly the bound")
	}
	if !a.Stale(t0.Add(time.Second + time.Nanosecond)) {
		t.Error("not stale past the bound")
	}
	live.Confirm(t0.Add(-time.Hour)) // an older confirmation changes nothing
	live.Confirm(t0.Add(5 * time.Second))
	if a.Stale(t0.Add(6*time.Second)) || !live.Confirmed().Equal(t0.Add(5*time.Second)) {
		t.Error("a new confirmation did not make the view current")
	}
	if a.Held().Stale(t0.Add(time.Hour)) {
		t.Error("an Authority without live policy is stale")
	}
}
