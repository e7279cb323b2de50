package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/internal/policy"
	"github.com/sharedos/sharedos/reason"
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
func (n *Node) startPolicy(ctx context.Context, nopts Options) (*config.Config, error) {
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
			// A provider is checked as the node builds it, as a start
			// would: a static tool's definition normalized and its
			// handler known, a hosted provider one this node can host.
			for _, p := range d.Providers {
				if _, ok := nopts.Hostable[p.Host]; p.Kind == "nats" && p.Host != "" && !ok {
					return fmt.Errorf("config: provider %s: no hostable provider %q", p.ID, p.Host)
				}
			}
			_, err := d.Apply(cfg).StaticProviders(nopts.Handlers)
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
// set, and the front their opens and calls against its rates. With an external cluster the operator applies the printed
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
		n.setIdentities(ids, cfg)
		return nil
	}
	accounts, err := identity.Provision(n.credsDir, cfg.Bus(), ids.All())
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if accounts == n.accounts {
		n.setIdentities(ids, cfg)
		return nil
	}
	if err := n.srv.Reload(accounts); err != nil {
		return fmt.Errorf("node: applying the policy's identities to the embedded server: %w", err)
	}
	n.accounts = accounts
	n.setIdentities(ids, cfg)
	n.log.Info("bus identities reloaded from the policy", "identities", names(ids.All()))
	return nil
}

// setIdentities makes the node judge callers against ids, and their
// opens and calls against cfg's identity rates, from their next request
// on. Called with identityMu held.
func (n *Node) setIdentities(ids *identity.Set, cfg *config.Config) {
	n.ids.Store(ids)
	if n.front != nil {
		n.front.SetIdentities(ids)
		n.front.SetRates(cfg.IdentityRates())
	}
}

// policyChanged applies a change the view reports. Grants and
// credential bindings are live already (the view keeps authority.Live).
// A change of identities or providers applies the identities to the bus
// first (a nats provider brings its provider identity), then the
// providers to new turns: a hosted provider serves on its identity, and
// one that could not start for want of it starts once it is there.
func (n *Node) policyChanged(e policy.Entry, op policy.Op) {
	n.log.Info("policy changed", "key", e.Key.String(), "op", op, "revision", e.Revision)
	if e.Key.Kind != policy.Identities && e.Key.Kind != policy.Providers {
		return
	}
	doc, _, err := n.view.Document()
	if err != nil {
		n.log.Error("the policy's identities and providers could not be read; the node keeps the previous ones", "err", err)
		return
	}
	cfg := doc.Apply(n.fileCfg)
	if err := n.usePolicyIdentities(cfg); err != nil {
		n.log.Error("the policy's identities could not be applied; the bus keeps serving the previous ones", "err", err)
	}
	if err := n.useProviders(cfg); err != nil {
		n.log.Error("the policy's providers could not be applied; new turns keep the previous ones", "err", err)
	}
}

func sameIdentity(a, b identity.Identity) bool {
	return a.Name == b.Name && a.Role == b.Role && a.Provider == b.Provider && slices.Equal(a.Tenants, b.Tenants) &&
		slices.Equal(a.Principals, b.Principals) && slices.Equal(a.Credentials, b.Credentials) && slices.Equal(a.SharesTurnsWith, b.SharesTurnsWith)
}

// servePolicy serves the admin service (node policy) on the node's
// connection, answering only admin identities: the bus gives no other
// role the policy subjects, and a request that did not come through an
// admin's account is refused policy_forbidden. A tenant admin is
// confined to its tenants' keys; what it is refused is recorded
// (policy.refused).
func (n *Node) servePolicy() error {
	svc, err := policy.Serve(n.nc, n.policy, policy.ServiceOptions{
		Prefix: n.cfg.NATS.Prefix, Logger: n.log, MaxRequestBytes: n.cfg.NATS.MaxMessageBytes,
		Admin: func(account string) (policy.Scope, bool) {
			id, ok := n.identities().Lookup(account)
			if !ok || id.Role != identity.Admin {
				return policy.Scope{}, false
			}
			return adminScope(id), true
		},
		Refused: n.recordRefusal,
	})
	if err != nil {
		return fmt.Errorf("node: policy service: %w", err)
	}
	n.policySvc = svc
	return nil
}

// adminScope is the keys admin identity id has: every key for a cluster
// admin (no tenants), its tenants' for a tenant admin.
func adminScope(id *identity.Identity) policy.Scope {
	if id.ClusterAdmin() {
		return policy.Scope{All: true}
	}
	return policy.Scope{Tenants: slices.Clone(id.Tenants)}
}

// recordRefusal records an admin's operation refused for its scope as
// policy.refused, in a policy chain of its own, and returns once the
// audit stream has stored it.
func (n *Node) recordRefusal(ctx context.Context, by string, e *policy.ForbiddenError) error {
	j := n.policyJournal().(*journal)
	rs, err := j.chain.EmitRefusal(n.checkpoints, time.Now(), audit.PolicyRefusal{
		Op: e.Op, Key: e.Key.String(), By: by, Code: string(reason.PolicyForbidden), Tenants: e.Scope.Tenants,
	})
	for _, r := range rs {
		err = errors.Join(err, audit.Wait(ctx, r))
	}
	return errors.Join(err, j.End(ctx))
}
