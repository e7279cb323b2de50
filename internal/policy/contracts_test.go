package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/contract"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
	"github.com/sharedos/sharedos/internal/policy"
)

func openContracts(t *testing.T, nc *nats.Conn) *policy.ContractStore {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := policy.OpenContracts(ctx, js, policy.ContractsOptions{Bucket: policy.ContractsBucket("SHAREDOS_POLICY")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func driftTool(t *testing.T, desc string) *catalog.Tool {
	t.Helper()
	tl, err := catalog.Normalize("github-work", catalog.Definition{
		Name: "create_issue", Description: desc,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"repo":{"type":"string"}}}`),
		Capability:  "mcp.github-work.create_issue", Requirement: "mcp/github-work/create_issue",
	}, catalog.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

// Two nodes' stores on one bucket: a record written by one reaches the
// other's copy; a write from a copy the other node has moved past is
// refused ErrConflict, and contract.Update reads the bucket and applies it
// on top, so neither node's update is lost.
func TestContractStoreAcrossNodes(t *testing.T) {
	_, nc := natstest.Start(t, true)
	a, b := openContracts(t, nc), openContracts(t, nc)
	ctx := context.Background()
	k := contract.Key{Tenant: "acme", Provider: "github-work", Tool: "create_issue"}
	if _, rev, err := a.Get(ctx, k); err != nil || rev != 0 {
		t.Fatalf("empty: %d %v", rev, err)
	}
	hold := func(string) contract.Policy { return contract.Policy{Drift: contract.DriftHold} }
	ga := contract.NewGate(a, contract.GateOptions{Policy: hold})
	gb := contract.NewGate(b, contract.GateOptions{Policy: hold})
	v1, v2, v3 := driftTool(t, "Create an issue."), driftTool(t, "Create an issue. v2"), driftTool(t, "Create an issue. v3")
	if kept, _ := ga.Admit(ctx, "acme", "github-work", []*catalog.Tool{v1}); len(kept) != 1 {
		t.Fatal("first use not trusted")
	}
	if kept, _ := ga.Admit(ctx, "acme", "github-work", []*catalog.Tool{v2}); len(kept) != 0 {
		t.Fatal("drift not held")
	}
	// b's copy catches up through its watch.
	waitFor(t, func() bool {
		r, _, _ := b.Get(ctx, k)
		return r.Pending != nil && r.Pending.Revision == v2.Revision
	})
	_, before, _ := b.Get(ctx, k)
	if _, err := ga.Accept(ctx, k, v2.Revision, "carol", "ok"); err != nil {
		t.Fatal(err)
	}
	// A write from b's copy as it was: refused, not applied.
	r, _, _ := b.Get(ctx, k)
	if _, err := b.Put(ctx, k, r, before); !errors.Is(err, contract.ErrConflict) {
		t.Fatalf("a stale write: %v", err)
	}
	// b's gate puts v3 up for review over a's acceptance.
	if kept, _ := gb.Admit(ctx, "acme", "github-work", []*catalog.Tool{v3}); len(kept) != 0 {
		t.Fatal("v3 not held")
	}
	got, _, err := a.Latest(ctx, k)
	if err != nil || got.Accepted.Revision != v2.Revision || got.Pending == nil || got.Pending.Revision != v3.Revision {
		t.Fatalf("after both nodes wrote: %+v %v", got, err)
	}
	es, _ := b.List(ctx, "acme")
	if len(es) != 1 || es[0].Key != k {
		t.Fatalf("list: %+v", es)
	}
	if es, _ := b.List(ctx, "globex"); len(es) != 0 {
		t.Fatalf("another tenant's list: %+v", es)
	}
}

// Writers on two nodes updating one record at once: each update that
// reports success is in the final record (compare-and-set: none
// overwrote another).
func TestContractStoreConcurrentWriters(t *testing.T) {
	_, nc := natstest.Start(t, true)
	stores := []*policy.ContractStore{openContracts(t, nc), openContracts(t, nc)}
	ctx := context.Background()
	k := contract.Key{Tenant: "acme", Provider: "github-work", Tool: "create_issue"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var done []string
	for i := range contract.MaxRejected {
		wg.Go(func() {
			mark := string(rune('a' + i))
			_, err := contract.Update(ctx, stores[i%2], k, func(r contract.Record, _ bool) (contract.Record, bool, error) {
				r.Rejected = append(slices.Clone(r.Rejected), mark)
				return r, true, nil
			})
			if err == nil {
				mu.Lock()
				done = append(done, mark)
				mu.Unlock()
			} else if !errors.Is(err, contract.ErrConflict) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	r, _, err := stores[0].Latest(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(done)
	got := slices.Sorted(slices.Values(r.Rejected))
	if !slices.Equal(got, done) || len(done) < contract.MaxRejected/2 {
		t.Fatalf("updates that succeeded %v; the record holds %v", done, got)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
