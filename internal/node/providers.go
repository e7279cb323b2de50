package node

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/internal/oauth"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/provider"
)

// liveProviders are the providers the node runs, by id, each with the
// configuration it was built from, and what the configuration does not
// say (handlers, hostable providers, in-process MCP servers, the
// embedder's providers). The policy's providers changing rebuilds the
// set (useProviders); the kernel asks the set as it is when a turn
// resolves. Its mu serializes every rebuild and guards every field.
type liveProviders struct {
	mu       sync.Mutex
	run      map[string]*runningProvider
	handlers map[string]providers.Handler
	hostable map[string]provider.Provider
	servers  map[string]*mcp.Server
	extra    []providers.ContextToolProvider
	// linger is how long a retired provider's calls in flight may still
	// run (the kernel's call timeout): an MCP client is closed after it.
	linger time.Duration
	// closed is set by stop: nothing is started after it.
	closed bool
	// retiring are providers left out of the set and not yet stopped;
	// stopNow ends their lingering (shutdown).
	retiring sync.WaitGroup
	stopNow  chan struct{}
}

// runningProvider is one provider the node runs: prov is what the
// kernel asks; host (and its own connection conn) the instance this
// node serves of a hosted nats provider; mcp the MCP client of an mcp
// provider (then prov is it).
type runningProvider struct {
	cfg  config.Provider
	prov providers.ContextToolProvider
	host *provider.Host
	conn *nats.Conn
	mcp  *mcpprovider.Provider
}

// stop stops what the node started for p: the hosted instance answers
// its requests in flight (within ctx) before it stops; an MCP client's
// sessions end.
func (p *runningProvider) stop(ctx context.Context) error {
	var errs []error
	if p.host != nil {
		errs = append(errs, p.host.Stop(ctx))
	}
	if p.conn != nil {
		p.conn.Close()
	}
	if p.mcp != nil {
		errs = append(errs, p.mcp.Close())
	}
	return errors.Join(errs...)
}

// buildProvider starts provider p of cfg: static (built from statics),
// a nats provider (reached over NATS; with host:, also served by this
// node as its own instance, on the provider's identity) or an mcp
// provider (the node's MCP client of the server).
func (n *Node) buildProvider(cfg *config.Config, p config.Provider, statics map[string]providers.ContextToolProvider) (*runningProvider, error) {
	lp := &n.provs
	rp := &runningProvider{cfg: p}
	switch p.Kind {
	case "static":
		s, ok := statics[p.ID]
		if !ok {
			return nil, fmt.Errorf("node: provider %s: not built", p.ID)
		}
		rp.prov = s
	case "nats":
		ropts := []providers.RemoteOption{providers.WithLogger(n.log), providers.WithSigner(n.key), providers.WithTracer(n.tracing.Tracer())}
		if p.Host != "" {
			impl, ok := lp.hostable[p.Host]
			if !ok {
				return nil, fmt.Errorf("node: provider %s: no hostable provider %q", p.ID, p.Host)
			}
			pc, own, err := n.providerConn(p.ID)
			if err != nil {
				return nil, fmt.Errorf("node: hosting provider %s: %w", p.ID, err)
			}
			// Instance: this node asks its own instance first, so another
			// node's instance being paused or gone never stalls its turns.
			h, err := provider.Serve(pc, p.ID, impl, &provider.Options{Prefix: cfg.NATS.Prefix, TTL: time.Duration(p.TTL), // config defaults it (DefaultHostedTTL)
				TrustedKeys: []ed25519.PublicKey{n.key.Public().(ed25519.PublicKey)}, Instance: cfg.Node.ID,
				TracerProvider: n.tracing.Provider()})
			if err != nil {
				if own {
					pc.Close()
				}
				return nil, fmt.Errorf("node: hosting provider %s: %w", p.ID, err)
			}
			rp.host = h
			if own {
				rp.conn = pc
			}
			ropts = append(ropts, providers.WithInstance(cfg.Node.ID))
		}
		rp.prov = providers.NewRemote(n.nc, p.ID, cfg.NATS.Prefix, ropts...)
	case "mcp":
		var om *oauth.Manager
		if n.oauth != nil {
			om = n.oauth.m
		}
		if p.MCP.UsesOAuth() && om == nil {
			return nil, fmt.Errorf("node: provider %s: an MCP server with an oauth credential profile needs the node's OAuth store, opened at start when one is configured: it is served from the node's next start", p.ID)
		}
		servers := lp.servers
		mp, err := mcpprovider.New(p.ID, *p.MCP, &mcpprovider.Options{Logger: n.log, OAuth: om, Tracer: n.tracing.Tracer(), Memory: func(name string) (*mcp.Server, bool) {
			s, ok := servers[name]
			return s, ok
		}})
		if err != nil {
			return nil, fmt.Errorf("node: provider %s: %w", p.ID, err)
		}
		rp.prov, rp.mcp = mp, mp
	default:
		return nil, fmt.Errorf("node: provider %s: kind %q", p.ID, p.Kind)
	}
	return rp, nil
}

// startProviders builds every provider of cfg at the node's start; the
// first that cannot be built fails the start.
func (n *Node) startProviders(cfg *config.Config, opts Options) ([]providers.ContextToolProvider, error) {
	lp := &n.provs
	lp.mu.Lock()
	defer lp.mu.Unlock()
	lp.handlers, lp.hostable, lp.servers, lp.extra = opts.Handlers, opts.Hostable, opts.MCPServers, opts.Providers
	lp.linger, lp.stopNow = time.Duration(cfg.Kernel.CallTimeout), make(chan struct{})
	lp.run = map[string]*runningProvider{}
	statics, err := staticsByID(cfg, lp.handlers)
	if err != nil {
		return nil, err
	}
	if _, err := n.startOAuth(cfg); err != nil {
		return nil, err
	}
	var ps []providers.ContextToolProvider
	for _, p := range cfg.Providers {
		rp, err := n.buildProvider(cfg, p, statics)
		if err != nil {
			return nil, err
		}
		lp.run[p.ID] = rp
		ps = append(ps, rp.prov)
	}
	return ps, nil
}

func staticsByID(cfg *config.Config, handlers map[string]providers.Handler) (map[string]providers.ContextToolProvider, error) {
	static, err := cfg.StaticProviders(handlers)
	if err != nil {
		return nil, err
	}
	out := map[string]providers.ContextToolProvider{}
	for _, s := range static {
		out[s.ID()] = s
	}
	return out, nil
}

// useProviders makes new turns resolve the providers of cfg (the
// store's); turns already open keep the catalogue they hold, and a call
// of theirs to a provider no longer in the set is refused
// provider_unavailable. A provider added or changed is started (a hosted
// instance served, an MCP client made) before the set names it; one
// retired or replaced leaves the set first and is stopped after: a
// hosted instance answers its calls in flight, an MCP client is closed
// once every call in flight could have ended (the kernel's call
// timeout). A provider that cannot be started is logged and left out
// (a changed one keeps serving as it was), and is tried again at the
// policy's next change of providers or identities.
func (n *Node) useProviders(cfg *config.Config) error {
	lp := &n.provs
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.closed {
		return nil
	}
	statics, err := staticsByID(cfg, lp.handlers)
	if err != nil {
		return err
	}
	run := map[string]*runningProvider{}
	var started []*runningProvider
	for _, p := range cfg.Providers {
		old, had := lp.run[p.ID]
		if had && reflect.DeepEqual(old.cfg, p) {
			run[p.ID] = old
			continue
		}
		rp, err := n.buildProvider(cfg, p, statics)
		if err != nil {
			if had {
				n.log.Error("a provider changed in the policy could not be started: new turns keep the one it replaces", "provider", p.ID, "err", err)
				run[p.ID] = old
			} else {
				n.log.Error("a provider added to the policy could not be started: new turns do not have it", "provider", p.ID, "err", err)
			}
			continue
		}
		run[p.ID], started = rp, append(started, rp)
	}
	var ps []providers.ContextToolProvider
	var ids []string
	for _, p := range cfg.Providers {
		if rp, ok := run[p.ID]; ok {
			ps, ids = append(ps, rp.prov), append(ids, p.ID)
		}
	}
	var required []string
	for _, r := range cfg.Required() {
		if _, ok := run[r]; ok {
			required = append(required, r)
		}
	}
	if err := n.kernel.SetProviders(append(ps, lp.extra...), required); err != nil {
		for _, rp := range started {
			_ = rp.stop(context.Background())
		}
		return err
	}
	for id, rp := range lp.run {
		if run[id] != rp {
			n.retire(rp)
		}
	}
	if len(started) > 0 || len(run) != len(lp.run) {
		n.log.Info("providers applied from the policy", "providers", strings.Join(ids, ","))
	}
	lp.run = run
	return nil
}

// retire stops rp, no longer in the kernel's set, in the background:
// a hosted instance at once (it answers its calls in flight first), an
// MCP client after lp.linger or at shutdown, whichever comes first.
// Called with lp.mu held.
func (n *Node) retire(rp *runningProvider) {
	lp := &n.provs
	lp.retiring.Add(1)
	go func() {
		defer lp.retiring.Done()
		if rp.mcp != nil {
			t := time.NewTimer(lp.linger)
			select {
			case <-t.C:
			case <-lp.stopNow:
				t.Stop()
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), lp.linger)
		defer cancel()
		if err := rp.stop(ctx); err != nil {
			n.log.Warn("a retired provider did not stop cleanly", "provider", rp.cfg.ID, "err", err)
		}
		n.log.Info("retired provider stopped", "provider", rp.cfg.ID)
	}()
}

// stopProviders stops every provider the node started, those retiring
// included, and starts none after. Idempotent.
func (n *Node) stopProviders(ctx context.Context) error {
	lp := &n.provs
	lp.mu.Lock()
	if lp.closed {
		lp.mu.Unlock()
		return nil
	}
	lp.closed = true
	run := lp.run
	lp.run = nil
	if lp.stopNow != nil {
		close(lp.stopNow)
	}
	lp.mu.Unlock()
	var errs []error
	for _, rp := range run {
		errs = append(errs, rp.stop(ctx))
	}
	lp.retiring.Wait()
	return errors.Join(errs...)
}

// mcpProviders are the MCP providers the node runs now, by id.
func (n *Node) mcpProviders() []*mcpprovider.Provider {
	lp := &n.provs
	lp.mu.Lock()
	defer lp.mu.Unlock()
	var out []*mcpprovider.Provider
	for _, rp := range lp.run {
		if rp.mcp != nil {
			out = append(out, rp.mcp)
		}
	}
	slices.SortFunc(out, func(a, b *mcpprovider.Provider) int { return strings.Compare(a.ID(), b.ID()) })
	return out
}

// mcpProvider is the MCP provider id the node runs now.
func (n *Node) mcpProvider(id string) (*mcpprovider.Provider, bool) {
	lp := &n.provs
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if rp, ok := lp.run[id]; ok && rp.mcp != nil {
		return rp.mcp, true
	}
	return nil, false
}
