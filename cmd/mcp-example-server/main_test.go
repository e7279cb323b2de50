package main_test

import (
	"context"
	"encoding/json"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/internal/providers"
)

// The example server, built and run as a real process, over stdio and
// over HTTP, reached by the MCP provider.
func TestStdioAndHTTP(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server")
	}
	bin := filepath.Join(t.TempDir(), "mcp-example-server")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	srv := exec.Command(bin, "--http", addr)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })

	for _, cfg := range []mcpprovider.Config{
		{Transport: "stdio", Command: bin},
		{Transport: "http", URL: "http://" + addr + "/mcp", ConnectTimeout: mcpprovider.Duration(20 * time.Second)},
	} {
		t.Run(cfg.Transport, func(t *testing.T) {
			p, err := mcpprovider.New("scratchpad", cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			a := authority.AccessContext{Tenant: "acme", Principal: "ada"}
			var cat providers.Catalog
			for { // the HTTP server may still be starting
				if cat, err = p.Catalog(ctx, a); err == nil || ctx.Err() != nil {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err != nil || len(cat.Definitions) != 5 {
				t.Fatalf("%v %d tools", err, len(cat.Definitions))
			}
			var analyze catalog.Definition
			for _, d := range cat.Definitions {
				if d.Name == "analyze" {
					analyze = d
				}
			}
			nt, err := catalog.Normalize("scratchpad", analyze, catalog.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			r, err := p.Invoke(ctx, providers.Call{Access: a, Tool: nt.Identity, Revision: nt.Revision, Token: analyze.Token,
				Arguments: json.RawMessage(`{"text":"to be or not to be"}`)})
			if err != nil || !strings.Contains(string(r.Structured), `"words":6`) {
				t.Fatalf("%+v %v", r, err)
			}
		})
	}
}
