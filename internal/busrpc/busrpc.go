// Package busrpc is the request/reply of the node's JSON services on the
// bus (policy admin, approvals, contract review): one request, one
// bounded, decoded answer, within the caller's deadline or the client's.
package busrpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/reason"
)

// MaxReplyBytes bounds an answer a client decodes.
const MaxReplyBytes = 64 << 20

// Service names what a client calls, for its errors.
type Service struct {
	// Name is the service as a sentence names it ("the policy service").
	Name string
	// Role is who may call it ("an admin").
	Role string
}

// Call sends req as JSON on subject and decodes the answer into rep. With
// no deadline on ctx it waits timeout. No node answering is a
// node_unavailable *reason.Error saying which service and role; the
// answer's own error field is the caller's to read.
func Call(ctx context.Context, nc *nats.Conn, s Service, subject string, timeout time.Duration, req, rep any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	m, err := nc.RequestWithContext(ctx, subject, b)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return reason.New(reason.NodeUnavailable, "no node serves %s on %s (is `node serve` running, and is this identity %s?)", s.Name, subject, s.Role)
	case err != nil:
		return fmt.Errorf("%s: %w", subject, err)
	case len(m.Data) > MaxReplyBytes:
		return fmt.Errorf("%s: a reply of %d bytes", subject, len(m.Data))
	}
	if err := json.Unmarshal(m.Data, rep); err != nil {
		return fmt.Errorf("%s: undecodable reply: %w", subject, err)
	}
	return nil
}
