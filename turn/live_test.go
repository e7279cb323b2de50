package turn_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/reason"
	"github.com/sharedos/sharedos/turn"
)

// Under live policy a turn's listing and calls are refused policy_stale
// while the view is unconfirmed beyond its bound, and credential_forbidden
// once the turn's credential binding is withdrawn; both are recorded on
// the call's tool.invoked. Confirming the view again lets calls through.
func TestLivePolicyRefusesStaleAndWithdrawnBinding(t *testing.T) {
	live, err := authority.NewLive(map[[2]string][]authority.GrantSpec{{"acme", "ada"}: {{ID: "g", Capability: "notes.*", Resource: "notes/**"}}},
		[]authority.CredentialBinding{{Tenant: "acme", Profile: "work", Principals: []string{"ada"}}})
	if err != nil {
		t.Fatal(err)
	}
	live.SetMaxStaleness(time.Second)
	live.Confirm(t0)
	access := authority.AccessContext{Tenant: "acme", Principal: "ada", CredentialProfile: "work", TurnID: "t1", Now: t0, EnabledNamespaces: []string{"notes"}}
	auth, _ := live.Resolve(context.Background(), access)
	m, _ := turn.New(turn.Config{Incarnation: "i", StepCeiling: 10}, access)
	m.Resolve(t0, turn.Resolution{Authority: auth, Registry: registry(t, def("search", "notes", "notes.search", "notes/search"))})
	call := turn.Invocation{Alias: "notes_search", Arguments: json.RawMessage(`{"w":"ok"}`)}

	if d, _ := m.Decide(t0.Add(time.Second), call); d.Err != nil {
		t.Fatalf("fresh view: %v", d.Err)
	}
	late := t0.Add(2 * time.Second)
	d, rec := m.Decide(late, call)
	if d.Err == nil || d.Err.Code != reason.PolicyStale || rec.Event.Call.Reason != string(reason.PolicyStale) {
		t.Fatalf("stale view: %v", d.Err)
	}
	if _, _, _, err := m.List(late); !errorIs(err, reason.PolicyStale) {
		t.Fatalf("listing on a stale view: %v", err)
	}
	live.Confirm(late)
	if d, _ := m.Decide(late, call); d.Err != nil {
		t.Fatalf("confirmed again: %v", d.Err)
	}
	if err := live.Replace(map[[2]string][]authority.GrantSpec{{"acme", "ada"}: {{ID: "g", Capability: "notes.*", Resource: "notes/**"}}}, nil); err != nil {
		t.Fatal(err)
	}
	if d, _ := m.Decide(late, call); d.Err == nil || d.Err.Code != reason.CredentialForbidden {
		t.Fatalf("withdrawn binding: %v", d.Err)
	}
}

func errorIs(err error, c reason.Code) bool { return reason.Of(err) == c }
