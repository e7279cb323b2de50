package node_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/policy"
	"github.com/sharedos/sharedos/reason"
)

// A grant revoked on the majority side while one node's network is cut,
// for longer than policy.max_staleness: when the link comes back, the cut
// node never allows the revoked grant — its first decisions are refused
// policy_stale (it cannot confirm its view until it has caught up) or
// not_discoverable (it has), never answered under the old grant. Prints
// how long after the heal the node refused not_discoverable.
func TestFaultPolicyRevokedDuringPartition(t *testing.T) {
	if testing.Short() || os.Getenv(faultLoadEnv) == "" {
		t.Skip("three node processes, one in a network namespace (root): make soak-faults (SHAREDOS_FAULT_LOAD set) runs it")
	}
	p := newNetPartition(t)
	const callTimeout = 4 * time.Second
	bin := buildNode(t, t.TempDir())
	pc := startPartitionedCluster(t, bin, p)
	c := client.New(pc.connect(t, 0, "runtime"), &client.Options{ResendAfter: time.Second})
	open, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr, err := openOn(open, c, client.Access{Tenant: "acme", Principal: "bob", Namespaces: []string{"notes"}}, "node-3", callTimeout, nil)
	if err != nil {
		t.Fatal(err)
	}
	get := []byte(`{"space":"acme","title":"plan"}`)
	call := func() error {
		cctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		_, err := tr.Invoke(cctx, "notes_get", get)
		return err
	}
	if err := call(); err != nil {
		t.Fatalf("before the cut: %v", err)
	}
	admin := policy.NewClient(pc.connect(t, 0, "admin"), "sharedos", 0)
	cur, err := admin.Do(ctx(t), policy.OpGet, policy.Request{Key: "grants.acme.bob"})
	if err != nil {
		t.Fatal(err)
	}

	p.cut(t)
	cutAt := time.Now()
	var rep policy.Reply
	for {
		// The policy service's queue group still holds node-3's member
		// until the servers notice the cut: a request it is given goes
		// unanswered, and the majority may be electing the bucket's leader
		// anew. Each attempt is short.
		pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Second)
		rep, err = admin.Do(pctx, policy.OpPut, policy.Request{Key: "grants.acme.bob", Value: bobWithoutRead, Revision: cur.Entry.Revision})
		pcancel()
		if err == nil {
			break
		}
		if time.Since(cutAt) > 60*time.Second {
			t.Fatalf("the majority did not take the revocation: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	revokedAt := time.Now()
	time.Sleep(35 * time.Second) // past policy.max_staleness (the default, 30s)
	p.heal(t)
	healedAt := time.Now()

	outcomes := map[reason.Code]int{}
	for {
		err := call()
		switch {
		case err == nil:
			t.Fatalf("the cut node allowed a call under the revoked grant %s after the heal", time.Since(healedAt))
		case errors.Is(err, reason.ErrNotDiscoverable):
			t.Logf("FIGURES policy revoked on the majority %s after node-3's network was cut (revision %d), healed %s after: node-3 refused not_discoverable %s after the heal (its routes back); the calls before it, none allowed: %v",
				revokedAt.Sub(cutAt).Round(time.Millisecond), rep.Entry.Revision, healedAt.Sub(revokedAt).Round(time.Millisecond), time.Since(healedAt).Round(time.Millisecond), outcomes)
			return
		default:
			outcomes[reason.Of(err)]++
		}
		if time.Since(healedAt) > 60*time.Second {
			t.Fatalf("node-3 never refused not_discoverable after the heal: %v", outcomes)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
