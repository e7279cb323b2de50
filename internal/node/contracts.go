package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/contract"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/contracts"
	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/internal/policy"
)

// nodeContracts is the node's side of contract baselines
// (docs/approvals.md, "Contract drift"): the baselines in their bucket
// beside the policy's, the gate the kernel resolves through, and the
// approvers' review service.
type nodeContracts struct {
	store *policy.ContractStore
	gate  *contract.Gate
	svc   *contracts.Service

	mu sync.Mutex
	// rev is the policy view revision policies were read at.
	rev      uint64
	policies map[string]contract.Policy
}

// openContracts binds the baselines' bucket (replicated like the policy
// bucket) and builds the gate.
func (n *Node) openContracts(ctx context.Context) error {
	js, err := jetstream.New(n.nc)
	if err != nil {
		return fmt.Errorf("node: contracts: %w", err)
	}
	opts := policy.ContractsOptions{Bucket: policy.ContractsBucket(n.cfg.Policy.Bucket), Replicas: n.cfg.Policy.Replicas, Logger: n.log}
	for {
		actx, cancel := context.WithTimeout(ctx, sinkAttempt)
		n.ctr.store, err = policy.OpenContracts(actx, js, opts)
		cancel()
		if err == nil || !clusterForming(err) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("node: contract baselines: %w", err)
	}
	n.ctr.gate = contract.NewGate(n.ctr.store, contract.GateOptions{Policy: n.contractPolicy, Record: n.recordReview, Logger: n.log})
	return nil
}

// ContractPolicy is a provider's contract policy as configured.
func ContractPolicy(p config.Provider) contract.Policy {
	return contract.Policy{Drift: contract.Drift(p.Drift), FirstUse: contract.FirstUse(p.FirstUse), RefuseHiddenText: p.RefuseHiddenText}
}

// contractPolicy is provider's policy as the policy store holds it now:
// read again whenever the view has taken a change.
func (n *Node) contractPolicy(provider string) contract.Policy {
	c := &n.ctr
	rev := n.view.Revision()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.policies == nil || c.rev != rev {
		doc, _, err := n.view.Document()
		if err != nil {
			n.log.Warn("contracts: the providers' policy could not be read; keeping the last one", "err", err)
		} else {
			ps := make(map[string]contract.Policy, len(doc.Providers))
			for _, p := range doc.Providers {
				ps[p.ID] = ContractPolicy(p)
			}
			c.policies, c.rev = ps, rev
		}
	}
	if p, ok := c.policies[provider]; ok {
		return p
	}
	// A provider the policy does not list (an embedder's own): the file's.
	for _, p := range n.cfg.Providers {
		if p.ID == provider {
			return ContractPolicy(p)
		}
	}
	return contract.Policy{}
}

// recordReview records a review as contract.reviewed in a policy chain of
// its own, and returns once the audit stream has stored it.
func (n *Node) recordReview(ctx context.Context, rv contract.Reviewed) error {
	var b [10]byte
	_, _ = rand.Read(b[:])
	chain := audit.NewPolicyChain(n.cfg.Node.ID, hex.EncodeToString(b[:]))
	cs := make([]string, len(rv.Classes))
	for i, c := range rv.Classes {
		cs[i] = string(c)
	}
	rs, err := chain.EmitReview(n.checkpoints, rv.At, audit.ContractReview{Tenant: rv.Key.Tenant, Provider: rv.Key.Provider, Tool: rv.Key.Tool,
		Decision: string(rv.Decision), Revision: rv.Revision, Previous: rv.Previous, Classes: cs, By: rv.By, Why: rv.Why})
	if err != nil {
		return err
	}
	if r := chain.Close(n.checkpoints, rv.At); r != nil {
		rs = append(rs, r)
	}
	for _, r := range rs {
		if err := audit.Wait(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// serveContracts serves contract review (node contracts) on the node's
// connection: only approver identities, for their tenants' baselines.
func (n *Node) serveContracts() error {
	lookup := func(account string) (identity.Identity, bool) {
		id, ok := n.identities().Lookup(account)
		if !ok {
			return identity.Identity{}, false
		}
		return *id, true
	}
	svc, err := contracts.Serve(n.nc, n.ctr.gate, contracts.ServiceOptions{
		Prefix: n.cfg.NATS.Prefix, Logger: n.log,
		Approves: func(account, tenant string) bool {
			id, ok := lookup(account)
			return ok && id.Approves(tenant)
		},
		Tenants: func(account string) []string {
			id, ok := lookup(account)
			switch {
			case !ok || id.Role != identity.Approver:
				return nil
			case id.AllTenantsBound():
				return []string{""}
			}
			return id.Tenants
		},
	})
	if err != nil {
		return fmt.Errorf("node: contracts service: %w", err)
	}
	n.ctr.svc = svc
	return nil
}

func (n *Node) stopContracts() {
	if n.ctr.svc != nil {
		n.ctr.svc.Stop()
	}
	if n.ctr.store != nil {
		n.ctr.store.Close()
	}
}

// Contracts is the node's contract gate: its baselines, and accept and
// reject as an approver would (docs/approvals.md).
func (n *Node) Contracts() *contract.Gate { return n.ctr.gate }
