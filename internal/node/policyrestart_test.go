package node_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/node"
	"github.com/sharedos/sharedos/internal/policy"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

// A node restarted while the policy changes has every change when it
// serves again: of three nodes, node-3 stops; bob's grants are revoked
// while it is down; as it starts again (policy.source store: the file no
// longer states the policy) a provider is added — before node-3 reads the
// store or after, the test does not force which. Once node-3 has applied
// the last revision, a turn it serves for bob is refused under the
// revoked grant and its new turns have the added provider, as node-1's do.
func TestPolicyNodeRestartedDuringAChange(t *testing.T) {
	if testing.Short() {
		t.Skip("three nodes")
	}
	cfg := clusterConfig(t, 3)
	cfg.Policy.Source = config.PolicyFromStore
	nodes := startCluster(t, cfg)
	bob := client.Access{Tenant: "acme", Principal: "bob", Namespaces: []string{"notes", "extra"}}
	get := []byte(`{"space":"acme","title":"plan"}`)
	if _, err := openOnNode(t, nodes[2], bob).Invoke(ctx(t), "notes_get", get); err != nil {
		t.Fatalf("bob on node-3 before: %v", err)
	}
	if err := nodes[2].Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	store := nodes[0].Policy()
	gk := policy.Key{Kind: policy.Grants, Tenant: "acme", Name: "bob"}
	e, err := store.Get(ctx(t), gk)
	if err != nil {
		t.Fatal(err)
	}
	putWhileElecting(t, store, gk, "tenant: acme\nprincipal: bob\ngrants: []\n", e.Revision)
	ncfg, err := cfg.ForNode("node-3")
	if err != nil {
		t.Fatal(err)
	}
	type started struct {
		n   *node.Node
		err error
	}
	back := make(chan started, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		n, err := node.Start(sctx, ncfg, node.Options{Logger: slog.New(slog.DiscardHandler)})
		back <- started{n, err}
	}()
	added := putWhileElecting(t, store, policy.Key{Kind: policy.Providers, Name: "extra"},
		"id: extra\nkind: static\ntools:\n  - {name: echo, namespace: extra, description: Echo., capability: extra.echo, requirement: extra/echo, handler: echo, input_schema: {type: object}}\n", 0)
	s := <-back
	if s.err != nil {
		t.Fatalf("node-3 restarting: %v", s.err)
	}
	n3 := s.n
	t.Cleanup(func() { _ = n3.Shutdown(context.Background()) })
	for _, n := range []*node.Node{nodes[0], n3} {
		if err := n.PolicyView().WaitFor(ctx(t), added); err != nil {
			t.Fatal(err)
		}
		tr := openOnNode(t, n, bob)
		if _, err := tr.Invoke(ctx(t), "notes_get", get); !errors.Is(err, reason.ErrNotDiscoverable) {
			t.Fatalf("bob on %s after the revocation: %v, want not_discoverable", n.Kernel().Node(), err)
		}
		ns, err := tr.ListNamespaces(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(ns, func(x messages.Namespace) bool { return x.Name == "extra" }) {
			t.Fatalf("a new turn on %s lacks the provider added as node-3 started: %+v", n.Kernel().Node(), ns)
		}
		_ = tr.Close(ctx(t))
	}
}

// putWhileElecting puts value at k (expecting revision rev) while the
// cluster may be electing the bucket's leader anew (a node just stopped
// or is starting): each attempt is short, and an attempt that wrote but
// whose answer was lost is found by its conflict with the value written.
// It returns the revision the value was stored at.
func putWhileElecting(t *testing.T, store *policy.Store, k policy.Key, value string, rev uint64) uint64 {
	t.Helper()
	want, err := policy.DecodeItem(k, []byte(value))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		e, err := store.Put(pctx, k, []byte(value), rev, "admin")
		if errors.Is(err, policy.ErrConflict) {
			e, err = store.Get(pctx, k)
			if err == nil && !bytes.Equal(e.Value, want) {
				err = fmt.Errorf("%s is at revision %d by %s, not the value put", k, e.Revision, e.By)
				cancel()
				t.Fatal(err)
			}
		}
		cancel()
		if err == nil {
			return e.Revision
		}
		if time.Now().After(deadline) {
			t.Fatalf("putting %s: %v", k, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
