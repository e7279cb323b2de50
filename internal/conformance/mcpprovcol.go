package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/reason"
	"github.com/sharedos/sharedos/turn"
)

// MCPProvider is the column where every tool is served by an MCP-backed
// provider (internal/mcpprovider) in front of a real MCP server built with
// the SDK: each fixture provider becomes an MCP server (its tools/list and
// tools/call answered from the fixture), reached over the SDK's in-memory
// transport, so every row runs through discovery — the teed tools/list,
// source revisions, the cache, list_changed — and tools/call.
//
// An MCP tool carries no capability or requirement; here the bridge puts
// the fixture's in the tool's _meta and the provider's Authority hook
// reads them (a deployment maps them in configuration). The bridge's
// tools/list answers carry no ttlMs on 2026-07-28: every resolution
// re-discovers, as the server asked.
var MCPProvider = Column{
	Name: "mcp-provider",
	Start: func(t testing.TB, f *Fixture, opts actors.Options) Driver {
		d := &mcpDriver{bridges: map[string]*bridge{}, ps: map[string]*mcpprovider.Provider{}}
		var ps []providers.ContextToolProvider
		for _, p := range opts.Providers {
			m, ok := p.(*providers.Memory)
			if !ok {
				t.Fatalf("mcp-provider column: provider %s is not a fixture provider", p.ID())
			}
			b := newBridge(m)
			mp, err := mcpprovider.New(m.ID(), mcpprovider.Config{Transport: "memory", Server: m.ID()}, &mcpprovider.Options{
				Logger:    opts.Logger,
				Memory:    func(string) (*mcp.Server, bool) { return b.srv, true },
				Authority: metaAuthority,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = mp.Close() })
			d.bridges[m.ID()], d.ps[m.ID()] = b, mp
			ps = append(ps, mp)
		}
		opts.Providers = ps
		d.Kernel = startKernel(t, opts)
		return d
	},
}

// mcpDriver is the kernel, plus what a row needs to tell the MCP servers
// that their list changed.
type mcpDriver struct {
	*actors.Kernel
	bridges map[string]*bridge
	ps      map[string]*mcpprovider.Provider
}

// ListChanged has the provider's MCP server send
// notifications/tools/list_changed and waits for the authoritative
// re-discovery it triggers.
func (d *mcpDriver) ListChanged(ctx context.Context, provider string) error {
	b, p := d.bridges[provider], d.ps[provider]
	if b == nil {
		return fmt.Errorf("no MCP server for %s", provider)
	}
	before := p.Discoveries()
	b.notify()
	for p.Discoveries() <= before {
		select {
		case <-ctx.Done():
			return fmt.Errorf("list_changed did not lead to a re-discovery: %w", ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// listChanger is a driver whose providers can be told their list changed.
type listChanger interface {
	ListChanged(ctx context.Context, provider string) error
}

// listChanged tells the column the provider's list changed, where the
// column has a way to (an MCP server's list_changed); elsewhere the next
// resolution simply sees the change.
func listChanged(ctx context.Context, h *H, provider string) error {
	if lc, ok := h.D.(listChanger); ok {
		return lc.ListChanged(ctx, provider)
	}
	return nil
}

const (
	metaCapability  = "sharedos/capability"
	metaRequirement = "sharedos/requirement"
)

// metaAuthority reads a bridged tool's capability and requirement from
// its _meta.
func metaAuthority(_ string, raw json.RawMessage) (string, string, bool) {
	var w struct {
		Meta map[string]string `json:"_meta"`
	}
	if json.Unmarshal(raw, &w) != nil || w.Meta[metaCapability] == "" {
		return "", "", false
	}
	return w.Meta[metaCapability], w.Meta[metaRequirement], true
}

// bridge is an MCP server (the SDK's) answering from a fixture provider.
// tools/call runs the revision it last listed for the name: what an MCP
// server does (it runs its tool as it last described it), which the
// fixture's Retire can refuse.
type bridge struct {
	m   *providers.Memory
	srv *mcp.Server

	mu   sync.Mutex
	revs map[string]string
}

func newBridge(m *providers.Memory) *bridge {
	b := &bridge{m: m, revs: map[string]string{}}
	b.srv = mcp.NewServer(&mcp.Implementation{Name: "fixture-" + m.ID(), Version: "1"}, &mcp.ServerOptions{HasTools: true})
	b.srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch method {
			case "tools/list":
				return b.list(ctx)
			case "tools/call":
				return b.call(ctx, req.(*mcp.CallToolRequest).Params)
			}
			return next(ctx, method, req)
		}
	})
	return b
}

func (b *bridge) list(ctx context.Context) (*mcp.ListToolsResult, error) {
	cat, err := b.m.Catalog(ctx, authority.AccessContext{})
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
	}
	res := &mcp.ListToolsResult{Tools: []*mcp.Tool{}}
	revs := map[string]string{}
	for _, d := range cat.Definitions {
		t, err := catalog.Normalize(b.m.ID(), d, catalog.Limits{})
		if err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
		}
		revs[d.Name] = t.Revision
		mt := &mcp.Tool{Name: d.Name, Description: d.Description, InputSchema: d.InputSchema,
			Meta: mcp.Meta{metaCapability: d.Capability, metaRequirement: d.Requirement}}
		if len(d.OutputSchema) > 0 {
			mt.OutputSchema = d.OutputSchema
		}
		if len(d.Annotations) > 0 {
			mt.Annotations = &mcp.ToolAnnotations{}
			if err := json.Unmarshal(d.Annotations, mt.Annotations); err != nil {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
			}
		}
		res.Tools = append(res.Tools, mt)
	}
	b.mu.Lock()
	b.revs = revs
	b.mu.Unlock()
	return res, nil
}

func (b *bridge) call(ctx context.Context, p *mcp.CallToolParamsRaw) (*mcp.CallToolResult, error) {
	b.mu.Lock()
	rev, ok := b.revs[p.Name]
	b.mu.Unlock()
	if !ok {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "unknown tool " + p.Name}
	}
	res, err := b.m.Invoke(ctx, providers.Call{Tool: catalog.Identity{Provider: b.m.ID(), Name: p.Name}, Revision: rev, Arguments: p.Arguments})
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
	}
	out := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Text}}, IsError: res.IsError}
	if len(res.Structured) > 0 {
		out.StructuredContent = res.Structured
	}
	return out, nil
}

// notify makes the SDK server send notifications/tools/list_changed (it
// does when its own tool set changes; the middleware answers tools/list).
func (b *bridge) notify() {
	b.srv.AddTool(&mcp.Tool{Name: "zz-list-changed", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	b.srv.RemoveTools("zz-list-changed")
}

// listChangedMidTurn: a provider's list changes while a turn is open (an
// MCP server says so with list_changed). The open turn keeps what it
// pinned; the next turn sees the change.
var listChangedMidTurn = Row{
	Name:    "list-changed-mid-turn",
	Probe:   "notion adds create_page (and says list_changed); the open turn's listing and catalogHash are unchanged; a new turn lists create_page",
	Attack:  "the open turn calls create_page, which it was never shown",
	Want:    reason.UnknownTool,
	Disable: func(s *turn.Switches) { s.ReresolvePerOperation = true },
	Run: func(ctx context.Context, h *H) error {
		who, lease, err := open(ctx, h, Ada)
		if err != nil {
			return err
		}
		first, err := h.D.ListTools(ctx, who)
		if err != nil || !shows(first, "notion_search") {
			return fmt.Errorf("probe first listing: %v (shown: %v)", err, aliases(first))
		}
		h.F.Notion.Set(
			providers.MemoryTool{Definition: SearchDef("notion.search"), Handler: searchHandler},
			providers.MemoryTool{Definition: CreatePageDef(), Handler: providers.EchoHandler},
		)
		if err := listChanged(ctx, h, "notion"); err != nil {
			return probe("list_changed", err)
		}
		second, err := h.D.ListTools(ctx, who)
		if err != nil || second.CatalogHash != first.CatalogHash || shows(second, "notion_create_page") {
			return fmt.Errorf("probe: the open turn's listing moved: %v, %v (hash %s vs %s)", err, aliases(second), second.CatalogHash, first.CatalogHash)
		}
		if _, err := h.D.Invoke(ctx, who, "notion_search", searchArgs("acme")); err != nil {
			return probe("call a pinned tool after the change", err)
		}
		_, err = h.D.Invoke(ctx, who, "notion_create_page", []byte(`{"workspace":"acme","title":"x"}`))
		if e := refused("call the added tool in the open turn", err, reason.UnknownTool); e != nil {
			return e
		}
		if err := h.D.Close(ctx, who, lease); err != nil {
			return probe("close", err)
		}
		next, _, err := open(ctx, h, Ada)
		if err != nil {
			return err
		}
		l, err := h.D.ListTools(ctx, next)
		if err != nil || !shows(l, "notion_create_page") || l.CatalogHash == first.CatalogHash {
			return fmt.Errorf("probe: a new turn does not see the change: %v, %v", err, aliases(l))
		}
		return nil
	},
}

// wikiDef is a second provider's tool of the same name as notion's.
func wikiDef() catalog.Definition {
	return catalog.Definition{
		Name: "search", Namespace: "wiki", Description: "Search the wiki.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"workspace":{"type":"string"},"query":{"type":"string"}},"required":["workspace","query"]}`),
		Annotations: json.RawMessage(`{"readOnlyHint":true}`),
		Capability:  "wiki.search", Requirement: "wiki/{workspace}/search",
	}
}

// sameNameTwoServers: two providers offer "search". Both are listed and
// callable, each under its own identity in audit; enabling one's
// namespace does not expose the other's tool of the same name.
var sameNameTwoServers = Row{
	Name:   "same-name-two-servers",
	Probe:  "notion and wiki both offer search: two aliases, both callable, tool.invoked names notion/search and wiki/search",
	Attack: "with only wiki enabled, call notion_search",
	Want:   reason.NamespaceDisabled,
	Options: func(o *actors.Options) {
		o.Providers = append(o.Providers, providers.NewMemory("wiki", providers.MemoryTool{Definition: wikiDef(), Handler: searchHandler}))
		o.Authority = withGrant(o.Authority, authority.GrantSpec{ID: "ada-wiki", Capability: "wiki.*", Resource: "wiki/acme/**"})
	},
	Disable: func(s *turn.Switches) { s.IgnoreNamespaces = true },
	Run: func(ctx context.Context, h *H) error {
		ada := Ada
		ada.EnabledNamespaces = []string{"notion", "notes", "wiki"}
		who, _, err := open(ctx, h, ada)
		if err != nil {
			return err
		}
		l, err := h.D.ListTools(ctx, who)
		if err != nil || !shows(l, "notion_search") || !shows(l, "wiki_search") {
			return fmt.Errorf("probe listing: %v (shown: %v)", err, aliases(l))
		}
		for _, alias := range []string{"notion_search", "wiki_search"} {
			if _, err := h.D.Invoke(ctx, who, alias, searchArgs("acme")); err != nil {
				return probe("call "+alias, err)
			}
		}
		got := map[string]string{}
		for _, ev := range h.F.Sink.Events(who.TurnID) {
			if ev.Type == audit.ToolInvoked && ev.Call != nil {
				got[ev.Call.Alias] = ev.Call.Provider + "/" + ev.Call.Name
			}
		}
		if got["notion_search"] != "notion/search" || got["wiki_search"] != "wiki/search" {
			return fmt.Errorf("probe: audited identities %v", got)
		}
		if err := h.D.UpdateNamespaces(ctx, who, []string{"wiki"}); err != nil {
			return probe("enable only wiki", err)
		}
		_, err = h.D.Invoke(ctx, who, "notion_search", searchArgs("acme"))
		return refused("call the other server's search", err, reason.NamespaceDisabled)
	},
}

// withGrant adds a grant for ada to the fixture's authority.
func withGrant(src authority.Source, g authority.GrantSpec) authority.Source {
	extra, err := authority.NewStaticSource(map[[2]string][]authority.GrantSpec{{"acme", "ada"}: {g}})
	if err != nil {
		panic(err)
	}
	return joinedSource{src, extra}
}

// joinedSource is the grants of both sources.
type joinedSource [2]authority.Source

func (j joinedSource) Resolve(ctx context.Context, a authority.AccessContext) (authority.Authority, error) {
	x, err := j[0].Resolve(ctx, a)
	if err != nil {
		return x, err
	}
	y, err := j[1].Resolve(ctx, a)
	if err != nil {
		return y, err
	}
	return authority.NewAuthority(append(append([]authority.Grant(nil), x.Grants()...), y.Grants()...)), nil
}
