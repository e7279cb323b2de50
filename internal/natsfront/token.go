package natsfront

import (
	"context"
	"time"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/mcpfront"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

// TokenMinter mints execution tokens for the MCP front (*mcpfront.Front).
type TokenMinter interface {
	Mint(ctx context.Context, access authority.AccessContext, ttl time.Duration) (mcpfront.Token, error)
}

// token mints an execution token for the turn the request names, for its
// lease holder: the minter checks the lease (as every turn operation
// does) and binds the catalogue the turn holds.
func (f *Front) token(ctx context.Context, data []byte) (messages.Message, error) {
	var req messages.TokenRequest
	ctx, cancel, access, err := f.admit(ctx, data, &req)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if f.opts.Tokens == nil {
		return nil, reason.New(reason.NodeUnavailable, "node %s serves no MCP front (node.http is off)", f.k.Node())
	}
	tok, err := f.opts.Tokens.Mint(ctx, access, time.Duration(req.TTLMs)*time.Millisecond)
	if err != nil {
		return nil, err
	}
	return &messages.TokenReply{V: messages.Version, Token: tok.Token, URL: tok.Claims.Audience, TokenID: tok.Claims.ID,
		CatalogHash: tok.Claims.CatalogHash, ExpiresMs: tok.Claims.Expires}, nil
}
