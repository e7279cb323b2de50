package node_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/policy"
	"github.com/sharedos/sharedos/reason"
)

// Only an admin identity reaches the policy service: every other role is
// refused on every admin subject — by the bus (runtimes, readers and
// providers may not publish there, so no answer comes), or, for a request
// published inside the nodes' account, by the service (policy_forbidden).
func TestPolicyServiceAnswersOnlyAdmins(t *testing.T) {
	n, _ := startConnected(t, sampleConfig(t, t.TempDir()))
	adminConn := connectAs(t, n, "admin")
	admin := policy.NewClient(adminConn, "sharedos", 0)
	if _, err := admin.Do(ctx(t), policy.OpList, policy.Request{}); err != nil {
		t.Fatalf("the admin's list: %v", err)
	}
	// The admin has nothing but the policy subjects: no turns, no
	// JetStream API (it never touches the bucket itself).
	short, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	if _, err := client.New(adminConn, nil).Open(short, client.Access{Tenant: "acme", Principal: "ada"}); err == nil {
		t.Fatal("the admin opened a turn")
	}
	cancel()
	for _, subj := range []string{"$JS.API.INFO", "$JS.API.STREAM.INFO.KV_SHAREDOS_POLICY", "$KV.SHAREDOS_POLICY.grants.acme.ada"} {
		if m, err := adminConn.Request(subj, []byte(`{}`), 300*time.Millisecond); err == nil {
			t.Fatalf("the admin reached %s: %s", subj, m.Data)
		}
	}
	for _, who := range []string{"runtime", "auditor", "auditor-acme", "provider-calendar"} {
		c := policy.NewClient(connectAs(t, n, who), "sharedos", 0)
		for _, op := range policy.Ops() {
			short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			rep, err := c.Do(short, op, policy.Request{Key: "grants.acme.ada", Value: "tenant: acme\nprincipal: ada\n", Document: "principals: []\n"})
			cancel()
			if err == nil || rep.Entry != nil || rep.Entries != nil || rep.Document != "" || rep.Changes != nil {
				t.Fatalf("%s on %s: answered %+v (%v)", who, op, rep, err)
			}
		}
	}
	node := policy.NewClient(connectAs(t, n, "node"), "sharedos", 0)
	for _, op := range policy.Ops() {
		if _, err := node.Do(ctx(t), op, policy.Request{Key: "grants.acme.ada"}); !errors.Is(err, reason.ErrPolicyForbidden) {
			t.Fatalf("a request inside the nodes' account on %s: %v, want policy_forbidden", op, err)
		}
	}
	// The grants are as seeded: nothing any of them sent was written.
	e, err := n.Policy().Get(ctx(t), policy.Key{Kind: policy.Grants, Tenant: "acme", Name: "ada"})
	if err != nil || e.By != "cluster.yaml" {
		t.Fatalf("after the refusals: %+v %v", e, err)
	}
}

// Two admins put the same key at the same revision at once: one wins, the
// other is refused policy_conflict with the winner's revision; both the
// winner's change and nothing of the loser's are in the trail, which
// verifies.
func TestConcurrentAdminsOneWins(t *testing.T) {
	cfg := sampleConfig(t, t.TempDir())
	cfg.Identities = append(cfg.Identities, config.Identity{Name: "admin2", Role: "admin"})
	n, _ := startConnected(t, cfg)
	key := "grants.acme.bob"
	cur, err := policy.NewClient(connectAs(t, n, "admin"), "sharedos", 0).Do(ctx(t), policy.OpGet, policy.Request{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]string{
		"admin":  "tenant: acme\nprincipal: bob\ngrants: [{id: bob-a, capability: notes.get, resource: 'notes/acme/**'}]\n",
		"admin2": "tenant: acme\nprincipal: bob\ngrants: [{id: bob-b, capability: notes.get, resource: 'notes/acme/**'}]\n",
	}
	type result struct {
		who string
		rep policy.Reply
		err error
	}
	results := make(chan result, 2)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for who, v := range values {
		c := policy.NewClient(connectAs(t, n, who), "sharedos", 0)
		wg.Go(func() {
			<-start
			rep, err := c.Do(ctx(t), policy.OpPut, policy.Request{Key: key, Value: v, Revision: cur.Entry.Revision})
			results <- result{who, rep, err}
		})
	}
	close(start)
	wg.Wait()
	close(results)
	var won, lost []result
	for r := range results {
		if r.err == nil {
			won = append(won, r)
		} else {
			lost = append(lost, r)
		}
	}
	if len(won) != 1 || len(lost) != 1 {
		t.Fatalf("%d won, %d lost: %+v %+v", len(won), len(lost), won, lost)
	}
	var conflict *policy.ConflictReply
	if !errors.As(lost[0].err, &conflict) || !errors.Is(lost[0].err, reason.ErrPolicyConflict) || conflict.Current != won[0].rep.Entry.Revision {
		t.Fatalf("the loser: %v, want policy_conflict at revision %d", lost[0].err, won[0].rep.Entry.Revision)
	}
	e, _ := n.Policy().Get(ctx(t), policy.Key{Kind: policy.Grants, Tenant: "acme", Name: "bob"})
	if e.By != won[0].who || e.Revision != won[0].rep.Entry.Revision {
		t.Fatalf("stored %+v, the winner was %s", e, won[0].who)
	}
	data, evs := readAll(t, connectAs(t, n, "auditor"))
	var by []string
	for _, ev := range evs {
		if ev.Type == audit.PolicyChanged && ev.Policy.Key == key && ev.Policy.By != "cluster.yaml" {
			by = append(by, ev.Policy.By)
		}
	}
	if len(by) != 1 || by[0] != won[0].who {
		t.Fatalf("policy.changed by %v, want only the winner %s", by, won[0].who)
	}
	if rep := audit.Verify(data, true); !rep.OK() {
		t.Fatalf("verify: %+v", rep.Violations)
	}
}
