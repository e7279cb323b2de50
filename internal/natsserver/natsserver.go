package natsserver

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Defaults applied by Start to zero-valued Options fields.
const (
	DefaultHost       = "127.0.0.1"
	DefaultServerName = "sharedos-embedded"
	DefaultMaxPayload = int32(server.MAX_PAYLOAD_SIZE) // 1 MiB, the nats-server default
	// MaxPayloadLimit is the largest MaxPayload: nats-server refuses a
	// max_payload above its max_pending, 64 MiB by default.
	MaxPayloadLimit     = int32(server.MAX_PENDING_SIZE)
	DefaultReadyTimeout = 10 * time.Second
	// DefaultClientName is the connection name Connect and ConnectInProcess
	// give their connections unless the caller passes nats.Name.
	DefaultClientName = "sharedos-embedded-client"
	// DefaultSyncInterval is how often nats-server fsyncs JetStream file
	// storage when SyncAlways is off (its defaultSyncInterval). Exposed for
	// documentation; it is not configurable through Options.
	DefaultSyncInterval = 2 * time.Minute
)

// Errors returned by this package. Errors from Validate match
// ErrInvalidOptions and, where it applies, a more specific error below;
// errors from Start match ErrInvalidOptions, ErrStartFailed or ErrNotReady.
var (
	// ErrInvalidOptions is matched by every error Options.Validate returns.
	ErrInvalidOptions = errors.New("natsserver: invalid options")
	// ErrNonLoopbackHost: Host is not a loopback address and
	// AllowNonLoopback is not set.
	ErrNonLoopbackHost = errors.New("non-loopback host")
	// ErrStoreDirRequired: JetStream is enabled without a StoreDir.
	ErrStoreDirRequired = errors.New("StoreDir is required when JetStream is enabled")
	// ErrStartFailed: nats-server rejected the configuration or reported a
	// fatal error while starting (port in use, JetStream store unusable...).
	ErrStartFailed = errors.New("natsserver: server failed to start")
	// ErrNotReady: the server did not become ready for connections within
	// Options.ReadyTimeout.
	ErrNotReady = errors.New("natsserver: server not ready for connections")
	// ErrServerShutdown: Connect or ConnectInProcess was called after
	// Shutdown.
	ErrServerShutdown = errors.New("natsserver: server is shut down")
)

// Options configures an embedded server. The zero value is a loopback server
// on a random port without JetStream.
type Options struct {
	// Host is the address the client listener binds to. Default
	// "127.0.0.1". Validate refuses anything that is not a loopback address
	// (127.0.0.0/8, ::1, "localhost") unless AllowNonLoopback is set.
	Host string
	// AllowNonLoopback permits a non-loopback Host. The embedded server has
	// no authentication: only set this on a trusted network.
	AllowNonLoopback bool
	// Port is the client port. 0 (and -1, server.RANDOM_PORT) picks a
	// random free port; note that in nats-server's own Options 0 would mean
	// 4222. ClientURL reports the bound port.
	Port int
	// ServerName defaults to "sharedos-embedded". It may not contain spaces.
	ServerName string
	// JetStream enables JetStream with file storage under StoreDir.
	JetStream bool
	// StoreDir is the JetStream storage root (data goes to
	// <StoreDir>/jetstream). Required when JetStream is set; ignored
	// otherwise.
	StoreDir string
	// SyncAlways makes JetStream fsync file storage on every write. Without
	// it nats-server fsyncs only every 2 minutes (DefaultSyncInterval), so a
	// machine crash (not a process crash) can lose up to two minutes of
	// acknowledged messages. The setting is server-wide; see the package
	// documentation.
	SyncAlways bool
	// SyncInterval, when SyncAlways is off, replaces the 2-minute default:
	// a machine crash can lose at most this much acknowledged data, and
	// writes in between are flushed together (far higher throughput than
	// SyncAlways). 0 keeps the nats-server default.
	SyncInterval time.Duration
	// MaxPayload is the largest message the server accepts (headers and
	// data). 0 means the nats-server default of 1 MiB (DefaultMaxPayload);
	// at most MaxPayloadLimit (64 MiB).
	MaxPayload int32
	// ReadyTimeout bounds how long Start waits for the server to accept
	// connections. Default 10s.
	ReadyTimeout time.Duration
	// Logger receives the server's log output at matching slog levels (see
	// the package documentation). nil discards it.
	Logger *slog.Logger
	// Cluster joins the server to others by routes (JetStream then runs
	// clustered: replicated streams, leaders elected by NATS). Zero:
	// standalone.
	Cluster Cluster
	// Config is nats-server configuration text (for example the accounts,
	// users and permissions of internal/identity.ServerConfig) applied
	// before the fields above, which take precedence. Empty: no
	// authentication.
	Config string
}

// Cluster is the route listener and the routes to the cluster's other
// servers.
type Cluster struct {
	// Name is the cluster's name (the same on every server). Empty: no
	// cluster.
	Name string
	// Host and Port are this server's route listener.
	Host string
	Port int
	// Routes are the other servers' route URLs ("nats-route://host:port").
	Routes []string
	// Username and Password, when set, authenticate routes: the route
	// listener refuses a server that does not present them, and this
	// server presents them on every route it opens (the listed ones and
	// those it learns by gossip). Both or neither.
	Username, Password string
}

// Validate reports whether the options can be used to start a server. It
// does not touch the network or the file system.
func (o Options) Validate() error {
	host := o.Host
	if host == "" {
		host = DefaultHost
	}
	if !o.AllowNonLoopback && !isLoopbackHost(host) {
		return fmt.Errorf("%w: %w: %q is not a loopback address; the embedded server has no authentication, set AllowNonLoopback to listen beyond this machine",
			ErrInvalidOptions, ErrNonLoopbackHost, host)
	}
	if o.Port < server.RANDOM_PORT || o.Port > 65535 {
		return fmt.Errorf("%w: port %d out of range (0 or -1 for a random port, else 1-65535)", ErrInvalidOptions, o.Port)
	}
	if strings.ContainsAny(o.ServerName, " \t\r\n") {
		return fmt.Errorf("%w: server name %q contains whitespace", ErrInvalidOptions, o.ServerName)
	}
	if o.JetStream && o.StoreDir == "" {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, ErrStoreDirRequired)
	}
	if o.MaxPayload < 0 || o.MaxPayload > MaxPayloadLimit {
		return fmt.Errorf("%w: MaxPayload %d out of range (0 for the default, else 1-%d)", ErrInvalidOptions, o.MaxPayload, MaxPayloadLimit)
	}
	if c := o.Cluster; c.Name != "" {
		if c.Port <= 0 || c.Port > 65535 {
			return fmt.Errorf("%w: cluster %s: route port %d out of range", ErrInvalidOptions, c.Name, c.Port)
		}
		for _, r := range c.Routes {
			if _, err := url.Parse(r); err != nil {
				return fmt.Errorf("%w: cluster %s: route %q: %w", ErrInvalidOptions, c.Name, r, err)
			}
		}
		if (c.Username == "") != (c.Password == "") {
			return fmt.Errorf("%w: cluster %s: route Username and Password go together", ErrInvalidOptions, c.Name)
		}
	}
	if o.Config != "" {
		if err := new(server.Options).ProcessConfigString(o.Config); err != nil {
			return fmt.Errorf("%w: server configuration: %w", ErrInvalidOptions, err)
		}
	}
	if o.ReadyTimeout < 0 {
		return fmt.Errorf("%w: negative ReadyTimeout %s", ErrInvalidOptions, o.ReadyTimeout)
	}
	return nil
}

// isLoopbackHost reports whether host is a loopback IP literal or
// "localhost". Other names are not resolved.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// withDefaults returns o with zero-valued fields replaced by defaults.
func (o Options) withDefaults() Options {
	if o.Host == "" {
		o.Host = DefaultHost
	}
	if o.ServerName == "" {
		o.ServerName = DefaultServerName
	}
	if o.MaxPayload == 0 {
		o.MaxPayload = DefaultMaxPayload
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
	return o
}

// serverOptions translates o (with defaults applied) to nats-server options.
func (o Options) serverOptions() *server.Options {
	port := o.Port
	if port == 0 {
		port = server.RANDOM_PORT // nats-server: 0 means 4222, -1 means random
	}
	sopts := &server.Options{}
	if o.Config != "" {
		// Checked by Validate; any error here was reported there.
		_ = sopts.ProcessConfigString(o.Config)
	}
	sopts.ServerName = o.ServerName
	sopts.Host = o.Host
	sopts.Port = port
	sopts.NoSigs = true // the node owns signal handling
	sopts.NoLog = true  // logging goes through our slog adapter only
	sopts.MaxPayload = o.MaxPayload
	if c := o.Cluster; c.Name != "" {
		sopts.Cluster.Name = c.Name
		sopts.Cluster.Host = cmp.Or(c.Host, o.Host)
		sopts.Cluster.Port = c.Port
		sopts.Cluster.Username, sopts.Cluster.Password = c.Username, c.Password
		for _, r := range c.Routes {
			if u, err := url.Parse(r); err == nil { // checked by Validate
				if c.Username != "" {
					u.User = url.UserPassword(c.Username, c.Password)
				}
				sopts.Routes = append(sopts.Routes, u)
			}
		}
	}
	if o.JetStream {
		sopts.JetStream = true
		sopts.StoreDir = o.StoreDir
		sopts.SyncAlways = o.SyncAlways
		if !o.SyncAlways && o.SyncInterval > 0 {
			sopts.SyncInterval = o.SyncInterval
		}
	}
	return sopts
}

// Server is a running embedded NATS server.
type Server struct {
	ns        *server.Server
	opts      Options // with defaults applied
	clientURL string
	stopped   atomic.Bool
	reloadMu  sync.Mutex
}

// Start validates opts, starts the server and waits until it accepts client
// connections (and JetStream is up, if requested). On failure nothing is
// left running.
func Start(opts Options) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()

	ns, err := server.NewServer(opts.serverOptions())
	if err != nil {
		return nil, fmt.Errorf("%w: configuring server %q: %w", ErrStartFailed, opts.ServerName, err)
	}
	lg := newServerLogger(opts.Logger, opts.ServerName)
	ns.SetLoggerV2(lg, lg.debugEnabled(), lg.traceEnabled(), false)

	// server.Start returns once the client listener is up, or right after
	// it logged a fatal error. Run it in a goroutine so a hung start (for
	// example a slow JetStream recovery) is bounded by ReadyTimeout.
	startDone := make(chan struct{})
	go func() {
		defer close(startDone)
		ns.Start()
	}()

	fail := func(err error) (*Server, error) {
		ns.Shutdown()
		ns.WaitForShutdown()
		select {
		case <-startDone:
		case <-time.After(5 * time.Second):
			// server.Start did not return after Shutdown; nothing more we
			// can do without leaking the caller's time.
		}
		return nil, err
	}

	deadline := time.Now().Add(opts.ReadyTimeout)
	timer := time.NewTimer(opts.ReadyTimeout)
	defer timer.Stop()
	select {
	case <-startDone:
	case msg := <-lg.fatal:
		return fail(fmt.Errorf("%w: %s", ErrStartFailed, msg))
	case <-timer.C:
		return fail(fmt.Errorf("%w: start did not complete within %s", ErrNotReady, opts.ReadyTimeout))
	}
	select {
	case msg := <-lg.fatal:
		return fail(fmt.Errorf("%w: %s", ErrStartFailed, msg))
	default:
	}
	if !ns.ReadyForConnections(max(time.Until(deadline), 100*time.Millisecond)) {
		return fail(fmt.Errorf("%w: not accepting connections within %s", ErrNotReady, opts.ReadyTimeout))
	}
	if opts.JetStream && !ns.JetStreamEnabled() {
		return fail(fmt.Errorf("%w: JetStream was requested but is not enabled", ErrStartFailed))
	}

	s := &Server{ns: ns, opts: opts, clientURL: ns.ClientURL()}
	// Read the port back from the listener: with a random port,
	// nats-server only learns it when it binds.
	if addr, ok := ns.Addr().(*net.TCPAddr); ok && addr != nil {
		u := url.URL{Scheme: "nats", Host: net.JoinHostPort(opts.Host, strconv.Itoa(addr.Port))}
		s.clientURL = u.String()
	}
	return s, nil
}

// ClientURL returns the nats:// URL clients connect to, with the bound port.
func (s *Server) ClientURL() string { return s.clientURL }

// Routes is how many routes to other servers are up.
func (s *Server) Routes() int { return s.ns.NumRoutes() }

// MaxPayload is the largest message the server accepts.
func (s *Server) MaxPayload() int32 { return s.opts.MaxPayload }

// JetStreamEnabled reports whether JetStream is running on this server.
func (s *Server) JetStreamEnabled() bool { return s.ns.JetStreamEnabled() }

// Connect dials the server over TCP. The connection is named
// DefaultClientName unless opts contains nats.Name.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	if s.stopped.Load() {
		return nil, ErrServerShutdown
	}
	all := append([]nats.Option{nats.Name(DefaultClientName)}, opts...)
	nc, err := nats.Connect(s.clientURL, all...)
	if err != nil {
		return nil, fmt.Errorf("natsserver: connect to %s: %w", s.clientURL, err)
	}
	return nc, nil
}

// ConnectInProcess connects through an in-memory pipe
// (nats.InProcessServer) instead of TCP; reconnects use the pipe as well.
// The connection is named DefaultClientName unless opts contains nats.Name.
func (s *Server) ConnectInProcess(opts ...nats.Option) (*nats.Conn, error) {
	if s.stopped.Load() {
		return nil, ErrServerShutdown
	}
	all := append([]nats.Option{nats.Name(DefaultClientName)}, opts...)
	all = append(all, nats.InProcessServer(s.ns))
	nc, err := nats.Connect(s.clientURL, all...)
	if err != nil {
		return nil, fmt.Errorf("natsserver: in-process connect: %w", err)
	}
	return nc, nil
}

// Reload applies new configuration text (Options.Config: accounts, users
// and their permissions) to the running server, everything else as it
// started. A user the new text no longer has, or has under another key,
// is disconnected by the server; a user whose permissions changed keeps
// its connection under the new permissions. Reload is serialized with
// itself; it must not be called after Shutdown.
func (s *Server) Reload(config string) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if s.stopped.Load() {
		return ErrServerShutdown
	}
	o := s.opts
	o.Config = config
	if err := o.Validate(); err != nil {
		return err
	}
	sopts := o.withDefaults().serverOptions()
	// The listeners keep the ports they bound (a random port is not
	// chosen again).
	if addr, ok := s.ns.Addr().(*net.TCPAddr); ok && addr != nil {
		sopts.Port = addr.Port
	}
	if c := s.ns.ClusterAddr(); c != nil {
		sopts.Cluster.Port = c.Port
	}
	// nats-server checks a new account's imports against the exports as
	// they were before the reload, so an account added together with the
	// export naming it gets no import; applied a second time, the exports
	// already name it and its imports are wired. Text without a new
	// account is applied once: each application walks every client, and
	// nats-server v2.15 reads a client's CONNECT options there without
	// the client's lock, so a client connecting during a reload races it
	// (docs/operations.md); one walk is half that window.
	passes := 1
	if s.addsAccount(sopts) {
		passes = 2
	}
	for range passes {
		if err := s.ns.ReloadOptions(sopts); err != nil {
			return fmt.Errorf("natsserver: reload: %w", err)
		}
	}
	s.opts.Config = config
	return nil
}

// addsAccount reports whether sopts names an account the running server
// does not have.
func (s *Server) addsAccount(sopts *server.Options) bool {
	for _, a := range sopts.Accounts {
		if _, err := s.ns.LookupAccount(a.Name); err != nil {
			return true
		}
	}
	return false
}

// Shutdown stops the server and returns once it has fully stopped. It is
// idempotent and safe to call from several goroutines at once: every call
// returns only after the shutdown is complete. Client connections are
// closed by the server; close your *nats.Conn values too, or they keep
// trying to reconnect.
func (s *Server) Shutdown() {
	if s == nil || s.ns == nil {
		return
	}
	s.stopped.Store(true)
	s.ns.Shutdown() // no-op after the first call
	s.ns.WaitForShutdown()
}
