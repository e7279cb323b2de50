package audit

import (
	"fmt"
	"strconv"
	"sync"
	"time"
)

// PolicyChain is one node's chain of policy.changed events: a turn of its
// own (tenant PolicyTenant, principal the node, turn id
// "policy-<node>-<incarnation>"), opened by its first change with
// turn.opened and closed with turn.closed when the node stops. It is
// chained, checkpointed and verified exactly like a turn's chain, so a
// policy change deleted, altered or reordered in the trail is found the
// same way. A node restarted starts a new chain (a new incarnation).
//
// Safe for concurrent use: Changed hands out the records of one change in
// chain order, and the caller emits them in the order it got them (under
// the lock it holds around Changed and Emit, see Emit).
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

// NewPolicyChain returns the policy chain of node's incarnation inc.
func NewPolicyChain(node, inc string) *PolicyChain {
	return &PolicyChain{node: node, inc: inc, turn: "policy-" + node + "-" + inc}
}

// TurnID is the chain's turn id.
func (c *PolicyChain) TurnID() string { return c.turn }

// Emit records change at now on sink: the chain's turn.opened first when
// it is the chain's first change. The receipts complete when the records
// are stored; records of concurrent calls are emitted in chain order.
func (c *PolicyChain) Emit(sink Sink, now time.Time, change PolicyChange) ([]Receipt, error) {
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
	ch := change
	rec, err := c.record(now, &Event{Type: PolicyChanged, Policy: &ch})
	if err != nil {
		return out, err
	}
	return append(out, sink.Emit(rec)), nil
}

// Close ends the chain with turn.closed (reason shutdown) on sink; nil
// when the chain recorded nothing or is closed already.
func (c *PolicyChain) Close(sink Sink, now time.Time) Receipt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.opened || c.closed {
		return nil
	}
	c.closed = true
	rec, err := c.record(now, &Event{Type: TurnClosed, Close: &Close{Reason: "shutdown", Events: c.seq + 1}})
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
