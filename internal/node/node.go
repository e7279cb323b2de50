// Package node assembles a SharedOS node from its configuration: NATS
// (an embedded server on loopback, or an external cluster), the JetStream
// audit stream, the turn kernel with its providers, the NATS front, and the
// HTTP endpoints for metrics and health. cmd/node is a thin CLI over it.
package node

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/examples/calendar"
	"github.com/sharedos/sharedos/internal/auditstore"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/internal/mcpfront"
	"github.com/sharedos/sharedos/internal/natsfront"
	"github.com/sharedos/sharedos/internal/natsserver"
	"github.com/sharedos/sharedos/internal/policy"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/internal/tracing"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/provider"
)

// Options are what the configuration file does not say.
type Options struct {
	Logger *slog.Logger
	// Providers are added to the configured ones (tests, embedders).
	Providers []providers.ContextToolProvider
	// Handlers are the static tools' handlers; default providers.Builtins().
	Handlers map[string]providers.Handler
	// Hostable are the providers a config may ask the node to host
	// (providers[].host); default {"calendar": the example provider}.
	Hostable map[string]provider.Provider
	// MCPServers are the in-process MCP servers a config may name
	// (providers[].mcp.transport: memory); default DefaultMCPServers().
	MCPServers map[string]*mcp.Server

	// Audit checkpoints (docs/audit.md). AuditKeyFile is the Ed25519
	// signing key, default <data_dir>/keys/audit-ed25519.key (created if
	// missing); CheckpointInterval defaults to 5s.
	AuditKeyFile       string
	CheckpointInterval time.Duration
}

// Node is a running node.
type Node struct {
	cfg     *config.Config
	log     *slog.Logger
	srv     *natsserver.Server // nil with an external cluster
	nc      *nats.Conn
	sink    *auditstore.JetStreamSink
	kernel  *actors.Kernel
	front   *natsfront.Front
	oauth   *nodeOAuth // the MCP servers' OAuth grants (internal/node/oauth.go); nil: none uses OAuth
	httpSrv *http.Server
	httpLn  net.Listener
	metrics *metrics
	// tracing exports the node's spans (cluster.yaml tracing); nil: off.
	tracing *tracing.Tracing
	// mcpFront serves turns over MCP at /mcp; mcpWatch tells it of
	// closed turns (internal/node/mcpfront.go).
	// mcpFront is set when the HTTP listener starts, after the NATS front
	// serves (whose token op reads it): atomic.
	mcpFront atomic.Pointer[mcpfront.Front]
	mcpWatch *mcpfront.Watch

	// ids are who may be on the bus (the policy's; replaced when they
	// change); credsDir holds the embedded server's generated seeds
	// (docs/security.md).
	ids      atomic.Pointer[identity.Set]
	credsDir string

	checkpoints *auditstore.Checkpointer // signed audit checkpoints, in front of sink
	// key is the node's Ed25519 key: it signs audit checkpoints and the
	// execution grants of provider calls (docs/security.md).
	key ed25519.PrivateKey

	// policy is the policy store, view the node's live copy of it, live
	// the grants and bindings the kernel judges against
	// (internal/node/policy.go).
	policy    *policy.Store
	view      *policy.View
	live      *authority.Live
	policySvc *policy.Service
	// ctr: contract baselines and their review (internal/node/contracts.go).
	ctr nodeContracts
	// appr are approval rules, requests and the approvers' service
	// (internal/node/approvals.go).
	appr nodeApprovals
	// fileCfg is the configuration as the file gave it (whose policy
	// sections a change replaces with the store's: Document.Apply); accounts
	// the bus configuration the embedded server serves; identityMu
	// serializes applying identities; started is set once Start is done
	// (changes before it are applied by Start itself).
	fileCfg    *config.Config
	accounts   string
	identityMu sync.Mutex
	started    atomic.Bool
	// provs are the providers the node runs, rebuilt when the policy's
	// change (internal/node/providers.go).
	provs liveProviders

	ready    atomic.Bool
	stopOnce sync.Once
	stopErr  error
}

// Start brings a node up. On error everything started is stopped again.
func Start(ctx context.Context, cfg *config.Config, opts Options) (_ *Node, err error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Handlers == nil {
		opts.Handlers = providers.Builtins()
	}
	if opts.Hostable == nil {
		opts.Hostable = map[string]provider.Provider{"calendar": calendar.Provider(nil)}
	}
	n := &Node{cfg: cfg, log: opts.Logger.With("node", cfg.Node.ID)}
	defer func() {
		if err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = n.Shutdown(sctx)
		}
	}()

	if n.tracing, err = tracing.New(cfg.Tracing, cfg.Node.ID); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	// The metrics exist before the audit sink, whose commits (the policy
	// seed's among the first) report to them from its own goroutine.
	var kernelRef atomic.Pointer[actors.Kernel]
	n.metrics = newMetrics(openTurnsGauge(func(ctx context.Context) (int, error) {
		if k := kernelRef.Load(); k != nil {
			return k.OpenTurns(ctx)
		}
		return 0, nil
	}), time.Duration(cfg.Kernel.ResolveTimeout), time.Duration(cfg.Kernel.CallTimeout))
	if err := n.connect(); err != nil {
		return nil, err
	}
	if err := waitForJetStream(ctx, n.nc); err != nil {
		return nil, err
	}
	sinkOpts := auditstore.JetStreamOptions{
		Prefix: cfg.NATS.Prefix, Stream: cfg.Audit.Stream, MaxAge: time.Duration(cfg.Audit.MaxAge),
		MaxBytes: cfg.Audit.MaxBytes, Replicas: cfg.Audit.Replicas, DuplicateWindow: time.Duration(cfg.Audit.DuplicateWindow),
		Durability: cfg.Audit.Durability, FailOpen: cfg.Audit.FailOpen, Logger: n.log,
		MaxSegmentBytes: cfg.SegmentBytes(), MaxWait: time.Duration(cfg.Audit.SegmentMaxWait), MaxPending: cfg.Audit.MaxPending,
		MaxInFlight: cfg.Audit.CommitsInFlight,
		AckTimeout:  time.Duration(cfg.Audit.AckTimeout), RetryWindow: time.Duration(cfg.Audit.RetryWindow),
		Tracer: n.tracing.Tracer(),
		OnPublish: func(d time.Duration, err error) {
			if n.metrics != nil {
				n.metrics.observePublish(d, err)
			}
		},
	}
	for {
		// While a cluster forms, JetStream may leave a request unanswered
		// (a meta leader being elected) or refuse a replicated stream's
		// placement (its servers not yet known): try again, each attempt
		// bounded, within ctx.
		actx, cancel := context.WithTimeout(ctx, sinkAttempt)
		n.sink, err = auditstore.NewJetStreamSink(actx, n.nc, sinkOpts)
		cancel()
		if err == nil || !clusterForming(err) || ctx.Err() != nil {
			break
		}
		n.log.Info("audit stream not ready yet; trying again", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, fmt.Errorf("node: audit stream: %w", err)
	}
	if err := n.startCheckpoints(ctx, opts); err != nil {
		return nil, err
	}

	// From here the node runs on the store's policy: cfg is the file with
	// the store's policy sections (equal to the file's unless
	// policy.source is store).
	if cfg, err = n.startPolicy(ctx, opts); err != nil {
		return nil, err
	}
	n.cfg = cfg
	if err := n.usePolicyIdentities(cfg); err != nil {
		return nil, err
	}
	if opts.MCPServers == nil {
		opts.MCPServers = DefaultMCPServers()
	}
	ps, err := n.startProviders(cfg, opts)
	if err != nil {
		return nil, err
	}
	ps = append(ps, opts.Providers...)
	if err := n.openApprovals(ctx); err != nil {
		return nil, err
	}
	if err := n.openContracts(ctx); err != nil {
		return nil, err
	}
	n.registerMCPMetrics()
	n.kernel, err = actors.New(actors.Options{
		Node: cfg.Node.ID, Providers: ps, Required: cfg.Required(), Authority: n.live, Credentials: n.live,
		SharesTurns:     func(opener, caller string) bool { return n.identities().SharesTurns(opener, caller) },
		Sink:            n.watchTurns(observingSink{next: n.checkpoints, m: n.metrics}),
		AwaitCompletion: cfg.Audit.AwaitCompletion,
		StepCeiling:     cfg.Kernel.StepCeiling, MaxInFlightPerTurn: cfg.Kernel.MaxInFlightPerTurn, MaxTurns: cfg.Kernel.MaxTurns,
		MaxTurnsPerPrincipal: cfg.Kernel.MaxTurnsPerPrincipal, MaxLeasesPerTurn: cfg.Kernel.MaxLeasesPerTurn,
		OpenRate:    actors.RateLimit(cfg.Kernel.OpenRate.Limit()),
		CallRate:    actors.RateLimit(cfg.Kernel.CallRate.Limit()),
		IdleTimeout: time.Duration(cfg.Kernel.IdleTimeout), ResolveTimeout: time.Duration(cfg.Kernel.ResolveTimeout),
		CallTimeout: time.Duration(cfg.Kernel.CallTimeout), Logger: n.log,
		Contracts:     n.ctr.gate,
		MaxReplyBytes: n.MaxPayload() - ReplyHeadroom,
		Approvals:     n.kernelApprovals(),
	})
	if err != nil {
		return nil, err
	}
	kernelRef.Store(n.kernel)
	lim := messages.DefaultLimits()
	lim.MaxBytes = cfg.NATS.MaxMessageBytes
	fopts := natsfront.Options{
		Prefix: cfg.NATS.Prefix, Limits: lim, Logger: n.log, Observe: n.metrics.observeRequest,
		Tokens: tokenMinter{n}, Tracer: n.tracing.Tracer(), CaptureContent: n.tracing.CaptureContent(),
	}
	if n.srv != nil || cfg.NATS.Credentials != "" {
		// The bus authenticates every party: serve only runtime
		// identities, for the tenants they are bound to. (An external
		// bus without credentials is loopback-only and unauthenticated:
		// config.Validate refuses anything else.)
		fopts.Identities, fopts.TrustUnstamped = n.identities(), n.srv != nil
		fopts.OpenRates, fopts.CallRates = cfg.IdentityRates()
	} else {
		n.log.Warn("node: NATS without credentials: callers are not authenticated and access is taken as sent (loopback development only)")
	}
	n.front, err = natsfront.Serve(n.nc, n.kernel, fopts)
	if err != nil {
		return nil, err
	}
	if err := n.servePolicy(); err != nil {
		return nil, err
	}
	if err := n.serveContracts(); err != nil {
		return nil, err
	}
	if err := n.serveApprovals(); err != nil {
		return nil, err
	}
	if err := n.serveHTTP(); err != nil {
		return nil, err
	}
	n.awaitEagerMCP()
	n.ready.Store(true)
	n.started.Store(true)
	// A change of identities or providers while the node started is
	// applied now (the view applies the later ones as they come).
	if doc, _, err := n.view.Document(); err == nil {
		if err := n.usePolicyIdentities(doc.Apply(n.fileCfg)); err != nil {
			return nil, err
		}
		if err := n.useProviders(doc.Apply(n.fileCfg)); err != nil {
			return nil, err
		}
	}
	n.log.Info("node ready", "nats", n.ClientURL(), "prefix", cfg.NATS.Prefix, "http", n.HTTPAddr(),
		"embedded", n.srv != nil, "audit_stream", cfg.Audit.Stream, "durability", cfg.Audit.Durability)
	return n, nil
}

// sinkAttempt bounds one attempt at creating or checking the audit stream.
const sinkAttempt = 5 * time.Second

// clusterForming reports whether err is what JetStream answers while a
// cluster forms: no answer in time, or no peers for a stream's replicas.
func clusterForming(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeNoPeers
}

// errCodeNoPeers is JetStream's "no suitable peers for placement"
// (nats-server's JSClusterNoPeersErr).
const errCodeNoPeers jetstream.ErrorCode = 10005

// waitForJetStream returns once the bus's JetStream answers: at once on a
// single server; in a cluster once a meta leader is elected (until then
// JetStream API requests go unanswered), which needs a quorum of servers.
func waitForJetStream(ctx context.Context, nc *nats.Conn) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("node: jetstream: %w", err)
	}
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.AccountInfo(actx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node: JetStream did not answer (a cluster needs a quorum of its servers up): %w", err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// connect starts the embedded server, or connects to the external
// cluster, and checks that the server takes messages of
// nats.max_message_bytes: the node accepts request frames up to that size
// and bounds its replies by it, so a server with a smaller max_payload
// would drop what the node promised to take.
func (n *Node) connect() error {
	if err := n.dial(); err != nil {
		return err
	}
	if got, want := n.nc.MaxPayload(), int64(n.cfg.NATS.MaxMessageBytes); got < want {
		return fmt.Errorf("node: nats.max_message_bytes is %d but the NATS server at %s takes messages of at most %d bytes (its max_payload): lower nats.max_message_bytes to %d or less, or raise the server's max_payload",
			want, n.nc.ConnectedUrlRedacted(), got, got)
	}
	return nil
}

func (n *Node) dial() error {
	cfg := n.cfg
	ids, err := cfg.IdentitySet()
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.ids.Store(ids)
	name := nats.Name("sharedos-node-" + cfg.Node.ID)
	if len(cfg.NATS.URLs) > 0 {
		opts := []nats.Option{name, nats.MaxReconnects(-1)}
		if cfg.NATS.Credentials != "" {
			auth, err := identity.CredentialOptions(cfg.NATS.Credentials)
			if err != nil {
				return fmt.Errorf("node: nats.credentials: %w", err)
			}
			opts = append(opts, auth...)
		}
		nc, err := nats.Connect(strings.Join(cfg.NATS.URLs, ","), opts...)
		if err != nil {
			return fmt.Errorf("node: connecting to NATS %v: %w", cfg.NATS.URLs, err)
		}
		n.nc = nc
		return nil
	}
	syncEvery, err := cfg.Audit.SyncInterval()
	if err != nil {
		return err
	}
	n.credsDir = cfg.Node.CredsDir
	accounts, err := identity.Provision(n.credsDir, cfg.Bus(), ids.All())
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.accounts = accounts
	var routeUser, routePass string
	if cfg.NATS.Embedded.ClusterName != "" {
		// Routes authenticate with the secret every node's (shared)
		// credentials directory holds: a server without it cannot join.
		if routePass, err = identity.LoadOrCreateRouteSecret(n.credsDir); err != nil {
			return fmt.Errorf("node: %w", err)
		}
		routeUser = identity.RouteUser
	}
	srv, err := natsserver.Start(natsserver.Options{
		Host: cfg.NATS.Embedded.Host, Port: cfg.NATS.Embedded.Port, ServerName: "sharedos-" + cfg.Node.ID,
		// Every client authenticates as an identity, so the server may
		// listen beyond loopback when the config says so.
		AllowNonLoopback: true, Config: accounts,
		JetStream: true, StoreDir: filepath.Join(cfg.Node.DataDir, "nats"),
		SyncAlways: syncEvery == 0, SyncInterval: syncEvery,
		MaxPayload: int32(cfg.NATS.MaxMessageBytes), // config.Validate bounds it by NATS's 64 MiB
		Cluster: natsserver.Cluster{Name: cfg.NATS.Embedded.ClusterName, Host: cfg.NATS.Embedded.ClusterHost,
			Port: cfg.NATS.Embedded.ClusterPort, Routes: cfg.NATS.Embedded.Routes, Username: routeUser, Password: routePass},
		Logger: n.log,
	})
	if err != nil {
		return fmt.Errorf("node: embedded NATS: %w", err)
	}
	n.srv = srv
	nodeID := ids.OfRole(identity.Node)[0] // EffectiveIdentities always has one
	auth, err := identity.ConnectOptions(identity.SeedFile(n.credsDir, nodeID.Name))
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	nc, err := srv.ConnectInProcess(append([]nats.Option{name}, auth...)...)
	if err != nil {
		return fmt.Errorf("node: connecting to embedded NATS: %w", err)
	}
	n.nc = nc
	n.log.Info("bus identities: each party connects with its seed file", "dir", n.credsDir,
		"runtimes", names(ids.OfRole(identity.Runtime)), "audit", names(ids.OfRole(identity.Audit)), "providers", names(ids.OfRole(identity.Provider)))
	return nil
}

func names(ids []identity.Identity) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.Name
	}
	return out
}

// providerConn is the connection a hosted provider serves on: as its
// provider identity (confined to its own subjects) on the embedded
// server, opened for it (own: the caller closes it); on an external
// cluster the node's own connection.
func (n *Node) providerConn(id string) (_ *nats.Conn, own bool, _ error) {
	if n.srv == nil {
		return n.nc, false, nil
	}
	for _, pid := range n.identities().OfRole(identity.Provider) {
		if pid.Provider == id {
			nc, err := n.Connect(pid.Name)
			if err != nil {
				return nil, false, err
			}
			return nc, true, nil
		}
	}
	return nil, false, fmt.Errorf("no provider identity serves %s", id)
}

// CredentialsDir is where the embedded server's identities' seed files
// are ("" with an external cluster).
func (n *Node) CredentialsDir() string { return n.credsDir }

// Identities are the node's bus identities.
func (n *Node) Identities() *identity.Set { return n.identities() }

// identities are who may be on the bus now: the policy's, replaced when
// its identities change (internal/node/policy.go).
func (n *Node) identities() *identity.Set { return n.ids.Load() }

// Connect opens a connection to the embedded server as the identity
// named name (tests, embedders, the node's hosted providers). It is the
// caller's to close.
func (n *Node) Connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	if n.srv == nil {
		return nil, errors.New("node: Connect needs the embedded server; connect to an external cluster with that identity's credentials")
	}
	if _, ok := n.identities().Lookup(name); !ok {
		return nil, fmt.Errorf("node: no identity %q", name)
	}
	auth, err := identity.ConnectOptions(identity.SeedFile(n.credsDir, name))
	if err != nil {
		return nil, err
	}
	return n.srv.Connect(append(append([]nats.Option{nats.Name("sharedos-" + name)}, auth...), opts...)...)
}

func (n *Node) serveHTTP() error {
	if n.cfg.Node.HTTP == "off" {
		return nil
	}
	ln, err := net.Listen("tcp", n.cfg.Node.HTTP)
	if err != nil {
		return fmt.Errorf("node: http %s: %w", n.cfg.Node.HTTP, err)
	}
	bounds := httpBoundsOf(n.cfg.Node)
	if slots := connSlots(bounds.maxConns, fileLimit()); slots != bounds.maxConns {
		n.log.Warn("http: fewer connections than node.http_max_connections: at most half the descriptor limit (RLIMIT_NOFILE) goes to HTTP",
			"configured", bounds.maxConns, "slots", slots, "limit", fileLimit())
		bounds.maxConns = slots
	}
	ln = newLimitListener(ln, bounds.maxConns)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /status", n.serveStatus)
	if err := n.serveMCP(mux, ln.Addr()); err != nil {
		_ = ln.Close()
		return err
	}
	if err := n.serveConsole(mux, ln.Addr().String()); err != nil {
		_ = ln.Close()
		return err
	}
	if err := n.serveOAuth(mux); err != nil {
		_ = ln.Close()
		return err
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := n.Ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	n.httpLn = ln
	n.httpSrv = bounds.server(mux, n.log)
	go func() {
		if err := n.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("http server", "err", err)
		}
	}()
	return nil
}

// Ready is nil when the node takes work: started, not draining, connected.
func (n *Node) Ready() error {
	switch {
	case !n.ready.Load():
		return errors.New("not ready: starting or draining")
	case n.nc == nil || !n.nc.IsConnected():
		return errors.New("not ready: NATS disconnected")
	}
	return nil
}

// ReplyHeadroom is what the kernel's reply bound (actors.Options.
// MaxReplyBytes) leaves of the max payload for the NATS message's own
// headers; the kernel keeps actors.ReplyOverhead more for the reply's fields.
const ReplyHeadroom = 16 << 10

// MaxPayload is the largest message the node sends or takes:
// nats.max_message_bytes, which the embedded server's max_payload equals
// and an external server's is checked to reach at start.
func (n *Node) MaxPayload() int { return n.cfg.NATS.MaxMessageBytes }

// ClientURL is where clients reach NATS.
func (n *Node) ClientURL() string {
	if n.srv != nil {
		return n.srv.ClientURL()
	}
	return n.nc.ConnectedUrl()
}

// HTTPAddr is the bound HTTP address, or "" when off.
func (n *Node) HTTPAddr() string {
	if n.httpLn == nil {
		return ""
	}
	return n.httpLn.Addr().String()
}

// Kernel is the node's kernel.
func (n *Node) Kernel() *actors.Kernel { return n.kernel }

// Conn is the node's own NATS connection.
func (n *Node) Conn() *nats.Conn { return n.nc }

// Drain is the first half of a graceful stop: the node stops taking new
// turns (opens and turns of one operation go to the other nodes; /readyz
// answers 503) and keeps serving its open turns until they have all
// closed, timeout has passed, or ctx ends. Shutdown then closes whatever
// is still open. It returns how many turns were still open at the end.
func (n *Node) Drain(ctx context.Context, timeout time.Duration) (int, error) {
	n.ready.Store(false)
	if n.front == nil || n.kernel == nil {
		return 0, nil
	}
	if err := n.front.Drain(); err != nil {
		return 0, err
	}
	deadline := time.Now().Add(timeout)
	for {
		// Opens taken before the drain are answered first: their turns
		// are this node's to serve too.
		opening := n.front.Opening()
		open, err := n.kernel.OpenTurns(ctx)
		if err != nil || open == 0 && opening == 0 || !time.Now().Before(deadline) {
			return open, err
		}
		select {
		case <-ctx.Done():
			return open, ctx.Err()
		case <-time.After(min(50*time.Millisecond, time.Until(deadline))):
		}
	}
}

// Shutdown stops taking work, lets requests in flight finish (within ctx),
// closes every open turn (recording turn.closed), flushes the audit
// stream, and stops NATS and HTTP. Idempotent; safe on a partly started node.
func (n *Node) Shutdown(ctx context.Context) error {
	n.stopOnce.Do(func() {
		n.ready.Store(false)
		var errs []error
		if n.front != nil {
			errs = append(errs, n.front.Stop(ctx))
		}
		if n.policySvc != nil {
			n.policySvc.Stop()
		}
		n.stopContracts()
		n.stopApprovals()
		if f := n.mcpFront.Load(); f != nil {
			errs = append(errs, f.Close())
		}
		if n.kernel != nil {
			errs = append(errs, n.kernel.Shutdown(ctx))
		}
		errs = append(errs, n.stopProviders(ctx))
		n.stopOAuth()
		if n.view != nil {
			n.view.Stop()
		}
		if n.checkpoints != nil { // after the last event, before the sink closes
			errs = append(errs, n.checkpoints.Close(ctx))
		}
		if n.sink != nil {
			errs = append(errs, n.sink.Close(ctx))
		}
		if n.nc != nil {
			// A round trip first: the server has taken every reply and
			// record published before it, so stopping the embedded
			// server below cannot drop an answer still in the socket.
			if n.nc.IsConnected() {
				_ = n.nc.FlushTimeout(2 * time.Second)
			}
			n.nc.Close()
		}
		if n.srv != nil {
			n.srv.Shutdown()
		}
		if n.httpSrv != nil {
			errs = append(errs, n.httpSrv.Shutdown(ctx))
		}
		errs = append(errs, n.tracing.Shutdown(ctx)) // last: every span has ended
		n.stopErr = errors.Join(errs...)
		n.log.Info("node stopped", "err", n.stopErr)
	})
	return n.stopErr
}

// startCheckpoints starts the signed audit checkpoints (issue #6): the
// kernel's records pass through the Checkpointer on their way to the sink.
func (n *Node) startCheckpoints(ctx context.Context, opts Options) error {
	keyFile := opts.AuditKeyFile
	if keyFile == "" {
		keyFile = n.cfg.Audit.KeyFile
	}
	if keyFile == "" {
		keyFile = auditstore.DefaultKeyFile(n.cfg.Node.DataDir)
	}
	interval := opts.CheckpointInterval
	if interval == 0 {
		interval = time.Duration(n.cfg.Audit.CheckpointInterval)
	}
	key, err := auditstore.LoadOrCreateKey(keyFile)
	if err != nil {
		return fmt.Errorf("node: key: %w", err)
	}
	n.key = key
	cp, err := auditstore.StartCheckpointer(ctx, n.nc, n.sink, auditstore.CheckpointOptions{
		Node: n.cfg.Node.ID, Prefix: n.cfg.NATS.Prefix, Stream: n.cfg.Audit.Stream,
		Key: key, KeyFile: keyFile, StateFile: auditstore.DefaultStateFile(n.cfg.Node.DataDir),
		Interval: interval, Logger: n.log,
	})
	if err != nil {
		return fmt.Errorf("node: audit checkpoints: %w", err)
	}
	n.checkpoints = cp
	return nil
}
