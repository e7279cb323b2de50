package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
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
	b, err := os.ReadFile("../../cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	y := strings.NewReplacer("port: 4222", "port: 0", "data_dir: ./data", "data_dir: "+filepath.Join(dir, "data"), "http: 127.0.0.1:8321", "http: off").Replace(string(b))
	cfg, err := config.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Start(context.Background(), cfg, node.Options{Logger: slog.New(slog.DiscardHandler), MCPServers: map[string]*mcp.Server{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown(context.Background()) })
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
