package actors_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/reason"
)

// Providers replaced while a turn is open: new turns resolve the new set;
// the open turn keeps the catalogue it holds, and its call to a provider
// retired meanwhile fails provider_unavailable without running.
func TestSetProvidersReachesNewTurnsOnly(t *testing.T) {
	def := func(ns string) catalog.Definition {
		return catalog.Definition{Name: "echo", Namespace: ns, Description: "Echo.", Capability: ns + ".echo", Requirement: ns + "/echo",
			InputSchema: []byte(`{"type":"object"}`)}
	}
	a := providers.NewMemory("a", providers.MemoryTool{Definition: def("a"), Handler: providers.EchoHandler})
	b := providers.NewMemory("b", providers.MemoryTool{Definition: def("b"), Handler: providers.EchoHandler})
	src, err := authority.NewStaticSource(map[[2]string][]authority.GrantSpec{{"acme", "ada"}: {{ID: "all", Capability: "**", Resource: "**"}}})
	if err != nil {
		t.Fatal(err)
	}
	k, err := actors.New(actors.Options{Providers: []providers.ContextToolProvider{a}, Authority: src, Credentials: authority.AnyCredential{},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Shutdown(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	who := authority.AccessContext{Tenant: "acme", Principal: "ada", EnabledNamespaces: []string{"a", "b"}}
	o, err := k.Open(ctx, who)
	if err != nil {
		t.Fatal(err)
	}
	open := who
	open.TurnID, open.LeaseID = o.TurnID, o.LeaseID
	aliases := func(access authority.AccessContext) []string {
		t.Helper()
		l, err := k.ListTools(ctx, access)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tl := range l.Tools {
			out = append(out, tl.Alias)
		}
		return out
	}
	if got := aliases(open); !slices.Equal(got, []string{"a_echo"}) {
		t.Fatalf("before: %v", got)
	}
	if err := k.SetProviders([]providers.ContextToolProvider{b, b}, nil); err == nil {
		t.Fatal("a provider listed twice was accepted")
	}
	if err := k.SetProviders([]providers.ContextToolProvider{b}, []string{"b"}); err != nil {
		t.Fatal(err)
	}
	if got := aliases(open); !slices.Equal(got, []string{"a_echo"}) {
		t.Fatalf("the open turn's held catalogue moved: %v", got)
	}
	if got := aliases(who); !slices.Equal(got, []string{"b_echo"}) {
		t.Fatalf("a new turn: %v", got)
	}
	_, err = k.Invoke(ctx, open, "a_echo", []byte(`{}`))
	if !errors.Is(err, reason.ErrProviderUnavailable) {
		t.Fatalf("a call to the retired provider: %v, want provider_unavailable", err)
	}
	if a.InvokeCalls() != 0 {
		t.Fatalf("the retired provider ran %d calls", a.InvokeCalls())
	}
}
