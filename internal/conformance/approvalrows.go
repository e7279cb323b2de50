package conformance

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/reason"
	"github.com/sharedos/sharedos/turn"
)

// approvingDriver is a Driver whose calls can name an approval: the
// kernel's InvokeWith, the Go client's InvokeApproved, MCP's _meta.
type approvingDriver interface {
	InvokeWith(ctx context.Context, a authority.AccessContext, alias string, args []byte, o actors.CallOptions) (actors.CallResult, error)
}

// InvokeWith implements approvingDriver: the call over NATS, naming the
// approval on the wire.
func (d *ClientDriver) InvokeWith(ctx context.Context, a authority.AccessContext, alias string, args []byte, o actors.CallOptions) (actors.CallResult, error) {
	if a.TurnID == "" || o.Approval == "" {
		return d.Invoke(ctx, a, alias, args)
	}
	rep, err := d.turn(a).InvokeApproved(ctx, alias, args, o.Approval)
	if err != nil {
		return actors.CallResult{}, err
	}
	return actors.CallResult{CallID: rep.CallID, CatalogHash: rep.CatalogHash, Alias: rep.Alias}, nil
}

// InvokeWith implements approvingDriver.
func (d *clusterDriver) InvokeWith(ctx context.Context, a authority.AccessContext, alias string, args []byte, o actors.CallOptions) (actors.CallResult, error) {
	return d.driver(a).InvokeWith(ctx, a, alias, args, o)
}

// InvokeWith implements approvingDriver: tools/call naming the approval
// in _meta.
func (d *MCPDriver) InvokeWith(ctx context.Context, a authority.AccessContext, alias string, args []byte, o actors.CallOptions) (actors.CallResult, error) {
	if a.TurnID == "" {
		return d.k.InvokeWith(ctx, a, alias, args, o)
	}
	var meta mcp.Meta
	if o.Approval != "" {
		meta = mcp.Meta{"io.sharedos/approval": o.Approval}
	}
	return d.invoke(ctx, a, alias, args, meta)
}

// requestOf is the approval request a refused call carries on the
// driver's transport.
func requestOf(err error) *approval.State {
	if st := actors.ApprovalOf(err); st != nil {
		return st
	}
	return client.ApprovalOf(err).State()
}

// approvalRule makes every call of acme need an approval, each usable
// for expiry.
func approvalRule(h *H, expiry time.Duration) error {
	return h.F.Rules.Replace([]approval.RuleSpec{{Tenant: "acme", Name: "every-call", Expiry: expiry}})
}

// requested checks a call was refused approval_required with a request
// for it, and approves that request as an approver would.
func requested(ctx context.Context, h *H, step string, err error, approve bool) (*approval.State, error) {
	if err := refused(step, err, reason.ApprovalRequired); err != nil {
		return nil, err
	}
	st := requestOf(err)
	if st == nil || st.ID == "" {
		return nil, fmt.Errorf("%s: approval_required without its request (%v)", step, err)
	}
	if approve {
		if _, err := h.F.Approvals.Decide(ctx, "acme", st.ID, approval.Decision{Approve: true, By: "carol", At: h.F.Clock.Now()}); err != nil {
			return nil, fmt.Errorf("%s: approving %s: %w", step, st.ID, err)
		}
	}
	return st, nil
}

var notePut = []byte(`{"space":"acme","title":"t"}`)

// approvalRequired: a call an approval rule names does not run without
// an approver's approval; once the request it was refused with is
// approved, the same call in the same turn runs.
var approvalRequired = Row{
	Name:    "approval-required",
	Probe:   "after an approver approves the request, the same call in the same turn runs, once",
	Attack:  "a call an approval rule names, before any approval",
	Want:    reason.ApprovalRequired,
	Disable: func(s *turn.Switches) { s.NoApprovals = true },
	Run: func(ctx context.Context, h *H) error {
		if err := approvalRule(h, 0); err != nil {
			return err
		}
		who, _, err := open(ctx, h, Ada)
		if err != nil {
			return err
		}
		_, err = h.D.Invoke(ctx, who, "notes_put", notePut)
		if _, err := requested(ctx, h, "call before approval", err, true); err != nil {
			return err
		}
		if n := h.F.Notes.InvokeCalls(); n != 0 {
			return fmt.Errorf("attack call before approval: the tool ran %d times", n)
		}
		if _, err := h.D.Invoke(ctx, who, "notes_put", notePut); err != nil {
			return probe("the same call after approval", err)
		}
		if n := h.F.Notes.InvokeCalls(); n != 1 {
			return fmt.Errorf("probe: the approved call ran %d times", n)
		}
		return nil
	},
}

// approvalBoundToArguments: an approval runs exactly the call it was
// given for — this turn, this tool, these argument bytes — unexpired,
// once.
var approvalBoundToArguments = Row{
	Name:    "approval-bound-to-arguments",
	Probe:   "the approval runs its own call once",
	Attack:  "the approval presented with other argument bytes, in another turn, for another tool, once expired, and again once used",
	Want:    reason.ApprovalInvalid,
	Disable: func(s *turn.Switches) { s.NoApprovalBinding = true },
	Run: func(ctx context.Context, h *H) error {
		d, ok := h.D.(approvingDriver)
		if !ok {
			return fmt.Errorf("driver %T cannot name an approval", h.D)
		}
		if err := approvalRule(h, time.Minute); err != nil {
			return err
		}
		who, _, err := open(ctx, h, Ada)
		if err != nil {
			return err
		}
		_, err = d.InvokeWith(ctx, who, "notes_put", notePut, actors.CallOptions{})
		st, err := requested(ctx, h, "first call", err, true)
		if err != nil {
			return err
		}
		use := actors.CallOptions{Approval: st.ID}
		// (Bytes that differ only in spacing are refused too — approval.Check
		// compares bytes — but an MCP client re-encodes its arguments.)
		other := []byte(`{"space":"acme","title":"u"}`)
		if _, err := d.InvokeWith(ctx, who, "notes_put", other, use); refused("other argument bytes", err, reason.ApprovalInvalid) != nil {
			return refused("other argument bytes", err, reason.ApprovalInvalid)
		}
		if _, err := d.InvokeWith(ctx, who, "notion_search", searchArgs("acme"), use); refused("another tool", err, reason.ApprovalInvalid) != nil {
			return refused("another tool", err, reason.ApprovalInvalid)
		}
		second, _, err := open(ctx, h, Ada)
		if err != nil {
			return err
		}
		if _, err := d.InvokeWith(ctx, second, "notes_put", notePut, use); refused("another turn", err, reason.ApprovalInvalid) != nil {
			return refused("another turn", err, reason.ApprovalInvalid)
		}
		if n := h.F.Notes.InvokeCalls(); n != 0 {
			return fmt.Errorf("attack: the approval ran %d other calls", n)
		}
		if _, err := d.InvokeWith(ctx, who, "notes_put", notePut, use); err != nil {
			return probe("the approved call", err)
		}
		if _, err := d.InvokeWith(ctx, who, "notes_put", notePut, use); refused("used again", err, reason.ApprovalInvalid) != nil {
			return refused("used again", err, reason.ApprovalInvalid)
		}
		late := []byte(`{"space":"acme","title":"late"}`)
		_, err = d.InvokeWith(ctx, who, "notes_put", late, actors.CallOptions{})
		st, err = requested(ctx, h, "a call approved then left to expire", err, true)
		if err != nil {
			return err
		}
		h.F.Clock.Advance(2 * time.Minute)
		_, err = d.InvokeWith(ctx, who, "notes_put", late, actors.CallOptions{Approval: st.ID})
		if n := h.F.Notes.InvokeCalls(); n != 1 {
			return fmt.Errorf("attack: %d runs on one approval", n)
		}
		return refused("expired", err, reason.ApprovalInvalid)
	},
}
