package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/internal/approvals"
	"github.com/sharedos/sharedos/internal/identity"
)

// nodeApprovals is the node's side of approvals (docs/approvals.md): the
// rules in force (kept equal to the policy store's approvals keys by the
// view), the cluster's requests in their bucket, and the approvers'
// service.
type nodeApprovals struct {
	rules  approval.Live
	bucket *approvals.Bucket
	q      *approval.Requests
	svc    *approvals.Service
}

// ApprovalsBucket names the bucket of approval requests.
const ApprovalsBucket = approvals.DefaultBucket

// openApprovals binds the approvals bucket (replicated like the policy
// bucket), announcing each new request to its tenant's approvers.
func (n *Node) openApprovals(ctx context.Context) error {
	js, err := jetstream.New(n.nc)
	if err != nil {
		return fmt.Errorf("node: approvals: %w", err)
	}
	for {
		actx, cancel := context.WithTimeout(ctx, sinkAttempt)
		n.appr.bucket, err = approvals.OpenBucket(actx, js, ApprovalsBucket, n.cfg.Policy.Replicas)
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
		return fmt.Errorf("node: approvals bucket: %w", err)
	}
	prefix := n.cfg.NATS.Prefix
	n.appr.q = &approval.Requests{B: n.appr.bucket,
		Announce: func(_ context.Context, st approval.State) {
			b, err := json.Marshal(st)
			if err == nil {
				err = n.nc.Publish(identity.ApprovalAnnouncement(prefix, st.Tenant), b)
			}
			if err != nil {
				n.log.Warn("approvals: announcing a request failed (approvers can still list it)", "id", st.ID, "err", err)
			}
		},
		Record: n.recordDecision,
	}
	return nil
}

// recordDecision records an approver's decision as approval.decided in
// a policy chain of its own, and returns once it is stored: only then is
// the decision in force.
func (n *Node) recordDecision(ctx context.Context, st approval.State) error {
	var b [10]byte
	_, _ = rand.Read(b[:])
	chain := audit.NewPolicyChain(n.cfg.Node.ID, hex.EncodeToString(b[:]))
	rs, err := chain.EmitApproval(n.checkpoints, time.Now(), audit.Approval{
		ID: st.ID, Rule: st.Rule, Tenant: st.Tenant, Principal: st.Principal, Turn: st.Turn, CallID: st.CallID,
		Provider: st.Provider, Name: st.Tool, Revision: st.Revision, ArgsHash: st.ArgsHash, ExpiresAt: st.ExpiresAt.UTC(),
		Decision: string(st.Status), By: st.DecidedBy, Reason: st.Reason,
	})
	if err != nil {
		return err
	}
	if r := chain.Close(n.checkpoints, time.Now()); r != nil {
		rs = append(rs, r)
	}
	for _, r := range rs {
		if err := audit.Wait(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// kernelApprovals are the approvals the kernel decides calls with.
func (n *Node) kernelApprovals() actors.Approvals {
	return actors.Approvals{Rules: &n.appr.rules, Store: n.appr.q}
}

// serveApprovals serves approvers (node approvals) on the node's
// connection: only approver identities, for their tenants' requests.
func (n *Node) serveApprovals() error {
	svc, err := approvals.Serve(n.nc, n.appr.q, n.appr.bucket, approvals.ServiceOptions{
		Prefix: n.cfg.NATS.Prefix, Logger: n.log,
		Identity: func(account string) (identity.Identity, bool) {
			id, ok := n.identities().Lookup(account)
			if !ok {
				return identity.Identity{}, false
			}
			return *id, true
		},
	})
	if err != nil {
		return fmt.Errorf("node: approvals service: %w", err)
	}
	n.appr.svc = svc
	return nil
}

func (n *Node) stopApprovals() {
	if n.appr.svc != nil {
		n.appr.svc.Stop()
	}
}

// Approvals is the cluster's approval requests as this node reads them.
func (n *Node) Approvals() *approval.Requests { return n.appr.q }
