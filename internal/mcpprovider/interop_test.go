package mcpprovider_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/internal/providers"
)

// TestInteropEverything runs the provider against a real third-party MCP
// server: the reference "everything" server from npm, over stdio via npx
// (`make mcp-interop`; skipped unless MCP_INTEROP=1, since it needs npx
// and the npm registry).
func TestInteropEverything(t *testing.T) {
	if os.Getenv("MCP_INTEROP") != "1" {
		t.Skip("set MCP_INTEROP=1 (make mcp-interop): needs npx and the npm registry")
	}
	if _, err := exec.LookPath("npx"); err != nil {
		t.Fatal("npx is not on PATH")
	}
	pkg := os.Getenv("MCP_INTEROP_PACKAGE")
	if pkg == "" {
		pkg = "@modelcontextprotocol/server-everything"
	}
	p, err := mcpprovider.New("everything", mcpprovider.Config{Transport: "stdio", Command: "npx", Args: []string{"-y", pkg},
		ConnectTimeout: mcpprovider.Duration(90 * time.Second)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	a := access("")
	start := time.Now()
	cat, err := p.Catalog(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	first := time.Since(start)
	st := p.Status()[0]
	var names []string
	for _, d := range cat.Definitions {
		names = append(names, d.Name)
	}
	t.Logf("first discovery (npx start included): %v; protocol %s; %d tools served: %s", first.Round(time.Millisecond), st.Protocol, len(names), strings.Join(names, ", "))
	for _, r := range st.Refused {
		t.Logf("refused %s: %s", r.Name, r.Reason)
	}
	if len(cat.Definitions) == 0 {
		t.Fatal("no tools")
	}
	var echo *catalog.Definition
	for i, d := range cat.Definitions {
		if d.Name == "echo" {
			echo = &cat.Definitions[i]
		}
	}
	if echo == nil {
		t.Fatal("the everything server's echo tool is not served")
	}
	nt, err := catalog.Normalize("everything", *echo, catalog.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	start = time.Now()
	for range n {
		r, err := p.Invoke(ctx, providers.Call{Access: a, Tool: nt.Identity, Revision: nt.Revision, Token: echo.Token, Arguments: json.RawMessage(`{"message":"hello from SharedOS"}`)})
		if err != nil || !strings.Contains(r.Text, "hello from SharedOS") {
			t.Fatalf("echo: %+v %v", r, err)
		}
	}
	t.Logf("echo: %d calls, %v each (mean, through the provider over stdio)", n, (time.Since(start) / n).Round(time.Microsecond))
	// Content blocks come through typed: the tiny image as an image block
	// with its bytes, resource links as links.
	for _, c := range []struct{ tool, args, typ string }{
		{"get-tiny-image", `{}`, "image"},
		{"get-resource-links", `{"count":2}`, "resource_link"},
	} {
		var def *catalog.Definition
		for i, d := range cat.Definitions {
			if d.Name == c.tool {
				def = &cat.Definitions[i]
			}
		}
		if def == nil {
			t.Logf("%s is not served by this version: not checked", c.tool)
			continue
		}
		ct, err := catalog.Normalize("everything", *def, catalog.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := p.Invoke(ctx, providers.Call{Access: a, Tool: ct.Identity, Revision: ct.Revision, Token: def.Token, Arguments: json.RawMessage(c.args)})
		if err != nil {
			t.Fatalf("%s: %v", c.tool, err)
		}
		var types []string
		found := false
		for _, b := range r.Content {
			types = append(types, b.Type)
			if b.Type == c.typ && (c.typ != "image" || len(b.Data) > 0 && b.MIMEType != "") && (c.typ != "resource_link" || b.URI != "") {
				found = true
			}
		}
		if !found {
			t.Fatalf("%s: content %v, want a %s block", c.tool, types, c.typ)
		}
		t.Logf("%s: content blocks %v", c.tool, types)
	}
	t.Logf("discoveries: %d", p.Discoveries())
}
