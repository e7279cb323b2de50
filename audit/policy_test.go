package audit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sharedos/sharedos/audit"
)

// A policy chain verifies like a turn's: opened, changes, closed, each
// linked; a policy.changed outside a policy chain, a policy chain holding
// another event type, a change with no key, and a change deleted from the
// chain are violations.
func TestPolicyChainVerifies(t *testing.T) {
	chain := func() [][]byte {
		m := audit.NewMemory()
		c := audit.NewPolicyChain("n1", "i1")
		t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
		for i, key := range []string{"grants.acme.ada", "providers.util", "identities.runtime"} {
			if _, err := c.Emit(m, t0.Add(time.Duration(i)*time.Second), audit.PolicyChange{Key: key, Op: "add", Revision: uint64(i + 1), Hash: strings.Repeat("0", 64), By: "admin"}); err != nil {
				t.Fatal(err)
			}
		}
		c.Close(m, t0.Add(time.Minute))
		if _, err := c.Emit(m, t0, audit.PolicyChange{Key: "x", By: "y"}); err == nil {
			t.Fatal("a closed chain took a change")
		}
		var out [][]byte
		for _, r := range m.Records() {
			out = append(out, r.Data)
		}
		return out
	}
	recs := chain()
	if len(recs) != 5 {
		t.Fatalf("%d records, want turn.opened, 3 changes, turn.closed", len(recs))
	}
	if r := audit.Verify(recs, false); !r.OK() {
		t.Fatalf("a genuine policy chain: %v", r.Violations)
	}
	deleted := append(append([][]byte{}, recs[:2]...), recs[3:]...)
	if r := audit.Verify(deleted, false); r.OK() {
		t.Fatal("a deleted policy change went unnoticed")
	}
	for name, edit := range map[string]func(*audit.Event){
		"policy.changed in a tenant's chain": func(e *audit.Event) { e.Tenant = "acme" },
		"another type in a policy chain":     func(e *audit.Event) { e.Type, e.Policy = audit.NamespacesUpdated, nil },
		"a change naming no key":             func(e *audit.Event) { e.Policy.Key = "" },
	} {
		m := audit.NewMemory()
		c := audit.NewPolicyChain("n1", "i1")
		if name == "policy.changed in a tenant's chain" {
			// A tenant's chain (turn.opened in acme) holding a policy change.
			open, _ := audit.Encode(&audit.Event{ID: "x-0", Type: audit.TurnOpened, Time: time.Unix(1, 0).UTC(), Tenant: "acme", Principal: "ada", TurnID: "t1"})
			ev := &audit.Event{ID: "x-1", Type: audit.PolicyChanged, Time: time.Unix(2, 0).UTC(), Tenant: "acme", Principal: "ada", TurnID: "t1", Seq: 1, PrevHash: open.Hash,
				Policy: &audit.PolicyChange{Key: "grants.acme.ada", Op: "add", Revision: 1, By: "admin"}}
			rec, _ := audit.Encode(ev)
			if r := audit.Verify([][]byte{open.Data, rec.Data}, true); r.OK() {
				t.Errorf("%s: not a violation", name)
			}
			continue
		}
		// Rebuild the chain's second record with the edit, relinked.
		if _, err := c.Emit(m, time.Unix(1, 0), audit.PolicyChange{Key: "grants.acme.ada", Op: "add", Revision: 1, By: "admin"}); err != nil {
			t.Fatal(err)
		}
		rs := m.Records()
		ev := *rs[1].Event
		p := *ev.Policy
		ev.Policy = &p
		edit(&ev)
		rec, _ := audit.Encode(&ev)
		if r := audit.Verify([][]byte{rs[0].Data, rec.Data}, true); r.OK() {
			t.Errorf("%s: not a violation", name)
		}
	}
}
