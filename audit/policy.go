package audit

import (
	"fmt"
	"strconv"
	"sync"
	"time"
)

// PolicyChain is the chain of one policy operation's policy.changed
// events (a put, a delete, an import, the seed of an empty store): a chain
// of its own, like a turn of one operation (tenant PolicyTenant, principal
// the node that wrote the changes, turn id "policy-<node>-<random>"),
// opened by its first change with turn.opened and closed with turn.closed
// (reason one_operation) when the operation ends. It is chained,
// checkpointed and verified exactly like a turn's chain, so a policy
// change deleted, altered or reordered in the trail is found the same
// way, and a trail read while nodes run holds no policy chain left open.
//
// Safe for concurrent use; records are emitted in chain order.
type PolicyChain struct {
	mu       sync.Mutex
	node     string
	turn     string
	inc      string
	seq      uint64
	prevHash string
	last     time.Time
	opened   bool
	closed   bool
}

// NewPolicyChain returns a policy chain of node; inc is random per chain
// (event ids are inc-seq).
func NewPolicyChain(node, inc string) *PolicyChain {
	return &PolicyChain{node: node, inc: inc, turn: "policy-" + node + "-" + inc}
}

// TurnID is the chain's turn id.
func (c *PolicyChain) TurnID() string { return c.turn }

// Emit records change at now on sink: the chain's turn.opened first when
// it is the chain's first change. The receipts complete when the records
// are stored; records of concurrent calls are emitted in chain order.
func (c *PolicyChain) Emit(sink Sink, now time.Time, change PolicyChange) ([]Receipt, error) {
	return c.emit(sink, now, &Event{Type: PolicyChanged, Policy: &change})
}

// EmitReview records a contract review at now on sink (contract.reviewed),
// in the chain as Emit records a policy change.
func (c *PolicyChain) EmitReview(sink Sink, now time.Time, review ContractReview) ([]Receipt, error) {
	return c.emit(sink, now, &Event{Type: ContractReviewed, Contract: &review})
}

// EmitApproval records an approver's decision at now on sink
// (approval.decided), in the chain as Emit records a policy change.
func (c *PolicyChain) EmitApproval(sink Sink, now time.Time, a Approval) ([]Receipt, error) {
	return c.emit(sink, now, &Event{Type: ApprovalDecided, Approval: &a})
}

// EmitRefusal records an admin's refused policy operation at now on sink
// (policy.refused), in the chain as Emit records a policy change.
func (c *PolicyChain) EmitRefusal(sink Sink, now time.Time, r PolicyRefusal) ([]Receipt, error) {
	if r.Tenants == nil {
		r.Tenants = []string{}
	}
	return c.emit(sink, now, &Event{Type: PolicyRefused, PolicyRefusal: &r})
}

// emit records ev, after the chain's turn.opened when ev is its first.
func (c *PolicyChain) emit(sink Sink, now time.Time, ev *Event) ([]Receipt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("audit: policy chain %s is closed", c.turn)
	}
	var out []Receipt
	if !c.opened {
		rec, err := c.record(now, &Event{Type: TurnOpened, Caller: c.node})
		if err != nil {
			return nil, err
		}
		c.opened = true
		out = append(out, sink.Emit(rec))
	}
	rec, err := c.record(now, ev)
	if err != nil {
		return out, err
	}
	return append(out, sink.Emit(rec)), nil
}

// Close ends the chain with turn.closed (reason one_operation) on sink;
// nil when the chain recorded nothing or is closed already.
func (c *PolicyChain) Close(sink Sink, now time.Time) Receipt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.opened || c.closed {
		return nil
	}
	c.closed = true
	rec, err := c.record(now, &Event{Type: TurnClosed, Close: &Close{Reason: CloseOneOperation, Events: c.seq + 1}})
	if err != nil {
		return Completed(err)
	}
	return sink.Emit(rec)
}

func (c *PolicyChain) record(now time.Time, ev *Event) (*Record, error) {
	if now.Before(c.last) {
		now = c.last
	}
	ev.ID = c.inc + "-" + strconv.FormatUint(c.seq, 10)
	ev.Time = now.UTC()
	ev.Node, ev.Tenant, ev.Principal, ev.TurnID = c.node, PolicyTenant, c.node, c.turn
	ev.Seq, ev.PrevHash = c.seq, c.prevHash
	rec, err := Encode(ev)
	if err != nil {
		return nil, err
	}
	c.last = now
	c.seq++
	c.prevHash = rec.Hash
	return rec, nil
}
