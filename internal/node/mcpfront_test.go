package node_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/mcpfront"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

type bearerRT struct{ token string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// sandbox connects the official SDK's client at url with tok as a model
// sandbox would, lists (the listing names tok's catalogue) and calls
// notes_put inside the grant (answered) and outside it (refused); the
// session is closed at cleanup.
func sandbox(t *testing.T, url string, tok *messages.TokenReply) *mcp.ClientSession {
	t.Helper()
	s, err := mcp.NewClient(&mcp.Implementation{Name: "sandbox", Version: "1"}, nil).Connect(ctx(t),
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerRT{tok.Token}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	l, err := s.ListTools(ctx(t), nil)
	if err != nil || len(l.Tools) == 0 || l.Meta[mcpfront.MetaCatalogHash] != tok.CatalogHash {
		t.Fatalf("list at %s: %+v %v", url, l, err)
	}
	res, err := s.CallTool(ctx(t), &mcp.CallToolParams{Name: "notes_put", Arguments: map[string]any{"space": "acme", "title": "plan", "body": "ship"}})
	if err != nil || res.IsError {
		t.Fatalf("call at %s: %+v %v", url, res, err)
	}
	res, err = s.CallTool(ctx(t), &mcp.CallToolParams{Name: "notes_put", Arguments: map[string]any{"space": "globex", "title": "x", "body": "y"}})
	if err != nil || !res.IsError {
		t.Fatalf("outside the grant at %s: %+v %v", url, res, err)
	}
	return s
}

// A runtime opens a turn over NATS and mints a token (op token); a model
// sandbox reaches the turn's tools with it over MCP at the node's /mcp;
// the audit trail shows the MCP calls under the listing's catalogHash and
// verifies; once the turn closes the token is refused.
func TestMCPFrontThroughANode(t *testing.T) {
	n, nc := startConnected(t, sampleConfig(t, t.TempDir()))
	turn, err := client.New(nc, nil).Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notes"}})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := turn.Token(ctx(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	if tok.URL != n.MCPURL() || !strings.HasPrefix(tok.Token, "sos1.") || tok.CatalogHash == "" {
		t.Fatalf("token reply %+v, endpoint %s", tok, n.MCPURL())
	}
	// Only the lease holder mints.
	stranger := client.New(nc, nil).Resume(turn.Handle, "not-the-lease", turn.Access())
	if _, err := stranger.Token(ctx(t), 0); !errors.Is(err, &reason.Error{Code: reason.TurnNotFound}) {
		t.Fatalf("mint without the lease: %v", err)
	}
	s := sandbox(t, tok.URL, tok)
	if err := turn.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}
	// (A listing would come from the client's cache: ttlMs says so.)
	if _, err := s.CallTool(ctx(t), &mcp.CallToolParams{Name: "notes_put", Arguments: map[string]any{"space": "acme", "title": "t"}}); err == nil || !strings.Contains(err.Error(), "is closed") {
		t.Fatalf("after close: %v, want 403", err)
	}
	data, evs := readAll(t, connectAs(t, n, "auditor"))
	mcpEvents := 0
	for _, ev := range evs {
		if ev.Transport == mcpfront.Transport {
			mcpEvents++
			if ev.CatalogHash != tok.CatalogHash {
				t.Fatalf("%s over MCP under %s, the token binds %s", ev.Type, ev.CatalogHash, tok.CatalogHash)
			}
		}
	}
	if mcpEvents != 4 { // one listing, two calls invoked, one completed
		t.Fatalf("%d MCP events, want 4", mcpEvents)
	}
	if rep := audit.Verify(data, false); !rep.OK() || rep.Closed != 1 {
		t.Fatalf("verify: %+v", rep)
	}
}
