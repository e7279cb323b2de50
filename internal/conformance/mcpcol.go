package conformance

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/mcpfront"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/reason"
	"github.com/sharedos/sharedos/turn"
)

// MCP is the column that drives every listing and call through an MCP
// client (the official SDK's, over Streamable HTTP on loopback) to the
// node's MCP front, with an execution token minted for the turn's lease.
// What MCP has no method for (open, namespaces, close: the runtime's
// side of a turn) and turns of one operation (MCP reaches open turns
// only) go to the kernel directly.
var MCP = Column{
	Name:            "mcp",
	Tokens:          true,
	NoModelListings: true,
	Start: func(t testing.TB, f *Fixture, opts actors.Options) Driver {
		return serveOverMCP(t, opts)
	},
}

// TokenDriver is a Driver whose callers reach turns with execution tokens.
type TokenDriver interface {
	Driver
	// Reconnect drops the sandbox's connection to a's turn and connects
	// again with the token it holds.
	Reconnect(ctx context.Context, a authority.AccessContext) error
	// ConnectBound connects to a's turn with a node-signed token that
	// binds catalogHash, and lists; it returns the refusal.
	ConnectBound(ctx context.Context, a authority.AccessContext, catalogHash string) error
}

func serveOverMCP(t testing.TB, opts actors.Options) *MCPDriver {
	watch := mcpfront.NewWatch(opts.Sink)
	opts.Sink = watch
	k := startKernel(t, opts)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + mcpfront.Path
	// ListTTL -1: the SDK client would rightly serve a listing from its
	// cache for ttlMs; rows list twice on purpose.
	front, err := mcpfront.New(mcpfront.Options{Kernel: k, Key: key, URL: url, ListTTL: -1, Logger: opts.Logger})
	if err != nil {
		t.Fatal(err)
	}
	watch.Attach(front)
	mux := http.NewServeMux()
	front.Mount(mux)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	tr := &http.Transport{}
	d := &MCPDriver{k: k, front: front, key: key, url: url, hc: tr, sessions: map[string]*mcpSession{}}
	t.Cleanup(func() {
		d.mu.Lock()
		for _, s := range d.sessions {
			s.mu.Lock()
			if s.s != nil {
				_ = s.s.Close()
			}
			s.mu.Unlock()
		}
		d.mu.Unlock()
		_ = srv.Close()
		tr.CloseIdleConnections()
	})
	return d
}

// MCPDriver adapts an MCP client per turn (and lease) to Driver.
type MCPDriver struct {
	k     *actors.Kernel
	front *mcpfront.Front
	key   ed25519.PrivateKey
	url   string
	hc    *http.Transport

	mu       sync.Mutex
	sessions map[string]*mcpSession
}

// mcpSession is one sandbox: its token and its client (connected once,
// under mu, however many operations ask at once).
type mcpSession struct {
	mu    sync.Mutex
	token mcpfront.Token
	s     *mcp.ClientSession
}

type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func sessionKey(a authority.AccessContext) string {
	return strings.Join([]string{a.TurnID, a.LeaseID, a.Tenant, a.Principal, a.CredentialProfile}, "\x00")
}

func (d *MCPDriver) connect(ctx context.Context, token string) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "conformance", Version: "1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.url,
		HTTPClient: &http.Client{Transport: bearerTransport{token: token, next: d.hc}}}, nil)
}

// session is the sandbox of a's turn: a token minted for a's lease (the
// front checks the lease), and a client connected with it.
func (d *MCPDriver) session(ctx context.Context, a authority.AccessContext) (*mcp.ClientSession, error) {
	key := sessionKey(a)
	d.mu.Lock()
	s := d.sessions[key]
	if s == nil {
		s = &mcpSession{}
		d.sessions[key] = s
	}
	d.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.s != nil {
		return s.s, nil
	}
	tok, err := d.front.Mint(ctx, a, 0)
	if err != nil {
		return nil, err
	}
	cs, err := d.connect(ctx, tok.Token)
	if err != nil {
		return nil, mcpError(err)
	}
	s.token, s.s = tok, cs
	return cs, nil
}

// mcpError maps what an MCP client sees to the reason the kernel gave:
// the front answers every refusal, a 403 included, with a JSON-RPC error
// carrying the reason code (CodeRefused), or -32602 for an unknown tool.
func mcpError(err error) error {
	var je *jsonrpc.Error
	if !errors.As(err, &je) {
		return err
	}
	switch je.Code {
	case jsonrpc.CodeInvalidParams:
		return reason.New(reason.UnknownTool, "%s", je.Message)
	case mcpfront.CodeRefused:
		var r struct{ Code, Message string }
		if json.Unmarshal(je.Data, &r) == nil && r.Code != "" {
			return &reason.Error{Code: reason.Code(r.Code), Message: r.Message}
		}
	}
	return err
}

// Open implements Driver (the runtime's side: the kernel).
func (d *MCPDriver) Open(ctx context.Context, a authority.AccessContext) (actors.Opened, error) {
	return d.k.Open(ctx, a)
}

// ListTools implements Driver: every page, through the MCP client.
func (d *MCPDriver) ListTools(ctx context.Context, a authority.AccessContext) (actors.ToolList, error) {
	if a.TurnID == "" {
		return d.k.ListTools(ctx, a)
	}
	s, err := d.session(ctx, a)
	if err != nil {
		return actors.ToolList{}, err
	}
	var out actors.ToolList
	params := &mcp.ListToolsParams{}
	for {
		res, err := s.ListTools(ctx, params)
		if err != nil {
			return actors.ToolList{}, mcpError(err)
		}
		out.CatalogHash, _ = res.Meta[mcpfront.MetaCatalogHash].(string)
		out.Degraded = append(out.Degraded, metaDegraded(res.Meta[mcpfront.MetaDegraded])...)
		for _, t := range res.Tools {
			schema, _ := json.Marshal(t.InputSchema)
			out.Tools = append(out.Tools, actors.ListedTool{Alias: t.Name, Description: t.Description, InputSchema: schema})
		}
		if res.NextCursor == "" {
			return out, nil
		}
		params.Cursor = res.NextCursor
	}
}

// Invoke implements Driver: tools/call through the MCP client.
func (d *MCPDriver) Invoke(ctx context.Context, a authority.AccessContext, alias string, args []byte) (actors.CallResult, error) {
	if a.TurnID == "" {
		return d.k.Invoke(ctx, a, alias, args)
	}
	return d.invoke(ctx, a, alias, args, nil)
}

// invoke is tools/call with meta.
func (d *MCPDriver) invoke(ctx context.Context, a authority.AccessContext, alias string, args []byte, meta mcp.Meta) (actors.CallResult, error) {
	s, err := d.session(ctx, a)
	if err != nil {
		return actors.CallResult{}, err
	}
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Meta: meta, Name: alias, Arguments: json.RawMessage(args)})
	if err != nil {
		return actors.CallResult{}, mcpError(err)
	}
	callID, _ := res.Meta[mcpfront.MetaCallID].(string)
	hash, _ := res.Meta[mcpfront.MetaCatalogHash].(string)
	structured, _ := json.Marshal(res.StructuredContent)
	if res.StructuredContent == nil {
		structured = nil
	}
	if res.IsError && callID == "" { // refused or failed: the turn's reason
		var r mcpfront.Refusal
		if err := json.Unmarshal(structured, &r); err != nil || r.Code == "" {
			return actors.CallResult{}, fmt.Errorf("mcp: a tool error without a refusal: %s", structured)
		}
		ce := &actors.CallError{Err: &reason.Error{Code: reason.Code(r.Code), Message: r.Message, RetryAfter: time.Duration(r.RetryAfterMs) * time.Millisecond},
			CallID: r.CallID, CatalogHash: r.CatalogHash, Dispatch: actors.DispatchUnknown}
		if r.Dispatched != nil {
			ce.Dispatch = actors.NotDispatched
			if *r.Dispatched {
				ce.Dispatch = actors.Dispatched
			}
		}
		if ar := r.Approval; ar != nil {
			ce.Approval = &approval.State{Request: approval.Request{ID: ar.ID, Provider: ar.Provider, Tool: ar.Tool, Revision: ar.Revision,
				ArgsHash: ar.ArgsHash, Principal: ar.Principal, Turn: ar.Turn, CatalogHash: ar.CatalogHash, ExpiresAt: ar.ExpiresAt},
				Status: approval.Status(ar.Status), DecidedBy: ar.DecidedBy, Reason: ar.Reason}
		}
		return actors.CallResult{}, ce
	}
	var text string
	if len(res.Content) > 0 {
		if tc, ok := res.Content[0].(*mcp.TextContent); ok {
			text = tc.Text
		}
	}
	return actors.CallResult{CallID: callID, CatalogHash: hash, Alias: alias,
		Result: providers.Result{Text: text, Structured: structured, IsError: res.IsError}}, nil
}

// ListNamespaces implements Driver (the runtime's side: the kernel).
func (d *MCPDriver) ListNamespaces(ctx context.Context, a authority.AccessContext) ([]actors.NamespaceInfo, error) {
	return d.k.ListNamespaces(ctx, a)
}

// UpdateNamespaces implements Driver (the runtime's side: the kernel).
func (d *MCPDriver) UpdateNamespaces(ctx context.Context, a authority.AccessContext, ns []string) error {
	return d.k.UpdateNamespaces(ctx, a, ns)
}

// Close implements Driver (the runtime's side: the kernel). The sandbox
// keeps its token: a stale sandbox is what the front must refuse.
func (d *MCPDriver) Close(ctx context.Context, a authority.AccessContext, leaseID string) error {
	return d.k.Close(ctx, a, leaseID)
}

// Reconnect implements TokenDriver.
func (d *MCPDriver) Reconnect(ctx context.Context, a authority.AccessContext) error {
	key := sessionKey(a)
	d.mu.Lock()
	s := d.sessions[key]
	d.mu.Unlock()
	if s == nil {
		return fmt.Errorf("mcp: no sandbox for turn %s to reconnect", a.TurnID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.s == nil {
		return fmt.Errorf("mcp: no sandbox for turn %s to reconnect", a.TurnID)
	}
	_ = s.s.Close()
	cs, err := d.connect(ctx, s.token.Token)
	if err != nil {
		s.s = nil
		return mcpError(err)
	}
	s.s = cs
	return nil
}

// ConnectBound implements TokenDriver.
func (d *MCPDriver) ConnectBound(ctx context.Context, a authority.AccessContext, catalogHash string) error {
	tok, err := d.front.Mint(ctx, a, 0)
	if err != nil {
		return err
	}
	c := tok.Claims
	c.ID, c.CatalogHash = c.ID+"-stale", catalogHash
	forged, err := mcpfront.Sign(d.key, &c)
	if err != nil {
		return err
	}
	cs, err := d.connect(ctx, forged)
	if err != nil {
		return mcpError(err)
	}
	defer cs.Close()
	_, err = cs.ListTools(ctx, nil)
	return mcpError(err)
}

// staleTokenReconnect: a sandbox that reconnects is answered against the
// catalogue its token binds, and only while that turn holds it.
var staleTokenReconnect = Row{
	Name: "stale-token-reconnect",
	Probe: "a sandbox reconnects to its turn (mcp: with its token; elsewhere: attach) after the provider moved " +
		"notion.search's capability; the call inside the granted tree passes: the turn holds the catalogue the token binds",
	Attack:  "the stale sandbox calls after its turn closed; mcp: a node-signed token for a new turn binding the old catalogHash",
	Want:    reason.TurnClosed,
	Disable: func(s *turn.Switches) { s.ReresolvePerOperation = true },
	Run: func(ctx context.Context, h *H) error {
		who, lease, err := open(ctx, h, Ada)
		if err != nil {
			return err
		}
		first, err := h.D.ListTools(ctx, who)
		if err != nil || !shows(first, "notion_search") {
			return fmt.Errorf("probe listing: %v (shown: %v)", err, aliases(first))
		}
		h.F.Notion.Set(providers.MemoryTool{Definition: SearchDef("notion.admin.export"), Handler: searchHandler})
		td, tokens := h.D.(TokenDriver)
		again := who
		if tokens {
			if err := td.Reconnect(ctx, who); err != nil {
				return probe("reconnect with the token", err)
			}
		} else if again, _, err = open(ctx, h, who); err != nil {
			return probe("attach", err)
		}
		if _, err := h.D.Invoke(ctx, again, "notion_search", searchArgs("acme")); err != nil {
			return probe("call inside the granted tree after reconnecting", err)
		}
		if err := h.D.Close(ctx, who, lease); err != nil {
			return probe("close", err)
		}
		if again.LeaseID != who.LeaseID {
			if err := h.D.Close(ctx, again, again.LeaseID); err != nil {
				return probe("close the attached lease", err)
			}
		}
		_, err = h.D.Invoke(ctx, again, "notion_search", searchArgs("acme"))
		if e := refused("call after the turn closed", err, reason.TurnClosed); e != nil {
			return e
		}
		if !tokens {
			return nil
		}
		next, _, err := open(ctx, h, Ada)
		if err != nil {
			return err
		}
		l, err := h.D.ListTools(ctx, next)
		if err != nil || l.CatalogHash == first.CatalogHash {
			return fmt.Errorf("probe: the new turn's catalogue should differ: %v (%s)", err, l.CatalogHash)
		}
		if err := td.ConnectBound(ctx, next, first.CatalogHash); err == nil {
			return errors.New("attack: a token binding the catalogue the sandbox was shown, not the turn's, was admitted")
		}
		return nil
	},
}
