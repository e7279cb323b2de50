package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/node"
)

// node status shows the sample MCP server unknown until a turn asks,
// then ready with its five tools.
func TestStatusCommand(t *testing.T) {
	b, err := os.ReadFile("../../cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	y := strings.NewReplacer("port: 4222", "port: 0", "data_dir: ./data", "data_dir: "+filepath.Join(dir, "data"), "http: 127.0.0.1:8321", "http: 127.0.0.1:0").Replace(string(b))
	cfg, err := config.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Start(context.Background(), cfg, node.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Shutdown(context.Background())
	status := func() node.Status {
		t.Helper()
		code, out, errOut := runCLI(t, "status", "--http", n.HTTPAddr())
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var st node.Status
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return st
	}
	if st := status(); !st.Ready || len(st.MCP) != 0 {
		t.Fatalf("before any turn: %+v", st)
	}
	nc, err := n.Connect("runtime")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := client.New(nc, nil).ListTools(context.Background(), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"scratchpad"}}); err != nil {
		t.Fatal(err)
	}
	st := status()
	if len(st.MCP) != 1 || st.MCP[0].Server != "scratchpad" || st.MCP[0].State != "ready" || st.MCP[0].Tools != 5 {
		t.Fatalf("after a turn: %+v", st)
	}
}
