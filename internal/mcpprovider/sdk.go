package mcpprovider

import (
	"context"

	"github.com/sharedos/sharedos/provider"
)

// SDK adapts p to the provider SDK (provider.Serve), for serving one MCP
// server as its own process over NATS (cmd/mcp-provider).
//
// The SDK's host asks Tools for the current contract before every
// execution and runs a call only when the turn's pinned revision is that
// contract (capability_changed otherwise); here Tools answers from a
// fresh snapshot, refreshing an expired one, so no call runs on an
// expired or unverified contract.
func (p *Provider) SDK() provider.Provider {
	return provider.ProviderFunc(func(ctx context.Context, access provider.Access) ([]provider.Tool, error) {
		snap, err := p.current(ctx, access, false)
		if err != nil {
			return nil, err
		}
		out := make([]provider.Tool, len(snap.tools))
		for i, t := range snap.tools {
			out[i] = provider.Tool{Definition: t.Definition, Handler: func(ctx context.Context, call provider.Call) (provider.Result, error) {
				r, err := p.call(ctx, call.Access, t, call.Arguments)
				return provider.Result{Text: r.Text, Structured: r.Structured, IsError: r.IsError, Content: r.Content}, err
			}}
		}
		return out, nil
	})
}
