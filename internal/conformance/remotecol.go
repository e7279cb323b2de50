package conformance

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/provider"
)

// RemoteProvider is the column where every tool is served by a provider
// over NATS (the provider SDK's host), reached by the node through its
// proxy, and the turn is driven through the Go client: nothing in process
// but the kernel.
var RemoteProvider = Column{
	Name:            "remote-provider",
	Bus:             true,
	RemoteProviders: true,
	Start: func(t testing.TB, f *Fixture, opts actors.Options) Driver {
		b := StartBus(t, providerIDs(opts)...)
		key := serveRemoteProviders(t, b, opts, func(int) int { return 0 })
		opts.Providers = remoteProxies(b.Connect(t, "node"), opts, key)
		return serveOverNATS(t, b, opts)
	},
}

// providerIDs are the ids of opts' providers (each a provider identity
// on the bus).
func providerIDs(opts actors.Options) []string {
	ids := make([]string, len(opts.Providers))
	for i, p := range opts.Providers {
		ids[i] = p.ID()
	}
	return ids
}

// serveRemoteProviders serves each of opts' fixture providers over b
// through the provider SDK (provider i on server at(i)) and returns the
// node's signing key: the providers trust only it (or, with the row's
// grant check switched off, take unsigned requests).
func serveRemoteProviders(t testing.TB, b *Bus, opts actors.Options, at func(i int) int) ed25519.PrivateKey {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	trusted := []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}
	for i, p := range opts.Providers {
		m, ok := p.(*providers.Memory)
		if !ok {
			t.Fatalf("provider %s is not a fixture provider", p.ID())
		}
		popts := &provider.Options{TTL: time.Hour, TrustedKeys: trusted}
		if opts.Switches.NoGrantCheck {
			popts = &provider.Options{TTL: time.Hour, InsecureUnsigned: true}
		}
		h, err := provider.Serve(b.ConnectTo(t, at(i), "provider-"+m.ID()), m.ID(), MemoryProvider{M: m}, popts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Stop(context.Background()) })
	}
	return key
}

// remoteProxies are a node's proxies (on its connection nc, signing
// every call with key) for opts' providers.
func remoteProxies(nc *nats.Conn, opts actors.Options, key ed25519.PrivateKey) []providers.ContextToolProvider {
	remote := make([]providers.ContextToolProvider, len(opts.Providers))
	for i, p := range opts.Providers {
		remote[i] = providers.NewRemote(nc, p.ID(), "sharedos", providers.WithLogger(opts.Logger), providers.WithSigner(key))
	}
	return remote
}

// MemoryProvider serves a programmable in-memory provider through the
// provider SDK: its catalogue is the memory provider's (counted there),
// and each tool's handler executes the memory provider's tool at the
// revision it was advertised with, so the memory provider's own contract
// checks (Retire) apply over the wire too.
type MemoryProvider struct{ M *providers.Memory }

// Tools implements provider.Provider.
func (p MemoryProvider) Tools(ctx context.Context, access provider.Access) ([]provider.Tool, error) {
	cat, err := p.M.Catalog(ctx, access)
	if err != nil {
		return nil, err
	}
	tools := make([]provider.Tool, 0, len(cat.Definitions))
	for _, d := range cat.Definitions {
		t, err := catalog.Normalize(p.M.ID(), d, catalog.Limits{})
		if err != nil {
			return nil, err
		}
		rev := t.Revision
		tools = append(tools, provider.Tool{Definition: d, Handler: func(ctx context.Context, call provider.Call) (provider.Result, error) {
			res, err := p.M.Invoke(ctx, providers.Call{
				Access: call.Access, CallID: call.CallID, Tool: catalog.Identity{Provider: p.M.ID(), Name: call.Tool},
				Revision: rev, Arguments: call.Arguments, Resource: call.Resource,
			})
			return provider.Result{Text: res.Text, Structured: res.Structured, IsError: res.IsError, Content: res.Content}, err
		}})
	}
	return tools, nil
}
