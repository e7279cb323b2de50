package mcpfront_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/mcpfront"
)

// post sends one JSON-RPC message to the endpoint the way an MCP client
// would, with hdr added (see request), and returns the status, the
// answer's headers and its body.
func post(t *testing.T, url, token, body string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	return request(t, http.MethodPost, url, token, body, hdr)
}

// request sends body to url with method as an MCP client would
// (Content-Type, Accept, MCP-Protocol-Version 2025-11-25, token as the
// bearer unless ""), then hdr: "Host" sets the request's host, a ""
// value removes the header. It returns the status, the answer's headers
// and its body.
func request(t *testing.T, method, url, token, body string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		switch {
		case k == "Host":
			req.Host = v
		case v == "":
			req.Header.Del(k)
		default:
			req.Header.Set(k, v)
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

const listBody = `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`

// refusedHTTP checks a request was refused with status and a body
// saying why.
func refusedHTTP(t *testing.T, what string, status int, hdr http.Header, body string, wantStatus int, wantBody string) {
	t.Helper()
	if status != wantStatus || !strings.Contains(body, wantBody) {
		t.Fatalf("%s: %d %q, want %d with %q", what, status, body, wantStatus, wantBody)
	}
	if wa := hdr.Get("WWW-Authenticate"); (status == 401 || status == 403) && !strings.HasPrefix(wa, "Bearer resource_metadata=") {
		t.Fatalf("%s: WWW-Authenticate %q", what, wa)
	}
}

// resign re-signs a token's claims after change, with key.
func resign(t *testing.T, key ed25519.PrivateKey, tok mcpfront.Token, change func(*mcpfront.Claims)) string {
	t.Helper()
	c := tok.Claims
	change(&c)
	s, err := mcpfront.Sign(key, &c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTokenAttacksAreRefused(t *testing.T) {
	e := newEnv(t, nil, nil)
	_, tok := e.open(t, conformance.Ada)
	if st, _, body := post(t, e.url, tok.Token, listBody, nil); st != 200 || !strings.Contains(body, "notion_search") {
		t.Fatalf("the token itself: %d %s", st, body)
	}
	// Another tenant's turn on the same node.
	gus := authority.AccessContext{Tenant: "globex", Principal: "gus", EnabledNamespaces: []string{"notion"}}
	_, gusTok := e.open(t, gus)
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)

	// The payload of gus's token with ada's turn in it, gus's signature kept.
	swapped := func() string {
		parts := strings.Split(gusTok.Token, ".")
		c := gusTok.Claims
		c.Turn = tok.Claims.Turn
		b, _ := json.Marshal(c)
		return parts[0] + "." + base64.RawURLEncoding.EncodeToString(b) + "." + parts[2]
	}()
	for _, c := range []struct {
		name, token string
		status      int
		want        string
	}{
		{"no token", "", 401, "no bearer token"},
		{"garbage", "sos1.bm90LWEtdG9rZW4", 401, "malformed"},
		{"tampered payload (a replay onto another tenant's turn)", swapped, 401, "signature does not verify"},
		{"signed by a key the node does not trust", resign(t, otherKey, tok, func(*mcpfront.Claims) {}), 401, "signature does not verify"},
		{"expired", resign(t, e.key, tok, func(c *mcpfront.Claims) { c.Expires = c.IssuedAt - 1 }), 401, "expired"},
		{"wrong audience", resign(t, e.key, tok, func(c *mcpfront.Claims) { c.Audience = "http://elsewhere.example/mcp" }), 401, "another endpoint"},
		{"another catalogue", resign(t, e.key, tok, func(c *mcpfront.Claims) { c.CatalogHash = strings.Repeat("0", 64) }), 403, "cannot reconnect"},
		{"another tenant, signed", resign(t, e.key, tok, func(c *mcpfront.Claims) { c.Tenant = "globex" }), 403, `globex`},
		{"another principal, signed", resign(t, e.key, tok, func(c *mcpfront.Claims) { c.Principal = "bob" }), 403, "principal"},
		{"a turn this node never bound", resign(t, e.key, tok, func(c *mcpfront.Claims) { c.Turn = "n1.nosuchturn" }), 403, "no open turn"},
		{"a turn of another node", resign(t, e.key, tok, func(c *mcpfront.Claims) { c.Turn, c.Node = "n2.x", "n2" }), 403, "served by node n2"},
		{"signed, but never issued (an id the node did not mint)", resign(t, e.key, tok, func(c *mcpfront.Claims) { c.ID += "-forged" }), 403, "was not issued"},
	} {
		st, hdr, body := post(t, e.url, c.token, listBody, nil)
		refusedHTTP(t, c.name, st, hdr, body, c.status, c.want)
	}
	// Never from a query string.
	st, hdr, body := post(t, e.url+"?access_token="+tok.Token, "", listBody, nil)
	refusedHTTP(t, "token in the query string", st, hdr, body, 401, "no bearer token")

	// Expiry is judged on the node's clock.
	e.f.Clock.Advance(mcpfront.DefaultTokenLifetime)
	st, hdr, body = post(t, e.url, tok.Token, listBody, nil)
	refusedHTTP(t, "past its lifetime", st, hdr, body, 401, "expired")
}

// A token for a closed turn is refused 403 once the turn closes, and a
// sandbox still connected is refused too.
func TestClosedTurnRefusesItsTokens(t *testing.T) {
	e := newEnv(t, nil, nil)
	who, tok := e.open(t, conformance.Ada)
	s := e.connect(t, tok.Token, "")
	ctx := testCtx(t)
	if _, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "notion_search", Arguments: callArgs("acme")}); err != nil {
		t.Fatal(err)
	}
	if err := e.k.Close(ctx, who, who.LeaseID); err != nil {
		t.Fatal(err)
	}
	_, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "notion_search", Arguments: callArgs("acme")})
	if err == nil || !strings.Contains(err.Error(), "is closed") {
		t.Fatalf("call after close: %v, want 403", err)
	}
	st, hdr, body := post(t, e.url, tok.Token, listBody, nil)
	refusedHTTP(t, "after close", st, hdr, body, 403, "is closed")
	// A notification is refused too, but never answered by a JSON-RPC
	// message (a response to it would have no id).
	st, hdr, body = post(t, e.url, tok.Token, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil)
	refusedHTTP(t, "a notification after close", st, hdr, body, 403, "is closed")
	if strings.Contains(body, "jsonrpc") || strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
		t.Fatalf("a notification was answered by a JSON-RPC message: %s %q", hdr.Get("Content-Type"), body)
	}
	if _, err := e.front.Mint(ctx, who, 0); err == nil {
		t.Fatal("minted a token for a closed turn")
	}
}

// A token minted before a namespace was disabled still connects (the
// catalogue is the same) but the disabled namespace is neither listed
// nor callable: enablement is checked per operation.
func TestTokenMintedBeforeNamespaceDisabled(t *testing.T) {
	e := newEnv(t, nil, nil)
	who, tok := e.open(t, conformance.Ada)
	ctx := testCtx(t)
	if err := e.k.UpdateNamespaces(ctx, who, []string{"notes"}); err != nil {
		t.Fatal(err)
	}
	s := e.connect(t, tok.Token, "")
	l, err := s.ListTools(ctx, nil)
	if err != nil || len(l.Tools) != 1 || l.Tools[0].Name != "notes_put" {
		t.Fatalf("listing after notion was disabled: %+v %v", l, err)
	}
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "notion_search", Arguments: callArgs("acme")})
	if err != nil {
		t.Fatal(err)
	}
	if code := refusalCode(t, res); code != "namespace_disabled" {
		t.Fatalf("call into the disabled namespace: %s", code)
	}
}

// Bad input gets a typed answer and the endpoint keeps serving.
func TestBadRequestsAreAnsweredAndServingGoesOn(t *testing.T) {
	e := newEnv(t, nil, func(o *mcpfront.Options) { o.MaxRequestBodyBytes = 4096 })
	_, tok := e.open(t, conformance.Ada)
	big := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes_put","arguments":{"space":"acme","title":"` + strings.Repeat("x", 8192) + `"}}}`
	for _, c := range []struct {
		name, body string
		hdr        map[string]string
		status     int
		want       string
	}{
		{"oversized body", big, nil, 413, "exceeds"},
		{"malformed JSON", `{"jsonrpc":"2.0","id":1,"method":`, nil, 400, ""},
		{"not JSON-RPC", `[1,2,3]`, nil, 400, ""},
		{"a foreign Origin", listBody, map[string]string{"Origin": "https://evil.example"}, 403, "origin"},
		{"DNS rebinding (foreign Host on loopback)", listBody, map[string]string{"Host": "evil.example"}, 403, "Host"},
	} {
		st, _, body := post(t, e.url, tok.Token, c.body, c.hdr)
		if st != c.status || !strings.Contains(body, c.want) {
			t.Fatalf("%s: %d %q, want %d", c.name, st, body, c.status)
		}
	}
	// Same-origin browser requests are served.
	if st, _, body := post(t, e.url, tok.Token, listBody, map[string]string{"Origin": strings.TrimSuffix(e.url, mcpfront.Path)}); st != 200 {
		t.Fatalf("same origin: %d %s", st, body)
	}
	// Undeclared capabilities are -32601.
	for _, m := range []string{"prompts/list", "resources/list", "resources/templates/list"} {
		st, _, body := post(t, e.url, tok.Token, `{"jsonrpc":"2.0","id":7,"method":"`+m+`","params":{}}`, nil)
		var rep struct{ Error *jsonrpc.Error }
		if err := json.Unmarshal([]byte(body), &rep); err != nil || rep.Error == nil || rep.Error.Code != jsonrpc.CodeMethodNotFound {
			t.Fatalf("%s: %d %s, want -32601", m, st, body)
		}
	}
	// Still serving.
	s := e.connect(t, tok.Token, "")
	res, err := s.CallTool(testCtx(t), &mcp.CallToolParams{Name: "notes_put", Arguments: map[string]any{"space": "acme", "title": "t"}})
	if err != nil || res.IsError {
		t.Fatalf("after bad input: %+v %v", res, err)
	}
	// The protected-resource metadata names the endpoint.
	res2, err := http.Get(strings.TrimSuffix(e.url, mcpfront.Path) + mcpfront.MetadataPath(mcpfront.Path))
	if err != nil {
		t.Fatal(err)
	}
	defer res2.Body.Close()
	b, _ := io.ReadAll(res2.Body)
	if !bytes.Contains(b, []byte(`"resource":"`+e.url+`"`)) {
		t.Fatalf("metadata %s", b)
	}
}

// initialize says listChanged false on the wire (not by omission).
func TestInitializeSaysListChangedFalse(t *testing.T) {
	e := newEnv(t, nil, nil)
	_, tok := e.open(t, conformance.Ada)
	st, _, body := post(t, e.url, tok.Token, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, map[string]string{"MCP-Protocol-Version": ""})
	if st != 200 || !strings.Contains(body, `"tools":{"listChanged":false}`) || !strings.Contains(body, `"protocolVersion":"2025-06-18"`) {
		t.Fatalf("initialize: %d %s", st, body)
	}
	st, _, body = post(t, e.url, tok.Token, listBody, map[string]string{"MCP-Protocol-Version": "2025-06-18"})
	if st != 200 || strings.Contains(body, "ttlMs") || strings.Contains(body, "cacheScope") || !strings.Contains(body, "notion_search") {
		t.Fatalf("tools/list at 2025-06-18: %d %s", st, body)
	}
}

// Each token operates the turn under the lease it was minted with: when
// that lease is released the token stops working, the others do not.
func TestReleasedLeaseEndsItsTokensOnly(t *testing.T) {
	e := newEnv(t, nil, nil)
	who, tok := e.open(t, conformance.Ada)
	ctx := testCtx(t)
	attach := who
	attach.LeaseID = ""
	o, err := e.k.Open(ctx, attach)
	if err != nil {
		t.Fatal(err)
	}
	second := who
	second.LeaseID = o.LeaseID
	tok2, err := e.front.Mint(ctx, second, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.k.Close(ctx, second, second.LeaseID); err != nil {
		t.Fatal(err)
	}
	s2 := e.connect(t, tok2.Token, "")
	res, err := s2.CallTool(ctx, &mcp.CallToolParams{Name: "notion_search", Arguments: callArgs("acme")})
	if err != nil {
		t.Fatal(err)
	}
	if code := refusalCode(t, res); code != "turn_not_found" {
		t.Fatalf("a token of a released lease: %s, want turn_not_found", code)
	}
	s1 := e.connect(t, tok.Token, "")
	if res, err := s1.CallTool(ctx, &mcp.CallToolParams{Name: "notion_search", Arguments: callArgs("acme")}); err != nil || res.IsError {
		t.Fatalf("the opener's token after the other lease went: %+v %v", res, err)
	}
	// Minting needs a lease the turn holds.
	if _, err := e.front.Mint(ctx, second, 0); err == nil {
		t.Fatal("minted under a released lease")
	}
}
