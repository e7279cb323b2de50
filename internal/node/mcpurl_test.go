package node_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/auditstore"
	"github.com/sharedos/sharedos/internal/mcpfront"
)

// node.mcp_url: behind a proxy that reaches the node's listener, the
// tokens the node mints are for the public URL (their audience, and the
// URL the mint reply gives), and are accepted at the node's /mcp; a token
// signed with the node's own key for any other endpoint — the listener's
// own address included — is refused 401; the public Host is admitted on
// the loopback listener, no other; and the protected-resource metadata
// names the public URL.
func TestMCPFrontPublicURL(t *testing.T) {
	const public = "https://mcp.example.test/team-a/mcp"
	dir := t.TempDir()
	cfg := sampleConfig(t, dir)
	cfg.Node.MCPURL = public
	n, nc := startConnected(t, cfg)
	if n.MCPURL() != public {
		t.Fatalf("endpoint %s, want %s", n.MCPURL(), public)
	}
	turn, err := client.New(nc, nil).Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notes"}})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := turn.Token(ctx(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := mcpfront.ReadClaims(tok.Token)
	if err != nil || tok.URL != public || c.Audience != public {
		t.Fatalf("token reply url %s, audience %s (%v), want %s", tok.URL, c.Audience, err, public)
	}
	// The proxy's side: the node's listener, at /mcp (the prefix
	// stripped), with the official SDK's client.
	local := "http://" + n.HTTPAddr() + mcpfront.Path
	sandbox(t, local, tok)

	list := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	key, err := audit.ReadPrivateKey(auditstore.DefaultKeyFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, aud := range []string{local, "https://mcp.example.test/mcp", "https://other.example.test/team-a/mcp"} {
		other := *c
		other.Audience = aud
		bad, err := mcpfront.Sign(key, &other)
		if err != nil {
			t.Fatal(err)
		}
		code, body := postMCP(t, local, bad, list, nil)
		if code != http.StatusUnauthorized || !strings.Contains(body, "another endpoint") || !strings.Contains(body, public) {
			t.Fatalf("a token for %s: %d %s", aud, code, body)
		}
	}
	// A proxy on this machine that passes the public Host through: the
	// listener is on loopback, and the DNS-rebinding check admits the
	// endpoint's own name (any port), and no other.
	for host, want := range map[string]int{"mcp.example.test": http.StatusOK, "MCP.example.test:443": http.StatusOK, "evil.example": http.StatusForbidden, "mcp.example.test.evil.example": http.StatusForbidden} {
		req, _ := http.NewRequestWithContext(ctx(t), http.MethodPost, local, strings.NewReader(string(list)))
		req.Host = host
		req.Header.Set("Authorization", "Bearer "+tok.Token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("Host %s: %d, want %d", host, resp.StatusCode, want)
		}
	}
	// The 401's pointer to the metadata is the public one; the metadata is
	// served at the node's /mcp's path and at the public URL's.
	req, _ := http.NewRequestWithContext(ctx(t), http.MethodPost, local, strings.NewReader(string(list)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if h := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(h, `"https://mcp.example.test/.well-known/oauth-protected-resource/team-a/mcp"`) {
		t.Fatalf("no token: %d, WWW-Authenticate %s", resp.StatusCode, h)
	}
	for _, p := range []string{mcpfront.MetadataPath(mcpfront.Path), mcpfront.MetadataPath("/team-a/mcp")} {
		resp, err := http.Get("http://" + n.HTTPAddr() + p)
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Resource string `json:"resource"`
		}
		err = json.NewDecoder(resp.Body).Decode(&meta)
		resp.Body.Close()
		if err != nil || meta.Resource != public {
			t.Fatalf("metadata at %s: %d %+v %v", p, resp.StatusCode, meta, err)
		}
	}
}
