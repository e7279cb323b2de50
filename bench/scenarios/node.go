package scenarios

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/bench/harness"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/internal/auditstore"
	"github.com/sharedos/sharedos/internal/mcpfront"
	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/internal/natsfront"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/internal/tracing"
	"github.com/sharedos/sharedos/provider"
)

// Audit modes of a scenario.
const (
	// AuditAsync publishes every record to the JetStream audit stream
	// without waiting for its ack ("durability: async": durability off).
	AuditAsync = "async"
	// AuditAcked: a tool runs only once its tool.invoked is stored and
	// every reply waits for its record ("durability: acked").
	AuditAcked = "acked"
	// AuditDiscard drops every record (the kernel alone).
	AuditDiscard = "discard"
)

// Tool placement of a scenario.
const (
	// ToolStatic is a static tool run in the node's process.
	ToolStatic = "static"
	// ToolProvider is the same tool served by a provider over NATS (the
	// provider SDK's host on its own TCP connection; the node reaches it
	// through its remote proxy).
	ToolProvider = "provider"
	// toolMCP is the tool served by an MCP server over streamable HTTP on
	// loopback, reached through the MCP-backed provider.
	toolMCP = "mcp"
	// toolCatalog500 is the echo tool among 499 others, static: the
	// catalogue a model listing translates.
	toolCatalog500 = "catalog500"
)

// The benchmark principal, its grant, and the tool every scenario calls.
const (
	benchTenant    = "bench"
	benchPrincipal = "load"
	benchNamespace = "bench"
	benchAlias     = "bench_echo"
	toolProviderID = "benchp"
	staticID       = "bench"
)

var benchAccess = authority.AccessContext{
	Tenant: benchTenant, Principal: benchPrincipal, CredentialProfile: "bench", EnabledNamespaces: []string{benchNamespace},
}

// openTurn opens a turn as benchAccess on k and returns the access
// context naming it (its turn and lease).
func openTurn(ctx context.Context, k *actors.Kernel) (authority.AccessContext, error) {
	o, err := k.Open(ctx, benchAccess)
	if err != nil {
		return authority.AccessContext{}, err
	}
	a := benchAccess
	a.TurnID, a.LeaseID = o.TurnID, o.LeaseID
	return a, nil
}

// echoDefinition is the tool: its arguments are validated against the
// schema, its requirement resolves to a fixed resource, and it returns
// the arguments (the payload travels both ways once).
var echoDefinition = catalog.Definition{
	Name: "echo", Namespace: benchNamespace, Description: "Returns its arguments.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`),
	Capability:  "bench.echo", Requirement: "bench/echo",
}

func echo(_ context.Context, args json.RawMessage) (string, json.RawMessage) { return "ok", args }

// payload is a call's arguments with a text of n bytes.
func payload(n int) []byte {
	return []byte(`{"text":"` + strings.Repeat("x", n) + `"}`)
}

func benchAuthority() (*authority.StaticSource, error) {
	return authority.NewStaticSource(map[[2]string][]authority.GrantSpec{
		{benchTenant, benchPrincipal}: {{ID: "bench", Capability: "bench.*", Resource: "bench/**"}},
	})
}

// benchCredentials binds the bench principal's credential profile.
func benchCredentials() (*authority.StaticCredentials, error) {
	return authority.NewStaticCredentials([]authority.CredentialBinding{
		{Tenant: benchTenant, Profile: benchAccess.CredentialProfile, Principals: []string{benchPrincipal}},
	})
}

// counting wraps a provider, counting its catalogue calls and the time
// spent in them.
type counting struct {
	providers.ContextToolProvider
	calls atomic.Int64
	nanos atomic.Int64
}

func (c *counting) Catalog(ctx context.Context, access authority.AccessContext) (providers.Catalog, error) {
	start := time.Now()
	defer func() {
		c.nanos.Add(int64(time.Since(start)))
		c.calls.Add(1)
	}()
	return c.ContextToolProvider.Catalog(ctx, access)
}

func (c *counting) counters() harness.Counters {
	return harness.Counters{Providers: 1, CatalogCalls: c.calls.Load(), CatalogTime: time.Duration(c.nanos.Load())}
}

// node is a SharedOS node assembled for one scenario: kernel, audit sink
// and provider, and (when served over NATS) the front.
type node struct {
	kernel  *actors.Kernel
	counted *counting
	nc      *nats.Conn // the node's own connection
	prefix  string
	closer  closer
	mcp     *mcpprovider.Provider // with toolMCP
	// watch tells an MCP front of the turns that close (as internal/node
	// wires it), so its table of turns does not fill; with mcpFront.
	watch *mcpfront.Watch
}

type nodeConfig struct {
	audit string
	tool  string
	// front serves the kernel over NATS; mcpFront: an MCP front will
	// serve it (its watch sees every record).
	front, mcpFront bool
	// stepCeiling, maxTurns: 0 means the kernel's defaults. maxTurns
	// also bounds one principal's turns (the bench opens them all as one).
	stepCeiling, maxTurns int
	idleTimeout           time.Duration
	// sync runs the node on a server that fsyncs every write (Env.server).
	sync bool
	// tracing, if set, is the node's trace pipeline (traced.go): the
	// front, the provider hop, the provider's host and the audit commits
	// record spans with its tracer.
	tracing *tracing.Tracing
}

// startNode assembles a node the way internal/node does, with control
// over the sink and the provider.
func (e *Env) startNode(ctx context.Context, cfg nodeConfig) (_ *node, err error) {
	n := &node{prefix: e.prefix()}
	defer func() {
		// n, not the named result: a failed start returns nil, and what
		// it started must still be stopped.
		if err != nil {
			_ = n.close(context.WithoutCancel(ctx))
		}
	}()
	if n.nc, err = e.nodeConnOn(cfg.sync, "bench-node-"+n.prefix); err != nil {
		return nil, err
	}
	n.closer.addConn(n.nc)

	var sink audit.Sink = audit.Discard{}
	if cfg.audit != AuditDiscard {
		stream := "BENCH_" + strings.ToUpper(n.prefix)
		js, err := auditstore.NewJetStreamSink(ctx, n.nc, auditstore.JetStreamOptions{
			Prefix: n.prefix, Stream: stream, Durability: cfg.audit, MaxAge: time.Hour, Logger: e.opts.Logger,
			Tracer: cfg.tracing.Tracer(), MaxInFlight: e.opts.CommitsInFlight,
		})
		if err != nil {
			return nil, err
		}
		n.closer.add(deleteStream(n.nc, stream))
		n.closer.add(js.Close)
		sink = js
	}

	if cfg.mcpFront {
		n.watch = mcpfront.NewWatch(sink)
		sink = n.watch
	}

	var p providers.ContextToolProvider
	switch cfg.tool {
	case toolCatalog500:
		p, err = providers.NewStatic(staticID, catalog500())
		if err != nil {
			return nil, err
		}
	case ToolStatic:
		p, err = providers.NewStatic(staticID, []providers.StaticTool{{Definition: echoDefinition, Handler: echoHandler}})
		if err != nil {
			return nil, err
		}
	case ToolProvider:
		pc, err := e.remoteConnOn(cfg.sync, "bench-provider-"+n.prefix)
		if err != nil {
			return nil, err
		}
		n.closer.addConn(pc)
		tools := []provider.Tool{{Definition: echoDefinition, Handler: func(ctx context.Context, call provider.Call) (provider.Result, error) {
			text, out := echo(ctx, call.Arguments)
			return provider.Result{Text: text, Structured: out}, nil
		}}}
		host, err := provider.Serve(pc, toolProviderID, provider.ProviderFunc(func(context.Context, provider.Access) ([]provider.Tool, error) {
			return tools, nil
		}), &provider.Options{Prefix: n.prefix, TTL: 5 * time.Minute, Scope: "global", TrustedKeys: []ed25519.PublicKey{benchKey.Public().(ed25519.PublicKey)},
			TracerProvider: cfg.tracing.Provider()})
		if err != nil {
			return nil, err
		}
		n.closer.add(host.Stop)
		p = providers.NewRemote(n.nc, toolProviderID, n.prefix, providers.WithLogger(e.opts.Logger), providers.WithSigner(benchKey),
			providers.WithTracer(cfg.tracing.Tracer()))
	case toolMCP:
		url, err := mcpEchoServer(&n.closer)
		if err != nil {
			return nil, err
		}
		// Server id "bench": its tools' namespace and alias prefix; their
		// capability and requirement are the bench grant's (bench.echo on
		// bench/echo), as a deployment's configuration maps them.
		mp, err := mcpprovider.New(mcpServerID, mcpprovider.Config{Transport: "http", URL: url, Capability: "bench", Requirement: "bench/{tool}"},
			&mcpprovider.Options{Logger: e.opts.Logger})
		if err != nil {
			return nil, err
		}
		n.closer.add(func(context.Context) error { return mp.Close() })
		n.mcp, p = mp, mp
	default:
		return nil, fmt.Errorf("scenarios: unknown tool placement %q", cfg.tool)
	}
	n.counted = &counting{ContextToolProvider: p}

	auth, err := benchAuthority()
	if err != nil {
		return nil, err
	}
	creds, err := benchCredentials()
	if err != nil {
		return nil, err
	}
	n.kernel, err = actors.New(actors.Options{
		Node: "bench", Providers: []providers.ContextToolProvider{n.counted}, Authority: auth, Credentials: creds, Sink: sink, AwaitCompletion: e.opts.AwaitCompletion,
		StepCeiling: cfg.stepCeiling, MaxTurns: cfg.maxTurns, MaxTurnsPerPrincipal: cfg.maxTurns, IdleTimeout: cfg.idleTimeout, Logger: e.opts.Logger,
	})
	if err != nil {
		return nil, err
	}
	n.closer.add(n.kernel.Shutdown)
	if cfg.front {
		front, err := natsfront.Serve(n.nc, n.kernel, natsfront.Options{Prefix: n.prefix, Logger: e.opts.Logger, Tracer: cfg.tracing.Tracer()})
		if err != nil {
			return nil, err
		}
		n.closer.add(front.Stop)
	}
	return n, nil
}

func (n *node) close(ctx context.Context) error { return n.closer.close(ctx) }

// benchKey signs the bench node's execution grants (as a node's key does).
var benchKey = ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
