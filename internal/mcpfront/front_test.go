package mcpfront_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/mcpfront"
	"github.com/sharedos/sharedos/reason"
)

func TestMain(m *testing.M) {
	serveBridgeIfAsked() // a child launched as the stdio bridge (tsclient_test.go)
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"), // keep-alive conns of http.DefaultTransport
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// env is a kernel over the conformance fixture, served by an MCP front on
// a real loopback HTTP server.
type env struct {
	f     *conformance.Fixture
	k     *actors.Kernel
	front *mcpfront.Front
	url   string
	key   ed25519.PrivateKey
}

func newEnv(t *testing.T, adjust func(*actors.Options), fadjust func(*mcpfront.Options)) *env {
	t.Helper()
	f := conformance.NewFixture(t)
	opts := f.Options()
	if adjust != nil {
		adjust(&opts)
	}
	watch := mcpfront.NewWatch(opts.Sink)
	opts.Sink = watch
	k, err := actors.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	srv := httptest.NewUnstartedServer(nil)
	url := "http://" + srv.Listener.Addr().String() + mcpfront.Path
	fo := mcpfront.Options{Kernel: k, Key: key, URL: url, Clock: f.Clock.Now, Logger: slog.New(slog.DiscardHandler)}
	if fadjust != nil {
		fadjust(&fo)
	}
	front, err := mcpfront.New(fo)
	if err != nil {
		t.Fatal(err)
	}
	watch.Attach(front)
	mux := http.NewServeMux()
	front.Mount(mux)
	srv.Config.Handler = mux
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = k.Shutdown(ctx)
		http.DefaultClient.CloseIdleConnections()
	})
	return &env{f: f, k: k, front: front, url: url, key: key}
}

func testCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// open opens a turn for who and mints a token for it.
func (e *env) open(t *testing.T, who authority.AccessContext) (authority.AccessContext, mcpfront.Token) {
	t.Helper()
	ctx := testCtx(t)
	o, err := e.k.Open(ctx, who)
	if err != nil {
		t.Fatal(err)
	}
	who.TurnID, who.LeaseID = o.TurnID, o.LeaseID
	tok, err := e.front.Mint(ctx, who, 0)
	if err != nil {
		t.Fatal(err)
	}
	return who, tok
}

// bearer adds the token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func httpClient(token string) *http.Client {
	return &http.Client{Transport: bearer{token: token, next: http.DefaultTransport}}
}

// connect connects the official SDK's client at protocol version v ("" for its latest).
func (e *env) connect(t *testing.T, token, v string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	s, err := c.Connect(testCtx(t), &mcp.StreamableClientTransport{Endpoint: e.url, HTTPClient: httpClient(token)}, &mcp.ClientSessionOptions{ProtocolVersion: v})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func callArgs(ws string) map[string]any { return map[string]any{"workspace": ws, "query": "roadmap"} }

func refusalCode(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if !res.IsError {
		t.Fatalf("call allowed: %+v", res)
	}
	b, _ := json.Marshal(res.StructuredContent)
	var r mcpfront.Refusal
	if err := json.Unmarshal(b, &r); err != nil || r.Message == "" {
		t.Fatalf("refusal's structuredContent %s: %v", b, err)
	}
	return r.Code
}

// The official SDK's client, at each protocol revision the front serves:
// connect, list, call, refused no_matching_grant, an unknown name is
// -32602, and the turn's step ceiling holds.
func TestOfficialClientListsAndCalls(t *testing.T) {
	for _, v := range []string{"2026-07-28", "2025-11-25", "2025-06-18"} {
		t.Run(v, func(t *testing.T) {
			e := newEnv(t, func(o *actors.Options) { o.StepCeiling = 2 }, nil)
			_, tok := e.open(t, conformance.Ada)
			s := e.connect(t, tok.Token, v)
			if got := s.InitializeResult().ProtocolVersion; got != v {
				t.Fatalf("negotiated %s, want %s", got, v)
			}
			caps := s.InitializeResult().Capabilities
			if caps.Tools == nil || caps.Tools.ListChanged || caps.Prompts != nil || caps.Resources != nil || caps.Logging != nil {
				t.Fatalf("capabilities %+v, want tools only, listChanged false", caps)
			}
			ctx := testCtx(t)
			l, err := s.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tool := range l.Tools {
				names = append(names, tool.Name)
			}
			if strings.Join(names, ",") != "notes_put,notion_search" {
				t.Fatalf("listed %v", names)
			}
			if l.Meta[mcpfront.MetaCatalogHash] != tok.Claims.CatalogHash {
				t.Fatalf("listing's catalogHash %v, token's %s", l.Meta[mcpfront.MetaCatalogHash], tok.Claims.CatalogHash)
			}
			if v == "2026-07-28" && (l.CacheScope != "private" || l.TTLMs <= 0) {
				t.Fatalf("cache fields ttlMs=%d cacheScope=%q, want private", l.TTLMs, l.CacheScope)
			}
			if v != "2026-07-28" && (l.CacheScope != "" || l.TTLMs != 0) {
				t.Fatalf("revision %s got ttlMs=%d cacheScope=%q, which it does not define", v, l.TTLMs, l.CacheScope)
			}
			res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "notion_search", Arguments: callArgs("acme")})
			if err != nil || res.IsError {
				t.Fatalf("call: %+v %v", res, err)
			}
			if txt := res.Content[0].(*mcp.TextContent).Text; !strings.Contains(txt, "3 pages in acme") {
				t.Fatalf("result %q", txt)
			}
			res, err = s.CallTool(ctx, &mcp.CallToolParams{Name: "notion_search", Arguments: callArgs("globex")})
			if err != nil {
				t.Fatal(err)
			}
			if code := refusalCode(t, res); code != "no_matching_grant" {
				t.Fatalf("outside the grant: %s, want no_matching_grant", code)
			}
			_, err = s.CallTool(ctx, &mcp.CallToolParams{Name: "shell_exec", Arguments: map[string]any{}})
			var je *jsonrpc.Error
			if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams {
				t.Fatalf("unknown tool: %v, want -32602", err)
			}
			if _, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "notion_search", Arguments: callArgs("acme")}); err != nil {
				t.Fatal(err)
			}
			res, err = s.CallTool(ctx, &mcp.CallToolParams{Name: "notion_search", Arguments: callArgs("acme")})
			if err != nil {
				t.Fatal(err)
			}
			if code := refusalCode(t, res); code != "step_ceiling_exceeded" {
				t.Fatalf("third allowed call with a ceiling of 2: %s", code)
			}
		})
	}
}

// Every MCP listing and call is on the turn's audit trail, through the
// same turn actor: transport mcp, the token's catalogHash on each.
func TestAuditShowsMCPCallsWithTheListingsCatalogHash(t *testing.T) {
	e := newEnv(t, nil, nil)
	who, tok := e.open(t, conformance.Ada)
	s := e.connect(t, tok.Token, "")
	ctx := testCtx(t)
	if _, err := s.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for _, ws := range []string{"acme", "globex"} {
		if _, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "notion_search", Arguments: callArgs(ws)}); err != nil {
			t.Fatal(err)
		}
	}
	counts := map[audit.Type]int{}
	for _, ev := range e.f.Sink.Events(who.TurnID) {
		switch ev.Type {
		case audit.CatalogListed, audit.ToolInvoked, audit.ToolCompleted:
			counts[ev.Type]++
			if ev.Transport != mcpfront.Transport || ev.CatalogHash != tok.Claims.CatalogHash {
				t.Fatalf("%s: transport %q catalogHash %s, want mcp and %s", ev.Type, ev.Transport, ev.CatalogHash, tok.Claims.CatalogHash)
			}
		}
	}
	if counts[audit.CatalogListed] != 1 || counts[audit.ToolInvoked] != 2 || counts[audit.ToolCompleted] != 1 {
		t.Fatalf("events %v", counts)
	}
}

// Pages are cut at PageSize in the catalogue's order and continue from
// the cursor; a cursor naming no tool is -32602.
func TestListingIsPagedDeterministically(t *testing.T) {
	e := newEnv(t, nil, func(o *mcpfront.Options) { o.PageSize = 1 })
	_, tok := e.open(t, conformance.Ada)
	s := e.connect(t, tok.Token, "")
	ctx := testCtx(t)
	var names []string
	for tool, err := range s.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	if strings.Join(names, ",") != "notes_put,notion_search" {
		t.Fatalf("paged listing %v", names)
	}
	first, err := s.ListTools(ctx, nil)
	if err != nil || len(first.Tools) != 1 || first.NextCursor == "" {
		t.Fatalf("first page %+v %v", first, err)
	}
	_, err = s.ListTools(ctx, &mcp.ListToolsParams{Cursor: "no-such-tool"})
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("bad cursor: %v, want -32602", err)
	}
}

// The front holds at most Bounds.TurnsPerTenant turns of one tenant: a
// mint for one more is refused overloaded until the tokens of a turn it
// holds have all expired, and then that turn is forgotten.
func TestMintForgetsTurnsWhoseTokensExpired(t *testing.T) {
	e := newEnv(t, nil, func(o *mcpfront.Options) { o.Bounds = mcpfront.Bounds{Turns: 3, TurnsPerTenant: 2} })
	e.open(t, conformance.Ada)
	e.f.Clock.Advance(time.Minute)
	e.open(t, conformance.Bob)
	ctx := testCtx(t)
	third := conformance.Ada
	o, err := e.k.Open(ctx, third)
	if err != nil {
		t.Fatal(err)
	}
	third.TurnID, third.LeaseID = o.TurnID, o.LeaseID
	if _, err := e.front.Mint(ctx, third, 0); !errors.Is(err, &reason.Error{Code: reason.Overloaded}) {
		t.Fatalf("a third turn while two hold unexpired tokens: %v, want overloaded", err)
	}
	// The first turn's token expires; the second's does not yet.
	e.f.Clock.Advance(mcpfront.DefaultTokenLifetime - time.Minute)
	if _, err := e.front.Mint(ctx, third, 0); err != nil {
		t.Fatalf("a third turn once the first's tokens expired: %v", err)
	}
	if n := e.front.Turns(); n != 2 {
		t.Fatalf("the front holds %d turns, want 2", n)
	}
}

// One turn holds at most Bounds.TokensPerTurn unexpired tokens (1024 by
// default); once they expire, minting goes on.
func TestMintBoundsATurnsTokens(t *testing.T) {
	e := newEnv(t, nil, nil)
	who, _ := e.open(t, conformance.Ada)
	ctx := testCtx(t)
	for range mcpfront.DefaultBounds().TokensPerTurn - 1 {
		if _, err := e.front.Mint(ctx, who, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.front.Mint(ctx, who, 0); !errors.Is(err, &reason.Error{Code: reason.Overloaded}) {
		t.Fatalf("token %d of one turn: %v, want overloaded", mcpfront.DefaultBounds().TokensPerTurn+1, err)
	}
	e.f.Clock.Advance(mcpfront.DefaultTokenLifetime)
	if _, err := e.front.Mint(ctx, who, 0); err != nil {
		t.Fatalf("a token once the others expired: %v", err)
	}
}
