package client

import (
	"context"
	"errors"

	"github.com/sharedos/sharedos/messages"
)

// InvokeApproved calls alias with args on approval id: the request an
// approval_required refusal carried (ApprovalOf), since approved. The
// node runs it only for exactly the call the request was for — this
// turn, this tool and revision, these argument bytes — once. (Calling
// again with Invoke and the same arguments finds the approval too; naming
// it says which one is meant.)
func (t *Turn) InvokeApproved(ctx context.Context, alias string, args []byte, id string) (*messages.InvokeReply, error) {
	return t.c.invokeWith(ctx, t.subject(messages.OpInvoke), t.access, "", alias, args, id, true)
}

// ApprovalOf is the approval request a refused call carries
// (approval_required: the request to approve, its id and expiry;
// approval_denied: who denied it and why), or nil.
func ApprovalOf(err error) *messages.Approval {
	var ce *CallError
	if errors.As(err, &ce) && ce.Reply != nil {
		return ce.Reply.Approval
	}
	return nil
}
