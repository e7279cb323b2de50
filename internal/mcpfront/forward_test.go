package mcpfront_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/mcpfront"
	"github.com/sharedos/sharedos/internal/natsserver"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
)

// forwardPair is two fronts of two kernels ("node-a", "node-b") sharing
// one key and one bus whose max payload is maxPayload.
func forwardPair(t *testing.T, maxPayload int32, adjust ...func(*mcpfront.Options)) (a, b *env, nc *nats.Conn, key ed25519.PrivateKey) {
	t.Helper()
	_, nc = natstest.StartWithOptions(t, natsserver.Options{MaxPayload: maxPayload})
	_, key, _ = ed25519.GenerateKey(rand.Reader)
	mk := func(node string) *env {
		e := newEnv(t, func(o *actors.Options) { o.Node = node }, func(o *mcpfront.Options) {
			o.Key, o.Bus, o.BusPrefix = key, nc, "t"
			for _, f := range adjust {
				f(o)
			}
		})
		if err := e.front.ServeBus(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.front.Close() })
		return e
	}
	return mk("node-a"), mk("node-b"), nc, key
}

// fwdPost posts body with tok at protocol version 2025-06-18.
func fwdPost(t *testing.T, url, tok, body string) (int, http.Header, string) {
	t.Helper()
	return post(t, url, tok, body, map[string]string{"MCP-Protocol-Version": "2025-06-18"})
}

// A request at node-a for node-b's turn is answered by node-b, byte for
// byte as node-b's own endpoint answers it.
func TestForwardedRequestAnsweredAsByTheTurnsNode(t *testing.T) {
	a, b, _, _ := forwardPair(t, 0)
	_, tok := b.open(t, conformance.Ada)
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"notion_search","arguments":{"workspace":"globex","query":"q"}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"shell_exec","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"prompts/list"}`,
		`not json`,
	} {
		ds, dh, db := fwdPost(t, b.url, tok.Token, body)
		fs, fh, fb := fwdPost(t, a.url, tok.Token, body)
		db, fb = callIDs.ReplaceAllString(db, ""), callIDs.ReplaceAllString(fb, "")
		if ds != fs || db != fb || dh.Get("Content-Type") != fh.Get("Content-Type") {
			t.Fatalf("%s: direct %d %s %s; forwarded %d %s %s", body, ds, dh.Get("Content-Type"), db, fs, fh.Get("Content-Type"), fb)
		}
	}
	// A token of node-a's own turn is served by node-a, and its audience
	// is still checked there: node-b's token is for node-b's endpoint.
	_, atok := a.open(t, conformance.Ada)
	if s, _, body := fwdPost(t, a.url, atok.Token, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); s != http.StatusOK {
		t.Fatalf("local turn: %d %s", s, body)
	}
}

// One hop: a request that came over the bus is never forwarded again; a
// request whose token's audience is not the turn's node's endpoint is
// refused there (401), as at its own endpoint.
func TestForwardIsOneHopAndTheOwnerChecksTheAudience(t *testing.T) {
	a, b, nc, key := forwardPair(t, 0)
	_, tok := b.open(t, conformance.Ada)
	c := tok.Claims
	c.Node = "node-c"
	other, err := mcpfront.Sign(key, &c)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(mcpfront.ForwardSubject("t", "node-b"))
	m.Header.Set("Authorization", "Bearer "+other)
	m.Header.Set("Content-Type", "application/json")
	m.Header.Set("Accept", "application/json, text/event-stream")
	m.Header.Set("Sos-Fwd-Method", "POST")
	m.Data = []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	r, err := nc.RequestMsg(m, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Header.Get("Sos-Fwd-Status"); s != "403" || !strings.Contains(string(r.Data), "served by node node-c, not node-b") {
		t.Fatalf("forwarded request naming a third node: %s %s", s, r.Data)
	}
	c = tok.Claims
	c.Audience = "http://elsewhere.example/mcp"
	wrong, _ := mcpfront.Sign(key, &c)
	if s, h, body := fwdPost(t, a.url, wrong, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); s != http.StatusUnauthorized || !strings.Contains(body, "another endpoint") || !strings.Contains(body, "this endpoint is \""+b.url) || h.Get("WWW-Authenticate") == "" {
		t.Fatalf("another endpoint's token through node-a: %d %v %s", s, h, body)
	}
}

// Sizes: a request or an answer larger than the bus carries is refused
// with a clear error, never truncated: a request 413, an answer as a tool
// error result_too_large (the call ran on the turn's node).
func TestForwardRefusesWhatTheBusCannotCarry(t *testing.T) {
	a, b, _, _ := forwardPair(t, 4500)
	_, tok := b.open(t, conformance.Ada)
	// The fixture's search echoes its query with %q: a soft hyphen (2
	// bytes of UTF-8) comes back as \\u00ad (7): a request of about 3 KB
	// with its headers, an answer over 7 KB.
	echo := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notion_search","arguments":{"workspace":"acme","query":"` + strings.Repeat("\u00ad", 1000) + `"}}}`
	if s, _, body := fwdPost(t, b.url, tok.Token, echo); s != http.StatusOK || len(body) < 7000 {
		t.Fatalf("direct: %d, %d bytes: the test needs an answer over 7 KB: %.300s", s, len(body), body)
	}
	s, _, body := fwdPost(t, a.url, tok.Token, echo)
	if s != http.StatusOK || !strings.Contains(body, "larger than the bus carries") || !strings.Contains(body, `"id":1`) || !strings.Contains(body, `"isError":true`) || !strings.Contains(body, `"code":"result_too_large"`) {
		t.Fatalf("an answer over the bus's bound: %d %s", s, body)
	}
	big := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"notion_search","arguments":{"workspace":"acme","query":"` + string(bytes.Repeat([]byte("q"), 5000)) + `"}}}`
	s, _, body = fwdPost(t, a.url, tok.Token, big)
	if s != http.StatusRequestEntityTooLarge || !strings.Contains(body, "larger than the bus carries") || !strings.Contains(body, "node-b") {
		t.Fatalf("a request over the bus's bound: %d %s", s, body)
	}
}

// A node that takes the request and does not answer: the edge answers
// deadline_exceeded at its request timeout (HTTP 200, a JSON-RPC error
// for a listing), and tells the node how long it has.
func TestForwardHonoursTheDeadline(t *testing.T) {
	a, b, nc, key := forwardPair(t, 0, func(o *mcpfront.Options) { o.RequestTimeout = 300 * time.Millisecond })
	_, tok := b.open(t, conformance.Ada)
	c := tok.Claims
	c.Node, c.Turn = "node-x", "node-x.t1"
	silent, _ := mcpfront.Sign(key, &c)
	left := make(chan string, 1)
	sub, err := nc.Subscribe(mcpfront.ForwardSubject("t", "node-x"), func(m *nats.Msg) { left <- m.Header.Get("Sos-Fwd-Timeout-Ms") })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	t0 := time.Now()
	s, _, body := fwdPost(t, a.url, silent, `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`)
	if d := time.Since(t0); s != http.StatusOK || !strings.Contains(body, "node-x") || !strings.Contains(body, `"id":9`) || !strings.Contains(body, `"code":"deadline_exceeded"`) || d > 2*time.Second {
		t.Fatalf("a node that does not answer: %d after %v: %s", s, d, body)
	}
	if ms, err := strconv.Atoi(<-left); err != nil || ms <= 0 || ms > 300 {
		t.Fatalf("time left sent: %d ms (%v), want (0, 300]", ms, err)
	}
}

// A sandbox reads why when the front, not the turn, fails its request:
// the turn's node overloaded, or gone. The official SDK's client at
// node-a, for node-b's turn, at each revision: a call is answered with a
// tool error whose structuredContent carries the reason code (and that
// the call was not dispatched), a listing with a JSON-RPC error whose data
// carries it — both with HTTP 200, as MCP's Streamable HTTP transport
// answers a request that reached the server; from a 5xx the client would
// show only "Service Unavailable".
func TestForwardFailuresReachTheSDKClient(t *testing.T) {
	a, b, _, _ := forwardPair(t, 0)
	_, tok := b.open(t, conformance.Ada)
	versions := []string{"2026-07-28", "2025-11-25", "2025-06-18"}
	sessions := make([]*mcp.ClientSession, len(versions))
	for i, v := range versions {
		sessions[i] = a.connect(t, tok.Token, v)
	}
	expect := func(what, code string) {
		t.Helper()
		for i, s := range sessions {
			res, err := s.CallTool(testCtx(t), &mcp.CallToolParams{Name: "notion_search", Arguments: callArgs("acme")})
			if err != nil {
				t.Fatalf("%s, %s: call: %v, want a tool error", what, versions[i], err)
			}
			b, _ := json.Marshal(res.StructuredContent)
			var r mcpfront.Refusal
			if !res.IsError || json.Unmarshal(b, &r) != nil || r.Code != code || !strings.Contains(r.Message, "node-b") || r.Dispatched == nil || *r.Dispatched {
				t.Fatalf("%s, %s: call answered %+v (%s), want %s naming node-b, not dispatched", what, versions[i], res, b, code)
			}
			_, err = s.ListTools(testCtx(t), nil)
			var je *jsonrpc.Error
			var data struct{ Code, Message string }
			if !errors.As(err, &je) || je.Code != mcpfront.CodeRefused || json.Unmarshal(je.Data, &data) != nil || data.Code != code || !strings.Contains(data.Message, "node-b") {
				t.Fatalf("%s, %s: listing: %v, want a JSON-RPC error with %s", what, versions[i], err, code)
			}
		}
	}
	release := mcpfront.HoldForwardSlots(b.front)
	expect("node-b overloaded", "overloaded")
	release()
	if res, err := sessions[0].CallTool(testCtx(t), &mcp.CallToolParams{Name: "notion_search", Arguments: callArgs("acme")}); err != nil || res.IsError {
		t.Fatalf("once node-b has room: %+v %v", res, err)
	}
	if err := b.front.Close(); err != nil { // node-b no longer answers
		t.Fatal(err)
	}
	expect("node-b gone", "node_unavailable")

	// What is not a request keeps its status: a notification has no
	// answer to carry a reason.
	s, _, body := fwdPost(t, a.url, tok.Token, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if s != http.StatusServiceUnavailable || !strings.Contains(body, "node_unavailable") {
		t.Fatalf("a notification for a node gone: %d %s", s, body)
	}
}
