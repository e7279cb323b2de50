package provider_test

import (
	"context"
	"crypto/ed25519"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/provider"
)

// A node asks the instance it hosts first: with two instances of one
// provider in the queue group, every catalogue and call of a kernel
// preferring instance n1 goes to n1's; once that one stops, the group
// serves (no responders on the instance subject: nobody got the request).
func TestPreferredInstanceFirstThenTheGroup(t *testing.T) {
	_, nc := natstest.Start(t, false)
	var byInstance [2]atomic.Int32
	hosts := make([]*provider.Host, 2)
	for i, inst := range []string{"n1", "n2"} {
		h, err := provider.Serve(nc, "p", provider.ProviderFunc(func(context.Context, provider.Access) ([]provider.Tool, error) {
			return []provider.Tool{tool("echo", "echo", func(ctx context.Context, call provider.Call) (provider.Result, error) {
				byInstance[i].Add(1)
				return ok(ctx, call)
			})}, nil
		}), &provider.Options{TrustedKeys: []ed25519.PublicKey{nodePub}, Instance: inst})
		if err != nil {
			t.Fatal(err)
		}
		hosts[i] = h
		t.Cleanup(func() { _ = h.Stop(context.Background()) })
	}
	src, err := authority.NewStaticSource(map[[2]string][]authority.GrantSpec{{"acme", "ada"}: {{ID: "g", Capability: "x.*", Resource: "x/**"}}})
	if err != nil {
		t.Fatal(err)
	}
	k, err := actors.New(actors.Options{Node: "n1", Authority: src, Sink: audit.NewMemory(), Logger: slog.New(slog.DiscardHandler),
		Providers: []providers.ContextToolProvider{providers.NewRemote(nc, "p", "sharedos", providers.WithSigner(nodeKey), providers.WithInstance("n1"))}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Shutdown(context.Background()) })

	calls := func(n int) {
		t.Helper()
		o, err := k.Open(ctx(t), ada)
		if err != nil {
			t.Fatal(err)
		}
		who := ada
		who.TurnID, who.LeaseID = o.TurnID, o.LeaseID
		for range n {
			if _, err := k.Invoke(ctx(t), who, "x_echo", nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	calls(20)
	if a, b := byInstance[0].Load(), byInstance[1].Load(); a != 20 || b != 0 {
		t.Fatalf("n1's instance ran %d calls, n2's %d; want 20 and 0", a, b)
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hosts[0].Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	calls(5)
	if b := byInstance[1].Load(); b != 5 {
		t.Fatalf("with n1's instance gone n2's ran %d calls, want 5", b)
	}
}
