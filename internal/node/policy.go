package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/internal/policy"
	"github.com/sharedos/sharedos/internal/providers"
)

// SeedAuthor is who the seed of an empty policy store is recorded as.
const SeedAuthor = "cluster.yaml"

// seedSettle bounds how long a node waits for another node's seed of the
// same empty store to finish before comparing it with its own file.
const seedSettle = 10 * time.Second

// startPolicy opens the policy store, seeds it from the file's policy
// sections when it is empty, holds the file to it (policy.source file:
// they must be equal), and starts the node's view of it. It returns the
// configuration the node runs with: the file's, with the store's policy
// sections.
func (n *Node) startPolicy(ctx context.Context, handlers map[string]providers.Handler) (*config.Config, error) {
	cfg := n.cfg
	fileDoc := policy.FromConfig(cfg)
	if err := checkReserved(fileDoc); err != nil {
		return nil, err
	}
	js, err := jetstream.New(n.nc)
	if err != nil {
		return nil, fmt.Errorf("node: policy: %w", err)
	}
	opts := policy.Options{
		Bucket: cfg.Policy.Bucket, Replicas: cfg.Policy.Replicas, Logger: n.log,
		Check: func(d policy.Document) error {
			if err := checkReserved(d); err != nil {
				return err
			}
			if err := d.Validate(); err != nil {
				return err
			}
			// A static tool is checked as the node builds it (its
			// definition normalized, its handler known), as a start would.
			_, err := d.Apply(cfg).StaticProviders(handlers)
			return err
		},
		Journal: n.policyJournal,
	}
	for {
		actx, cancel := context.WithTimeout(ctx, sinkAttempt)
		n.policy, err = policy.Open(actx, js, opts)
		cancel()
		if err == nil || !clusterForming(err) || ctx.Err() != nil {
			break
		}
		n.log.Info("policy bucket not ready yet; trying again", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, fmt.Errorf("node: policy store: %w", err)
	}
	wrote, err := n.policy.Seed(ctx, fileDoc, SeedAuthor)
	if err != nil && !errors.Is(err, policy.ErrConflict) {
		return nil, fmt.Errorf("node: seeding the policy store from %s: %w", SeedAuthor, err)
	}
	if wrote {
		n.log.Info("policy store seeded from the file's policy sections", "bucket", cfg.Policy.Bucket)
	} else if err := n.checkFileAgrees(ctx, fileDoc); err != nil {
		return nil, err
	}
	n.live, _ = authority.NewLive(nil, nil)
	n.fileCfg = cfg
	n.view, err = n.policy.Watch(ctx, n.live, policy.ViewOptions{MaxStaleness: time.Duration(cfg.Policy.MaxStaleness), Logger: n.log, Approvals: &n.appr.rules,
		OnChange: func(e policy.Entry, op policy.Op) {
			if n.started.Load() {
				n.policyChanged(e, op)
			}
		}})
	if err != nil {
		return nil, fmt.Errorf("node: policy store: %w", err)
	}
	doc, _, err := n.view.Document()
	if err != nil {
		return nil, fmt.Errorf("node: policy store: %w", err)
	}
	if err := doc.Validate(); err != nil {
		return nil, fmt.Errorf("node: the policy store holds a policy that is not valid: %w", err)
	}
	return doc.Apply(cfg), nil
}

// checkFileAgrees compares a store that already held policy with the
// file's policy sections. policy.source file: they must be equal (a node
// never runs on a policy other than the one its file states without the
// file saying the store rules); store: a difference is logged.
func (n *Node) checkFileAgrees(ctx context.Context, fileDoc policy.Document) error {
	deadline := time.Now().Add(seedSettle)
	for {
		diff, err := n.policy.Diff(ctx, fileDoc)
		if err != nil {
			return fmt.Errorf("node: policy store: %w", err)
		}
		if len(diff) == 0 {
			return nil
		}
		if n.cfg.Policy.Source == config.PolicyFromStore {
			n.log.Warn("the policy store differs from the file's policy sections; the store rules (policy.source: store)", "keys", len(diff), "first", diff[0].Key.String())
			return nil
		}
		// Another node seeding the same empty store at once: wait for its
		// seed to finish before calling the difference real.
		if !time.Now().Before(deadline) || !onlyAdds(diff) || ctx.Err() != nil {
			keys := make([]string, 0, min(len(diff), 5))
			for _, d := range diff[:min(len(diff), 5)] {
				keys = append(keys, string(d.Op)+" "+d.Key.String())
			}
			return fmt.Errorf("node: the policy store (bucket %s) differs from this file's policy sections in %d keys (importing the file would: %s): "+
				"start a node with `node serve --policy-source store` and see how with `node policy diff FILE`; then make the store the file's with `node policy import FILE`, "+
				"or the file the store's with `node policy export`; or set policy.source: store to let the store rule",
				n.cfg.Policy.Bucket, len(diff), strings.Join(keys, ", "))
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func onlyAdds(diff []policy.Diff) bool {
	return !slices.ContainsFunc(diff, func(d policy.Diff) bool { return d.Op != policy.Add })
}

// checkReserved refuses a policy naming the policy chain's tenant as one
// of its own.
func checkReserved(d policy.Document) error {
	for _, p := range d.Principals {
		if p.Tenant == audit.PolicyTenant {
			return fmt.Errorf("config: principals: tenant %s is reserved for the policy chain (docs/audit.md)", audit.PolicyTenant)
		}
	}
	for _, c := range d.CredentialProfiles {
		if c.Tenant == audit.PolicyTenant {
			return fmt.Errorf("config: credential_profiles: tenant %s is reserved for the policy chain (docs/audit.md)", audit.PolicyTenant)
		}
	}
	return nil
}

// policyJournal starts the audit record of one policy operation: a
// policy chain of its own (audit.PolicyChain).
func (n *Node) policyJournal() policy.Journal {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return &journal{n: n, chain: audit.NewPolicyChain(n.cfg.Node.ID, hex.EncodeToString(b[:]))}
}

type journal struct {
	n     *Node
	chain *audit.PolicyChain
}

// Record records one stored change as policy.changed, and returns once
// the audit stream has stored it.
func (j *journal) Record(ctx context.Context, c policy.Changed) error {
	rs, err := j.chain.Emit(j.n.checkpoints, time.Now(), audit.PolicyChange{
		Key: c.Key.String(), Op: string(c.Op), PrevRevision: c.PrevRevision, Revision: c.Revision,
		PrevHash: c.PrevHash, Hash: c.Hash, By: c.By,
	})
	if err != nil {
		return err
	}
	for _, r := range rs {
		if err := audit.Wait(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// End closes the operation's chain, once it is stored.
func (j *journal) End(ctx context.Context) error {
	if r := j.chain.Close(j.n.checkpoints, time.Now()); r != nil {
		return audit.Wait(ctx, r)
	}
	return nil
}

// Policy is the node's policy store (nil before Start got to it).
func (n *Node) Policy() *policy.Store { return n.policy }

// PolicyView is the node's live view of the policy store.
func (n *Node) PolicyView() *policy.View { return n.view }

// usePolicyIdentities makes the bus serve the identities of cfg (the
// store's) when they differ from those it serves now (policy.source
// store at start, or a change while running): seeds are created for new
// identities and the embedded server's configuration is reloaded, which
// disconnects an identity removed or re-keyed (its seed file replaced);
// the NATS front and the policy service judge callers against the new
// set. With an external cluster the operator applies the printed
// configuration to its servers (docs/operations.md, "Changing policy").
func (n *Node) usePolicyIdentities(cfg *config.Config) error {
	n.identityMu.Lock()
	defer n.identityMu.Unlock()
	ids, err := cfg.IdentitySet()
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	cur := n.identities()
	if n.srv == nil {
		if cur != nil && !slices.EqualFunc(ids.All(), cur.All(), sameIdentity) {
			n.log.Warn("the policy's identities changed: print the external cluster's configuration with `node identities` and reload its servers (docs/operations.md)")
		}
		n.setIdentities(ids)
		return nil
	}
	accounts, err := identity.Provision(n.credsDir, cfg.Bus(), ids.All())
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if accounts == n.accounts {
		n.setIdentities(ids)
		return nil
	}
	if err := n.srv.Reload(accounts); err != nil {
		return fmt.Errorf("node: applying the policy's identities to the embedded server: %w", err)
	}
	n.accounts = accounts
	n.setIdentities(ids)
	n.log.Info("bus identities reloaded from the policy", "identities", names(ids.All()))
	return nil
}

func (n *Node) setIdentities(ids *identity.Set) {
	n.ids.Store(ids)
	if n.front != nil {
		n.front.SetIdentities(ids)
	}
}

// policyChanged applies a change the view reports: identities to the
// bus at once. Grants and credential bindings are live already (the
// view keeps authority.Live); a provider change takes effect at the
// node's next start (docs/operations.md).
func (n *Node) policyChanged(e policy.Entry, op policy.Op) {
	n.log.Info("policy changed", "key", e.Key.String(), "op", op, "revision", e.Revision)
	switch e.Key.Kind {
	case policy.Identities:
		doc, _, err := n.view.Document()
		if err == nil {
			err = n.usePolicyIdentities(doc.Apply(n.fileCfg))
		}
		if err != nil {
			n.log.Error("the policy's identities could not be applied; the bus keeps serving the previous ones", "err", err)
		}
	case policy.Providers:
		doc, _, err := n.view.Document()
		if err == nil {
			err = n.useProviders(doc.Apply(n.fileCfg))
		}
		if err != nil {
			n.log.Error("the policy's providers could not be applied; new turns keep the previous ones", "err", err)
		}
	}
}

// liveProviders is what the node needs to rebuild its provider set when
// the policy's providers change: the instances it runs, by id, with the
// configuration each was built from, and what the configuration does not
// say (handlers, the embedder's providers).
type liveProviders struct {
	mu       sync.Mutex
	inst     map[string]providers.ContextToolProvider
	cfg      map[string]config.Provider
	handlers map[string]providers.Handler
	extra    []providers.ContextToolProvider
}

// noteProviders records the providers Start built from cfg.
func (n *Node) noteProviders(cfg *config.Config, ps []providers.ContextToolProvider, opts Options) {
	lp := &n.provs
	lp.inst, lp.cfg = map[string]providers.ContextToolProvider{}, map[string]config.Provider{}
	for _, p := range ps {
		lp.inst[p.ID()] = p
	}
	for _, p := range cfg.Providers {
		lp.cfg[p.ID] = p
	}
	lp.handlers, lp.extra = opts.Handlers, opts.Providers
}

// useProviders makes new turns resolve the providers of cfg (the
// store's); turns already open keep the catalogue they hold. Static
// providers and nats providers the node does not host are built anew; a
// provider the node hosts or an mcp provider (a process, a connection)
// is started only at the node's start: one added or changed while it
// runs is logged and takes effect from its next start (a changed one
// keeps serving as it was).
func (n *Node) useProviders(cfg *config.Config) error {
	lp := &n.provs
	lp.mu.Lock()
	defer lp.mu.Unlock()
	static, err := cfg.StaticProviders(lp.handlers)
	if err != nil {
		return err
	}
	staticByID := map[string]providers.ContextToolProvider{}
	for _, s := range static {
		staticByID[s.ID()] = s
	}
	var ps []providers.ContextToolProvider
	inst, cfgs := map[string]providers.ContextToolProvider{}, map[string]config.Provider{}
	for _, p := range cfg.Providers {
		old, had := lp.inst[p.ID]
		same := had && reflect.DeepEqual(lp.cfg[p.ID], p)
		var cur providers.ContextToolProvider
		switch {
		case same:
			cur = old
		case p.Kind == "static":
			cur = staticByID[p.ID]
		case p.Kind == "nats" && p.Host == "":
			cur = providers.NewRemote(n.nc, p.ID, cfg.NATS.Prefix, providers.WithLogger(n.log), providers.WithSigner(n.key),
				providers.WithTracer(n.tracing.Tracer()))
		case had:
			n.log.Warn("a provider this node hosts or reaches over MCP changed in the policy: it keeps serving as it was until the node's next start", "provider", p.ID)
			ps, inst[p.ID], cfgs[p.ID] = append(ps, old), old, lp.cfg[p.ID]
			continue
		default:
			n.log.Warn("a provider this node would host or reach over MCP was added to the policy: it is served from the node's next start", "provider", p.ID)
			continue
		}
		ps, inst[p.ID], cfgs[p.ID] = append(ps, cur), cur, p
	}
	var required []string
	for _, r := range cfg.Required() {
		if _, ok := inst[r]; ok {
			required = append(required, r)
		}
	}
	if err := n.kernel.SetProviders(append(ps, lp.extra...), required); err != nil {
		return err
	}
	lp.inst, lp.cfg = inst, cfgs
	return nil
}

func sameIdentity(a, b identity.Identity) bool {
	return a.Name == b.Name && a.Role == b.Role && a.Provider == b.Provider && slices.Equal(a.Tenants, b.Tenants) &&
		slices.Equal(a.Principals, b.Principals) && slices.Equal(a.Credentials, b.Credentials) && slices.Equal(a.SharesTurnsWith, b.SharesTurnsWith)
}

// servePolicy serves the admin service (node policy) on the node's
// connection, answering only admin identities: the bus gives no other
// role the policy subjects, and a request that did not come through an
// admin's account is refused policy_forbidden.
func (n *Node) servePolicy() error {
	svc, err := policy.Serve(n.nc, n.policy, policy.ServiceOptions{
		Prefix: n.cfg.NATS.Prefix, Logger: n.log, MaxRequestBytes: n.cfg.NATS.MaxMessageBytes,
		Admin: func(account string) bool {
			id, ok := n.identities().Lookup(account)
			return ok && id.Role == identity.Admin
		},
	})
	if err != nil {
		return fmt.Errorf("node: policy service: %w", err)
	}
	n.policySvc = svc
	return nil
}
