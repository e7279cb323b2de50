package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/contract"
	"github.com/sharedos/sharedos/internal/providers"
)

// Driver is how a row talks to the system under test. *actors.Kernel is
// one; transports provide adapters with the same semantics.
type Driver interface {
	Open(ctx context.Context, access authority.AccessContext) (actors.Opened, error)
	ListTools(ctx context.Context, access authority.AccessContext) (actors.ToolList, error)
	ListNamespaces(ctx context.Context, access authority.AccessContext) ([]actors.NamespaceInfo, error)
	UpdateNamespaces(ctx context.Context, access authority.AccessContext, namespaces []string) error
	Invoke(ctx context.Context, access authority.AccessContext, alias string, args []byte) (actors.CallResult, error)
	Close(ctx context.Context, access authority.AccessContext, leaseID string) error
}

// Column is a transport under test. Start brings up the system for one
// row with the given kernel options (providers included; a column may
// serve them differently, e.g. over NATS) and tears it down with t.Cleanup.
type Column struct {
	Name string
	// Bus says the column's driver is a BusDriver: callers are identities
	// a real bus established (rows with NeedsBus run there only).
	Bus bool
	// RemoteProviders says the providers are served over the bus by the
	// provider SDK (rows with NeedsRemoteProviders run there only).
	RemoteProviders bool
	Start           func(t testing.TB, f *Fixture, opts actors.Options) Driver

	// Tokens says callers reach turns with execution tokens, minted once
	// the turn's catalogue is resolved (the mcp column).
	Tokens bool
	// NoModelListings says the column's callers cannot ask for a
	// model-facing listing: a sandbox on the MCP front is shown the
	// front's own MCP listing, and a runtime asks for the others over the
	// turn protocol.
	NoModelListings bool
}

// InProcess is the column that drives the kernel directly.
var InProcess = Column{
	Name: "in-process",
	Start: func(t testing.TB, f *Fixture, opts actors.Options) Driver {
		return startKernel(t, opts)
	},
}

// startKernel starts a kernel with opts; Cleanup shuts it down.
func startKernel(t testing.TB, opts actors.Options) *actors.Kernel {
	t.Helper()
	k, err := actors.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = k.Shutdown(ctx)
	})
	return k
}

// Clock is a manual clock, safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// T0 is the fixture's starting instant.
var T0 = time.Date(2026, 9, 8, 9, 0, 0, 0, time.UTC)

// Fixture is the world every row runs in: two providers, two principals,
// a manual clock, an in-memory audit sink and live policy (Live).
//
//	ada (tenant acme): notion.* on notion/workspace/acme/**, notes.* on notes/acme/**
//	bob (tenant acme): notion.* on notion/workspace/acme/** until T0+1h
//	provider notion: search  (notion.search, notion/workspace/{workspace}/search)
//	provider notes:  put     (notes.put,     notes/{space}/items)
type Fixture struct {
	Clock  *Clock
	Sink   *audit.Memory
	Notion *providers.Memory
	Notes  *providers.Memory
	Auth   authority.Source
	// Credentials binds acme-notion-work to ada, acme-notion-bob to bob
	// and SharedProfile to every principal of acme.
	Credentials authority.CredentialPolicy
	// Live is Auth and Credentials: the policy as the node's policy store
	// keeps it, changed by rows while turns are open.
	Live *authority.Live
	// Rules are the approval rules in force (none until a row sets
	// them); Approvals the store of their requests, in memory, which rows
	// decide as an approver would.
	Rules     *approval.Live
	Approvals *approval.Requests
	// Contracts is the kernel's contract gate, over baselines in memory:
	// every provider adopts each change until a row holds it (Hold).
	Contracts *contract.Gate
	holding   sync.Map // provider id → true
}

// Hold gives provider the policy drift: hold (first use trusted).
func (f *Fixture) Hold(provider string) { f.holding.Store(provider, true) }

func (f *Fixture) contractPolicy(provider string) contract.Policy {
	if _, ok := f.holding.Load(provider); ok {
		return contract.Policy{Drift: contract.DriftHold, FirstUse: contract.FirstUseTrust}
	}
	return contract.Policy{}
}

// Principals.
var (
	Ada = authority.AccessContext{Tenant: "acme", Principal: "ada", CredentialProfile: "acme-notion-work", EnabledNamespaces: []string{"notion", "notes"}}
	Bob = authority.AccessContext{Tenant: "acme", Principal: "bob", CredentialProfile: "acme-notion-bob", EnabledNamespaces: []string{"notion", "notes"}}
)

// SharedProfile is a credential profile of acme that every principal of
// acme may act with.
const SharedProfile = "acme-shared"

// SearchDef is notion/search with the given capability.
func SearchDef(capability string) catalog.Definition {
	return catalog.Definition{
		Name: "search", Namespace: "notion",
		Description: "Search the pages of a Notion workspace.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"workspace":{"type":"string"},"query":{"type":"string"}},"required":["workspace","query"],"additionalProperties":false}`),
		Annotations: json.RawMessage(`{"readOnlyHint":true}`),
		Capability:  capability, Requirement: "notion/workspace/{workspace}/search",
	}
}

// CreatePageDef is a tool the notion provider can add mid-turn.
func CreatePageDef() catalog.Definition {
	return catalog.Definition{
		Name: "create_page", Namespace: "notion", Description: "Create a page.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"workspace":{"type":"string"},"title":{"type":"string"}},"required":["workspace","title"]}`),
		Capability:  "notion.write", Requirement: "notion/workspace/{workspace}/pages",
	}
}

func putDef() catalog.Definition {
	return catalog.Definition{
		Name: "put", Namespace: "notes", Description: "Save a note.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"space":{"type":"string"},"title":{"type":"string"},"body":{"type":"string"}},"required":["space","title"]}`),
		Capability:  "notes.put", Requirement: "notes/{space}/items",
	}
}

func searchHandler(_ context.Context, call providers.Call) (providers.Result, error) {
	var a struct{ Workspace, Query string }
	if err := json.Unmarshal(call.Arguments, &a); err != nil {
		return providers.Result{}, err
	}
	return providers.Result{Text: fmt.Sprintf("3 pages in %s match %q", a.Workspace, a.Query)}, nil
}

// NewFixture builds the world at T0.
func NewFixture(t testing.TB) *Fixture {
	t.Helper()
	live, err := authority.NewLive(map[[2]string][]authority.GrantSpec{
		{"acme", "ada"}: {
			{ID: "ada-notion", Capability: "notion.*", Resource: "notion/workspace/acme/**"},
			{ID: "ada-notes", Capability: "notes.*", Resource: "notes/acme/**"},
		},
		{"acme", "bob"}: {
			{ID: "bob-notion", Capability: "notion.*", Resource: "notion/workspace/acme/**", ExpiresAt: T0.Add(time.Hour)},
		},
	}, []authority.CredentialBinding{
		{Tenant: "acme", Profile: Ada.CredentialProfile, Principals: []string{"ada"}},
		{Tenant: "acme", Profile: Bob.CredentialProfile, Principals: []string{"bob"}},
		{Tenant: "acme", Profile: SharedProfile},
	})
	if err != nil {
		t.Fatal(err)
	}
	f := &Fixture{
		Live:        live,
		Credentials: live,
		Clock:       &Clock{now: T0},
		Sink:        audit.NewMemory(),
		Notion:      providers.NewMemory("notion", providers.MemoryTool{Definition: SearchDef("notion.search"), Handler: searchHandler}),
		Notes:       providers.NewMemory("notes", providers.MemoryTool{Definition: putDef(), Handler: providers.EchoHandler}),
		Auth:        live,
		Rules:       &approval.Live{},
		Approvals:   &approval.Requests{B: approval.NewMemory()},
	}
	f.Contracts = contract.NewGate(contract.NewMemory(), contract.GateOptions{Policy: f.contractPolicy, Clock: f.Clock.Now,
		Logger: slog.New(slog.DiscardHandler)})
	return f
}

// Options returns kernel options over the fixture.
func (f *Fixture) Options() actors.Options {
	return actors.Options{
		Node:        "n1",
		Providers:   []providers.ContextToolProvider{f.Notion, f.Notes},
		Authority:   f.Auth,
		Credentials: f.Credentials,
		Sink:        f.Sink,
		Clock:       f.Clock.Now,
		StepCeiling: 64,
		Approvals:   actors.Approvals{Rules: f.Rules, Store: f.Approvals},
		Contracts:   f.Contracts,
		IdleTimeout: time.Minute,
		Logger:      slog.New(slog.DiscardHandler),
	}
}
