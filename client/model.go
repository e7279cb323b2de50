package client

import (
	"context"
	"errors"

	"github.com/sharedos/sharedos/messages"
)

// ModelQuery asks for a turn's listing as one model API shows it
// (docs/model-facing.md). Profile is required: openai, openai-strict,
// anthropic, anthropic-strict, gemini, gemini-jsonschema or mcp.
type ModelQuery struct {
	Profile string
	// Budget, when positive, bounds the listing's tokens (tools past it
	// are left out and reported, never cut); Encoding names the OpenAI
	// encoding they are counted in ("" for o200k_base).
	Budget   int
	Encoding string
	// Query makes it a search of the turn's visible tools: the best K
	// (0: all that match).
	Query string
	K     int
}

// ListFor lists the turn's visible tools translated for a model API:
// reply.Model.Listing is the exact JSON to send it, and each
// reply.Model.Tools[i].Name can be called with InvokeAs.
func (t *Turn) ListFor(ctx context.Context, q ModelQuery) (*messages.ListReply, error) {
	return t.c.listFor(ctx, t.subject(messages.OpList), t.access, q, true)
}

// ListFor is Turn.ListFor in a turn of one operation.
func (c *Client) ListFor(ctx context.Context, access Access, q ModelQuery) (*messages.ListReply, error) {
	access.TurnID = ""
	return c.listFor(ctx, messages.OneOpSubject(c.opts.Prefix, messages.OpList), access, q, false)
}

// InvokeAs calls the tool a model listing of profile showed as name.
func (t *Turn) InvokeAs(ctx context.Context, profile, name string, args []byte) (*messages.InvokeReply, error) {
	return t.c.invoke(ctx, t.subject(messages.OpInvoke), t.access, profile, name, args, true)
}

func (c *Client) listFor(ctx context.Context, subject string, access Access, q ModelQuery, turn bool) (*messages.ListReply, error) {
	if q.Profile == "" {
		return nil, errors.New("client: a model listing needs a profile")
	}
	var rep messages.ListReply
	if err := c.request(ctx, subject, func(ms uint32) messages.Message {
		return &messages.ListRequest{V: messages.Version, Access: access, TimeoutMs: ms,
			Profile: q.Profile, Budget: q.Budget, Encoding: q.Encoding, Query: q.Query, K: q.K}
	}, &rep, turn, turn); err != nil {
		return nil, err
	}
	if rep.Model == nil {
		return nil, errors.New("client: the node answered a model listing without one")
	}
	return &rep, nil
}
