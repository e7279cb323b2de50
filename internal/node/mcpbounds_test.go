package node_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/reason"
)

// mcp: bounds the node's MCP front. Attack over NATS: ada opens a turn,
// mints a token and closes it, ten times her share; every mint is taken
// (each close gives its share back). Then ada holds her share of turns
// open with tokens, and her next mint is refused overloaded while bob's
// mint and his sandbox's calls at /mcp are served.
func TestMCPBoundsThroughANode(t *testing.T) {
	cfg := sampleConfig(t, t.TempDir())
	cfg.MCP.MaxTurns, cfg.MCP.MaxTurnsPerTenant, cfg.MCP.MaxTurnsPerPrincipal = 8, 4, 2
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n, nc := startConnected(t, cfg)
	c := client.New(nc, nil)
	ada := client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notes"}}
	for i := range 20 {
		turn, err := c.Open(ctx(t), ada)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := turn.Token(ctx(t), 0); err != nil {
			t.Fatalf("flood mint %d: %v", i, err)
		}
		if err := turn.Close(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		turn, err := c.Open(ctx(t), ada)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := turn.Token(ctx(t), 0); err != nil {
			t.Fatal(err)
		}
	}
	third, err := c.Open(ctx(t), ada)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := third.Token(ctx(t), 0); !errors.Is(err, &reason.Error{Code: reason.Overloaded}) {
		t.Fatalf("ada's third held turn: %v, want overloaded", err)
	}
	bob, err := c.Open(ctx(t), client.Access{Tenant: "acme", Principal: "bob", Namespaces: []string{"notes"}})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := bob.Token(ctx(t), 0)
	if err != nil {
		t.Fatalf("bob's mint beside ada's full share: %v", err)
	}
	if tok.URL != n.MCPURL() {
		t.Fatalf("token for %s, the node serves %s", tok.URL, n.MCPURL())
	}
	s, err := mcp.NewClient(&mcp.Implementation{Name: "sandbox", Version: "1"}, nil).Connect(ctx(t),
		&mcp.StreamableClientTransport{Endpoint: tok.URL, HTTPClient: &http.Client{Transport: bearerRT{tok.Token}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if l, err := s.ListTools(ctx(t), nil); err != nil || len(l.Tools) == 0 {
		t.Fatalf("bob's sandbox lists: %+v %v", l, err)
	}
}
