package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/node"
)

// node turn list says when the turn's resolution did not get a provider
// whole: the sample's scratchpad MCP server is not there, so its
// provider fails, and the listing names it in degraded (and on stderr).
func TestTurnListSaysDegraded(t *testing.T) {
	n, dir := startSampleWith(t, func(_ *config.Config, o *node.Options) { o.MCPServers = map[string]*mcp.Server{} })
	t.Chdir(dir)
	t.Setenv("NATS_URL", n.ClientURL())
	if code, out, errOut := runCLI(t, "turn", "open", "--tenant", "acme", "--principal", "ada", "--ns", "notes,scratchpad"); code != 0 {
		t.Fatalf("open: %d %s %s", code, out, errOut)
	}
	code, out, errOut := runCLI(t, "turn", "list")
	if code != 0 {
		t.Fatalf("list: %d %s %s", code, out, errOut)
	}
	var l struct {
		Degraded []struct{ Provider, Status, Code, Message string }
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil || len(l.Degraded) != 1 || l.Degraded[0].Provider != "scratchpad" || l.Degraded[0].Status != "failed" || l.Degraded[0].Code == "" {
		t.Fatalf("list printed %s (%v)", out, err)
	}
	if !strings.Contains(errOut, "degraded: provider scratchpad failed") {
		t.Fatalf("stderr %q", errOut)
	}
}
