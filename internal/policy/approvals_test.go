package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/policy"
)

// Approval rules are policy like grants: a key per tenant and rule,
// validated before they are stored (a rule trusting annotations without
// naming their provider is refused), and a view keeps the rules in force
// equal to the bucket's.
func TestApprovalRulesLive(t *testing.T) {
	base := baseConfig(t)
	s, _ := openStore(t, base, &recorder{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := s.Seed(ctx, policy.FromConfig(base), "seed"); err != nil {
		t.Fatal(err)
	}
	live, _ := authority.NewLive(nil, nil)
	rules := &approval.Live{}
	v, err := s.Watch(ctx, live, policy.ViewOptions{MaxStaleness: time.Minute, Approvals: rules})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	echo := approval.Subject{Tenant: "acme", Provider: "util", Tool: "echo", Capability: "util.echo", Annotations: json.RawMessage(`{"destructiveHint":true}`)}
	if _, ok := rules.Rules().Match(echo); ok {
		t.Fatal("a rule before any was written")
	}
	k := policy.Key{Kind: policy.Approvals, Tenant: "acme", Name: "destructive"}
	if got, err := policy.ParseKey(k.String()); err != nil || got != k {
		t.Fatalf("key %q: %+v %v", k, got, err)
	}
	if _, err := s.Put(ctx, k, []byte("tenant: acme\nname: destructive\nannotations: {destructiveHint: true}\n"), 0, "admin"); !errors.Is(err, policy.ErrInvalid) {
		t.Fatalf("a rule trusting annotations of no named provider: %v, want ErrInvalid", err)
	}
	e, err := s.Put(ctx, k, []byte("tenant: acme\nname: destructive\nprovider: util\nannotations: {destructiveHint: true}\nexpiry: 5m\nseparate_duties: true\n"), 0, "admin")
	if err != nil {
		t.Fatal(err)
	}
	if err := v.WaitFor(ctx, e.Revision); err != nil {
		t.Fatal(err)
	}
	r, ok := rules.Rules().Match(echo)
	if !ok || r.Name != "destructive" || r.Expiry != 5*time.Minute || !r.SeparateDuties {
		t.Fatalf("after the put: %+v %v", r, ok)
	}
	d, _, err := s.Export(ctx)
	if err != nil || len(d.Approvals) != 1 || d.Approvals[0].Provider != "util" {
		t.Fatalf("export: %+v %v", d.Approvals, err)
	}
	rev, err := s.Delete(ctx, k, e.Revision, "admin")
	if err != nil {
		t.Fatal(err)
	}
	if err := v.WaitFor(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if _, ok := rules.Rules().Match(echo); ok {
		t.Fatal("a deleted rule is still in force")
	}
}
