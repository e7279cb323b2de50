package approvals

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/internal/busrpc"
	"github.com/sharedos/sharedos/reason"
)

// Client is an approver's Go API: it calls the approvals service as the
// identity its connection is (the bus says who; nothing in a request
// does). Safe for concurrent use.
type Client struct {
	nc      *nats.Conn
	prefix  string
	timeout time.Duration
}

// NewClient returns a client of the service under prefix; timeout bounds
// a call without a deadline of its own (0: 10s).
func NewClient(nc *nats.Conn, prefix string, timeout time.Duration) *Client {
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	return &Client{nc: nc, prefix: prefix, timeout: timeout}
}

// List returns the pending requests of tenant ("": every tenant the
// approver decides for); all includes decided and expired ones.
func (c *Client) List(ctx context.Context, tenant string, all bool) ([]approval.State, error) {
	rep, err := c.do(ctx, OpList, Request{Tenant: tenant, All: all})
	return rep.Requests, err
}

// Show returns one request, its arguments and its state.
func (c *Client) Show(ctx context.Context, id string) (approval.State, error) {
	rep, err := c.do(ctx, OpShow, Request{ID: id})
	if err != nil {
		return approval.State{}, err
	}
	return *rep.Request, nil
}

// Approve approves request id, with a reason; the call it names may then
// run once, in its turn, with exactly its arguments.
func (c *Client) Approve(ctx context.Context, id, why string) (approval.State, error) {
	return c.decide(ctx, OpApprove, id, why)
}

// Deny denies request id, with a reason the caller is shown.
func (c *Client) Deny(ctx context.Context, id, why string) (approval.State, error) {
	return c.decide(ctx, OpDeny, id, why)
}

func (c *Client) decide(ctx context.Context, op, id, why string) (approval.State, error) {
	rep, err := c.do(ctx, op, Request{ID: id, Reason: why})
	if err != nil {
		return approval.State{}, err
	}
	return *rep.Request, nil
}

func (c *Client) do(ctx context.Context, op string, req Request) (Reply, error) {
	var rep Reply
	if err := busrpc.Call(ctx, c.nc, busrpc.Service{Name: "approvals", Role: "an approver"}, Subject(c.prefix, op), c.timeout, req, &rep); err != nil {
		return Reply{}, err
	}
	if e := rep.Error; e != nil {
		return rep, reason.New(e.Code, "%s", e.Message)
	}
	if (op == OpShow || op == OpApprove || op == OpDeny) && rep.Request == nil {
		return rep, fmt.Errorf("approvals %s: a reply without the request", op)
	}
	return rep, nil
}
