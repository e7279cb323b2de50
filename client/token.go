package client

import (
	"context"
	"time"

	"github.com/sharedos/sharedos/messages"
)

// Token mints an execution token for this turn, for a model sandbox to
// reach the turn's tools over MCP (docs/protocol.md, "Execution tokens"):
// give the sandbox the reply's Token and URL. ttl 0 is the node's default
// (10 minutes); the token is refused once the turn closes, whatever its
// expiry.
func (t *Turn) Token(ctx context.Context, ttl time.Duration) (*messages.TokenReply, error) {
	var rep messages.TokenReply
	if err := t.c.request(ctx, t.subject(messages.OpToken), func(ms uint32) messages.Message {
		return &messages.TokenRequest{V: messages.Version, Access: t.access, TTLMs: uint32(min(ttl.Milliseconds(), 1<<31)), TimeoutMs: ms}
	}, &rep, true, false); err != nil {
		return nil, err
	}
	return &rep, nil
}
