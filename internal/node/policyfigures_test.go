package node_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/node"
	"github.com/sharedos/sharedos/internal/policy"
	"github.com/sharedos/sharedos/reason"
)

const (
	bobWithRead    = "tenant: acme\nprincipal: bob\ngrants:\n  - {id: bob-notes-read, capability: notes.get, resource: 'notes/acme/**'}\n  - {id: bob-notes-search, capability: notes.search, resource: 'notes/acme/**'}\n"
	bobWithoutRead = "tenant: acme\nprincipal: bob\ngrants:\n  - {id: bob-notes-search, capability: notes.search, resource: 'notes/acme/**'}\n"
)

// Propagation of a revocation across the three-node example under load:
// from `policy put` returning to every node refusing, under the revoked
// grant, the next call of a turn already open on it. Prints FIGURES;
// asserts only that every node refuses, never how fast.
//
//	go test -run TestPolicyRevocationPropagationFigures -v ./internal/node
func TestPolicyRevocationPropagationFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("three nodes under load")
	}
	nodes := startCluster(t, clusterConfig(t, 3))
	admin := policy.NewClient(connectAs(t, nodes[0], "admin"), "sharedos", 0)
	key := "grants.acme.bob"

	// Load: two of ada's turns per node calling as fast as they are
	// answered (a new turn when one has used its steps).
	stop, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	var load sync.WaitGroup
	var calls, failed atomic.Int64
	var codesMu sync.Mutex
	codes := map[reason.Code]int{}
	adaAccess := client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notes"}}
	for _, n := range nodes {
		for range 2 {
			tr := openOnNode(t, n, adaAccess)
			load.Go(func() {
				for stop.Err() == nil {
					cctx, cancel := context.WithTimeout(stop, 5*time.Second)
					_, err := tr.Invoke(cctx, "notes_get", []byte(`{"space":"acme","title":"plan"}`))
					cancel()
					calls.Add(1)
					if errors.Is(err, reason.ErrStepCeilingExceeded) {
						_ = tr.Close(stop)
						tr = openOnNode(t, n, adaAccess)
						continue
					}
					if err != nil && stop.Err() == nil {
						failed.Add(1)
						codesMu.Lock()
						codes[reason.Of(err)]++
						codesMu.Unlock()
					}
				}
			})
		}
	}
	defer load.Wait()

	get := []byte(`{"space":"acme","title":"plan"}`)
	// make test runs a few rounds (each must still refuse); make soak-faults
	// sets SHAREDOS_POLICY_ROUNDS=100 for the figures docs/operations.md gives.
	rounds := 10
	if v := os.Getenv("SHAREDOS_POLICY_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SHAREDOS_POLICY_ROUNDS=%q: want a positive count", v)
		}
		rounds = n
	}
	var every, each []time.Duration
	started := time.Now()
	probes := make([]*client.Turn, len(nodes))
	for r := range rounds {
		for _, tr := range probes {
			if tr != nil {
				_ = tr.Close(ctx(t))
			}
		}
		cur, err := admin.Do(ctx(t), policy.OpGet, policy.Request{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		// Restore the read grant (the same grant: the open turns hold it),
		// and wait until every node has it.
		if cur.Entry.Hash != policy.Hash(mustCanon(t, bobWithRead)) {
			rep, err := admin.Do(ctx(t), policy.OpPut, policy.Request{Key: key, Value: bobWithRead, Revision: cur.Entry.Revision})
			if err != nil {
				t.Fatal(err)
			}
			cur.Entry = rep.Entry
			for _, n := range nodes {
				if err := n.PolicyView().WaitFor(ctx(t), rep.Entry.Revision); err != nil {
					t.Fatal(err)
				}
			}
		}
		// A turn of bob's on each node, opened under the read grant.
		for i, n := range nodes {
			probes[i] = openOnNode(t, n, client.Access{Tenant: "acme", Principal: "bob", Namespaces: []string{"notes"}})
			if _, err := probes[i].Invoke(ctx(t), "notes_get", get); err != nil {
				t.Fatalf("round %d: node %d refused under the restored grant: %v", r, i+1, err)
			}
		}
		// Revoke it; from the put's return, each node's probe calls until
		// refused.
		if _, err := admin.Do(ctx(t), policy.OpPut, policy.Request{Key: key, Value: bobWithoutRead, Revision: cur.Entry.Revision}); err != nil {
			t.Fatal(err)
		}
		returned := time.Now()
		took := make([]time.Duration, len(probes))
		var wg sync.WaitGroup
		for i, tr := range probes {
			wg.Go(func() {
				for {
					_, err := tr.Invoke(ctx(t), "notes_get", get)
					if errors.Is(err, reason.ErrNotDiscoverable) {
						took[i] = time.Since(returned)
						return
					}
					if err != nil || ctx(t).Err() != nil {
						t.Errorf("round %d: node %d: %v while waiting for the refusal", r, i+1, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		each = append(each, took...)
		every = append(every, slices.Max(took))
	}
	elapsed := time.Since(started)
	stopLoad()
	load.Wait()
	q := func(d []time.Duration, p float64) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[min(len(s)-1, int(float64(len(s))*p))]
	}
	t.Logf("FIGURES policy revocation across 3 nodes (audit and policy bucket R3), %d rounds under load (%d calls by 6 turns of ada, %d refused %v, %.0f calls/s):", rounds, calls.Load(), failed.Load(), codes, float64(calls.Load())/elapsed.Seconds())
	t.Logf("FIGURES   from `policy put` returning to every node refusing the open turn's next call: p50 %s, p99 %s, max %s (goal p99 <= 100ms)", q(every, .5), q(every, .99), slices.Max(every))
	t.Logf("FIGURES   per node: p50 %s, p99 %s, max %s (%d samples; the time to the refused call's answer, the call included)", q(each, .5), q(each, .99), slices.Max(each), len(each))
}

// openOnNode opens a turn on node n through its own server (a runtime
// connected to it; opens are answered by whichever node the queue group
// picks, so it retries until n owns one).
func openOnNode(t *testing.T, n *node.Node, access client.Access) *client.Turn {
	t.Helper()
	c := client.New(connectAs(t, n, "runtime"), nil)
	for range 64 {
		tr, err := c.Open(ctx(t), access)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Handle.Node == n.Kernel().Node() {
			return tr
		}
		_ = tr.Close(ctx(t))
	}
	t.Fatalf("no turn opened on %s in 64 tries", n.Kernel().Node())
	return nil
}

func mustCanon(t *testing.T, v string) []byte {
	t.Helper()
	b, err := policy.DecodeItem(policy.Key{Kind: policy.Grants, Tenant: "acme", Name: "bob"}, []byte(v))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A node cut off from the policy bucket's leader (here: the only node left
// of three, with no quorum for the bucket) cannot learn of a revocation;
// it stops deciding once its view has gone unconfirmed for
// policy.max_staleness, refusing policy_stale, instead of honouring what
// it last heard. With acked audit the node stops already, at the audit
// stream (audit_unavailable), when that stream loses its quorum too; the
// audit here is async and fails open, so that the staleness bound is
// what stops it. Prints the time from the cut to the first refusal.
func TestPolicyCutOffNodeRefusesStale(t *testing.T) {
	if testing.Short() {
		t.Skip("three nodes")
	}
	cfg := clusterConfig(t, 3)
	cfg.Policy.MaxStaleness = config.Duration(3 * time.Second)
	cfg.Audit.Durability, cfg.Audit.FailOpen = "async", true
	nodes := startCluster(t, cfg)
	tr := openOnNode(t, nodes[0], client.Access{Tenant: "acme", Principal: "bob", Namespaces: []string{"notes"}})
	if _, err := tr.ListTools(ctx(t)); err != nil {
		t.Fatalf("before the cut: %v", err)
	}
	// With node-2 gone the bucket keeps a majority; node-3's stop cuts
	// node-1 off (its final checkpoint finds no quorum: not this test's
	// concern).
	_ = nodes[1].Shutdown(context.Background())
	cut := time.Now()
	_ = nodes[2].Shutdown(context.Background())
	wait, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	answered := 0
	seen := map[string]int{}
	for {
		lctx, lcancel := context.WithTimeout(wait, 2*time.Second)
		_, err := tr.ListTools(lctx)
		lcancel()
		if errors.Is(err, reason.ErrPolicyStale) {
			break
		}
		if err == nil {
			answered++
		} else {
			seen[err.Error()]++
		}
		if wait.Err() != nil {
			t.Fatalf("the cut-off node still decides a minute after the cut (%d answered; errors %v)", answered, seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("FIGURES a node cut off from the policy bucket's leader (policy.max_staleness 3s, confirmed every 750ms): first policy_stale %s after the cut; %d listings answered before it", time.Since(cut).Round(time.Millisecond), answered)
}
