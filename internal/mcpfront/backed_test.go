package mcpfront_test

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/internal/providers"
)

// backedEnv is newEnv with the fixture's notion provider replaced by an
// MCP-backed provider (internal/mcpprovider, id "notion") in front of
// srv, a real SDK server reached over the SDK's in-memory transport:
// MCP server → provider → turn → MCP front → client. Every tool srv
// offers is mapped to notion.search on notion/workspace/{workspace}/search,
// which ada holds for workspace acme, so its input schema needs a
// workspace.
func backedEnv(t *testing.T, srv *mcp.Server, cfg mcpprovider.Config) *env {
	t.Helper()
	if cfg.Transport == "" {
		cfg.Transport, cfg.Server = "memory", "backend"
	}
	return newEnv(t, func(o *actors.Options) {
		p, err := mcpprovider.New("notion", cfg, &mcpprovider.Options{
			Memory: func(string) (*mcp.Server, bool) { return srv, true },
			Authority: func(string, json.RawMessage) (string, string, bool) {
				return "notion.search", "notion/workspace/{workspace}/search", true
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		ps := []providers.ContextToolProvider{p}
		for _, q := range o.Providers {
			if q.ID() != "notion" {
				ps = append(ps, q)
			}
		}
		o.Providers = ps
	}, nil)
}

// workspaceSchema is an input schema the backed env's grants can judge.
var workspaceSchema = json.RawMessage(`{"type":"object","properties":{"workspace":{"type":"string"}},"required":["workspace"]}`)
