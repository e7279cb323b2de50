package mcpprovider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/internal/providers"
)

// fake is an MCP server built with the SDK whose tools/list and
// tools/call are answered from raw JSON fixtures (a receiving
// middleware), so a test can serve what the SDK's own AddTool would
// refuse: invalid schemas, bombs, unrepresentable types.
type fake struct {
	srv *mcp.Server

	mu       sync.Mutex
	tools    []json.RawMessage
	pageSize int
	ttlMs    *int   // 2026-07-28 only; nil: absent
	scope    string // 2026-07-28 only

	pipes []net.Conn // server-side ends of the sessions (dial)

	lists atomic.Int64 // tools/list requests answered (pages)
	calls atomic.Int64
	// onCall, when set, runs on each tools/call the server receives;
	// an error it returns is the call's answer.
	onCall func() error
}

func newFake(t *testing.T, versions []string, tools ...string) *fake {
	t.Helper()
	f := &fake{pageSize: 100}
	f.set(tools...)
	f.srv = mcp.NewServer(&mcp.Implementation{Name: "Official GitHub MCP", Version: "9"}, &mcp.ServerOptions{
		HasTools: true, SupportedProtocolVersions: versions,
	})
	f.srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch method {
			case "tools/list":
				return f.list(req.(*mcp.ListToolsRequest).Params.Cursor)
			case "tools/call":
				p := req.(*mcp.CallToolRequest).Params
				if !f.offers(p.Name) {
					return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "unknown tool " + p.Name}
				}
				f.calls.Add(1)
				if f.onCall != nil {
					if err := f.onCall(); err != nil {
						return nil, err
					}
				}
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran " + p.Name + " " + string(p.Arguments)}},
					StructuredContent: map[string]any{"tool": p.Name}}, nil
			}
			return next(ctx, method, req)
		}
	})
	return f
}

func (f *fake) set(tools ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tools = f.tools[:0]
	for _, t := range tools {
		f.tools = append(f.tools, json.RawMessage(t))
	}
}

func (f *fake) offers(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, raw := range f.tools {
		if rawTool(raw).Name == name {
			return true
		}
	}
	return false
}

func (f *fake) setRaw(tools []json.RawMessage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tools = tools
}

func (f *fake) list(cursor string) (*mcp.ListToolsResult, error) {
	f.lists.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	start := 0
	if cursor != "" {
		n, err := strconv.Atoi(cursor)
		if err != nil || n < 0 || n > len(f.tools) {
			return nil, fmt.Errorf("bad cursor")
		}
		start = n
	}
	end := min(start+f.pageSize, len(f.tools))
	res := &mcp.ListToolsResult{Tools: []*mcp.Tool{}}
	for _, raw := range f.tools[start:end] {
		res.Tools = append(res.Tools, rawTool(raw))
	}
	if end < len(f.tools) {
		res.NextCursor = strconv.Itoa(end)
	}
	if f.ttlMs != nil {
		res.TTLMs = *f.ttlMs
	}
	res.CacheScope = f.scope
	return res, nil
}

// rawTool carries a fixture through the SDK's Tool type: the schema
// fields are json.RawMessage (sent as they are); annotations round-trip
// through the SDK's type, so fixtures keep them to what it represents.
func rawTool(raw json.RawMessage) *mcp.Tool {
	var w struct {
		Name         string               `json:"name"`
		Title        string               `json:"title"`
		Description  string               `json:"description"`
		InputSchema  json.RawMessage      `json:"inputSchema"`
		OutputSchema json.RawMessage      `json:"outputSchema"`
		Annotations  *mcp.ToolAnnotations `json:"annotations"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		panic(err)
	}
	t := &mcp.Tool{Name: w.Name, Title: w.Title, Description: w.Description, InputSchema: w.InputSchema, Annotations: w.Annotations}
	if len(w.OutputSchema) > 0 {
		t.OutputSchema = w.OutputSchema
	}
	return t
}

// notifyChanged makes the SDK server send notifications/tools/list_changed
// (adding and removing a tool it never lists: the middleware answers
// tools/list from the fixtures).
func (f *fake) notifyChanged() {
	f.srv.AddTool(&mcp.Tool{Name: "zz_bump", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
}

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// memDial connects each session to the fake for its profile over a pipe
// (what the SDK's in-memory transports are), each end an IOTransport.
// The fake keeps its server-side ends so a test can drop a session the
// way a dying server would; cleanup closes them (the SDK's
// ServerSession.Close would wait for an open subscriptions/listen).
func memDial(t *testing.T, servers func(profile string) *fake) func(context.Context, string) (mcp.Transport, error) {
	return func(ctx context.Context, profile string) (mcp.Transport, error) {
		f := servers(profile)
		if f == nil {
			return nil, fmt.Errorf("no server for %q", profile)
		}
		return f.dial(t)
	}
}

// dial connects a new client session to f.
func (f *fake) dial(t *testing.T) (mcp.Transport, error) {
	c, s := net.Pipe()
	if _, err := f.srv.Connect(context.Background(), &mcp.IOTransport{Reader: s, Writer: s}, nil); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.pipes = append(f.pipes, s)
	f.mu.Unlock()
	t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
	return &mcp.IOTransport{Reader: c, Writer: c}, nil
}

// drop cuts the i-th session's connection, as a server going away does.
func (f *fake) drop(i int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_ = f.pipes[i].Close()
}

type setup struct {
	id      string
	cfg     mcpprovider.Config
	clock   *clock
	servers func(string) *fake
}

func start(t *testing.T, s setup) *mcpprovider.Provider {
	t.Helper()
	if s.id == "" {
		s.id = "work"
	}
	if s.cfg.Transport == "" {
		s.cfg.Transport = "memory"
		s.cfg.Server = "fixture"
	}
	if s.clock == nil {
		s.clock = newClock()
	}
	p, err := mcpprovider.New(s.id, s.cfg, &mcpprovider.Options{Now: s.clock.Now, Dial: memDial(t, s.servers)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return p
}

func one(f *fake) func(string) *fake { return func(string) *fake { return f } }

func access(profile string) authority.AccessContext {
	return authority.AccessContext{Tenant: "acme", Principal: "ada", CredentialProfile: profile}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func names(c providers.Catalog) []string {
	var out []string
	for _, d := range c.Definitions {
		out = append(out, d.Name)
	}
	return out
}

const (
	v2025 = "2025-06-18"
	v2026 = "2026-07-28"
)

func tool(name, schema string) string {
	return fmt.Sprintf(`{"name":%q,"description":"%s tool","inputSchema":%s}`, name, name, schema)
}

const objSchema = `{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`
