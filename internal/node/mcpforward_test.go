package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/mcpfront"
)

// postMCP sends one JSON-RPC message to an MCP endpoint with tok and
// extra headers; it returns the status and the body.
func postMCP(t *testing.T, url, tok string, body []byte, hdr map[string]string) (int, string) {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(c, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Any node serves any turn: a token minted on the turn's node (over the
// turn protocol) works at another node's /mcp, which forwards over NATS;
// the audit shows the calls under the turn's catalogHash with transport
// mcp; the forwarding subject is closed to runtimes; oversized requests
// are refused; once the turn's node stops, its tokens get a clear
// node_unavailable naming it, at once, which the SDK's client shows.
func TestMCPFrontForwardsToTheTurnsNode(t *testing.T) {
	cfg := clusterConfig(t, 3)
	for i := range cfg.Cluster.Nodes {
		cfg.Cluster.Nodes[i].HTTP = "127.0.0.1:0"
	}
	nodes := startCluster(t, cfg)
	turn, err := client.New(connectAs(t, nodes[0], "runtime"), nil).Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notes"}})
	if err != nil {
		t.Fatal(err)
	}
	owner := -1
	for i, n := range nodes {
		if n.Kernel().Node() == turn.Handle.Node {
			owner = i
		}
	}
	edge := (owner + 1) % 3
	tok, err := turn.Token(ctx(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	if tok.URL != nodes[owner].MCPURL() {
		t.Fatalf("token for %s, the turn's node serves %s", tok.URL, nodes[owner].MCPURL())
	}
	edgeURL := nodes[edge].MCPURL()

	// The official SDK's client at another node's endpoint.
	s := sandbox(t, edgeURL, tok)
	// A name the turn never showed: the owning node's protocol error.
	if _, err := s.CallTool(ctx(t), &mcp.CallToolParams{Name: "no_such_tool"}); err == nil || !strings.Contains(err.Error(), "32602") && !strings.Contains(err.Error(), "unknown tool") {
		t.Fatalf("unknown tool through another node: %v", err)
	}

	data, evs := readAll(t, connectAs(t, nodes[edge], "auditor"))
	mcpEvents := 0
	for _, ev := range evs {
		if ev.TurnID == turn.Handle.TurnID && ev.Transport == mcpfront.Transport {
			mcpEvents++
			if ev.CatalogHash != tok.CatalogHash || ev.Node != turn.Handle.Node {
				t.Fatalf("%s over MCP under %s by %s, the token binds %s of %s", ev.Type, ev.CatalogHash, ev.Node, tok.CatalogHash, turn.Handle.Node)
			}
		}
	}
	if mcpEvents != 5 { // one listing, three calls invoked (two refused), one completed
		t.Fatalf("%d MCP events of the turn, want 5", mcpEvents)
	}
	if rep := audit.Verify(data, true); !rep.OK() {
		t.Fatalf("verify: %+v", rep)
	}

	// The forwarding subject: a runtime cannot publish there.
	subject := mcpfront.ForwardSubject("sharedos", turn.Handle.Node)
	rt, errs := watched(t, nodes[edge], "runtime")
	if err := rt.Publish(subject, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	refused(t, rt, errs, subject)

	// The edge's checks: a foreign Origin is refused there.
	list := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/list"}`)
	if code, body := postMCP(t, edgeURL, tok.Token, list, map[string]string{"Origin": "https://evil.example"}); code != http.StatusForbidden || !strings.Contains(body, "origin") {
		t.Fatalf("foreign origin through another node: %d %s", code, body)
	}
	// Sizes: a body over the front's bound is refused 413 at the edge; one
	// within it that, with its headers, is more than the bus carries is
	// refused 413 saying so (not truncated).
	big := bytes.Repeat([]byte("x"), 1<<20+1)
	if code, body := postMCP(t, edgeURL, tok.Token, big, nil); code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "exceeds") {
		t.Fatalf("oversized body: %d %s", code, body)
	}
	if code, body := postMCP(t, edgeURL, tok.Token, big[:1<<20], nil); code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "larger than the bus carries") || !strings.Contains(body, turn.Handle.Node) {
		t.Fatalf("body over the bus's bound: %d %.300s", code, body)
	}
	// A raw request answered by the owning node, relayed with its headers.
	if code, body := postMCP(t, edgeURL, tok.Token, list, nil); code != http.StatusOK || !strings.Contains(body, `"id":7`) || !strings.Contains(body, "notes_put") {
		t.Fatalf("raw list through another node: %d %.300s", code, body)
	}

	// The turn's node stops: its token is answered node_unavailable naming
	// the node, promptly, as a JSON-RPC answer (HTTP 200: a client reads
	// no body from a 5xx).
	if err := nodes[owner].Shutdown(ctx(t)); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	code, body := postMCP(t, edgeURL, tok.Token, list, nil)
	if code != http.StatusOK || !strings.Contains(body, turn.Handle.Node) || !strings.Contains(body, `"code":"node_unavailable"`) || !strings.Contains(body, `"id":7`) {
		t.Fatalf("after the turn's node stopped: %d %s", code, body)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("refused after %v", d)
	}
	// The SDK's client gets a tool error carrying the reason code, the
	// node, and that the call was not dispatched.
	t0 = time.Now()
	res, err := s.CallTool(ctx(t), &mcp.CallToolParams{Name: "notes_put", Arguments: map[string]any{"space": "acme", "title": "t"}})
	if err != nil || time.Since(t0) > 2*time.Second {
		t.Fatalf("SDK client after the turn's node stopped: %v after %v", err, time.Since(t0))
	}
	b, _ := json.Marshal(res.StructuredContent)
	var r mcpfront.Refusal
	if !res.IsError || json.Unmarshal(b, &r) != nil || r.Code != "node_unavailable" || !strings.Contains(r.Message, turn.Handle.Node) || r.Dispatched == nil || *r.Dispatched {
		t.Fatalf("SDK client after the turn's node stopped: %+v %s", res, b)
	}
}
