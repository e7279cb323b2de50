package scenarios

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/internal/natsserver"
)

// Options configure an Env. The zero value is usable.
type Options struct {
	// StoreDir is the JetStream store; default a temporary directory,
	// removed by Close.
	StoreDir string
	// SyncAlways makes JetStream fsync every write, as a node's embedded
	// server does. Off by default: then the server fsyncs every two
	// minutes, and acked audit measures the stream, not the disk (see
	// docs/performance.md).
	SyncAlways bool
	// CommitsInFlight is the audit writer's depth (audit.commits_in_flight);
	// 0: its default.
	CommitsInFlight int
	// AwaitCompletion makes a call's answer wait for its tool.completed
	// (audit.await_completion).
	AwaitCompletion bool
	// Logger receives the components' logs; default: discarded.
	Logger *slog.Logger
}

// Env is what every scenario of one run shares: one embedded NATS server
// with JetStream on loopback, so floors and scenarios are measured on the
// same server. Each scenario makes its own connections, subjects (a prefix
// of its own) and stream, and removes them when it is torn down.
//
// Scenarios that measure audit with sync always on a run whose server does
// not fsync every write (the default) get a second server that does,
// started the first time one asks for it; see server.
type Env struct {
	srv     *natsserver.Server
	opts    Options
	tempDir string
	seq     atomic.Int64

	syncMu      sync.Mutex
	syncSrv     *natsserver.Server // nil until a sync scenario runs
	syncTempDir string
}

// Start starts the server.
func Start(opts Options) (*Env, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Env{opts: opts}
	if opts.StoreDir == "" {
		dir, err := os.MkdirTemp("", "sharedos-bench-")
		if err != nil {
			return nil, err
		}
		e.tempDir, e.opts.StoreDir = dir, dir
	}
	srv, err := natsserver.Start(natsserver.Options{
		ServerName: "sharedos-bench", JetStream: true, StoreDir: e.opts.StoreDir, SyncAlways: opts.SyncAlways,
		MaxPayload: 8 << 20,
	})
	if err != nil {
		e.removeTemp()
		return nil, fmt.Errorf("scenarios: starting NATS: %w", err)
	}
	e.srv = srv
	if err := anchorStream(srv); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// anchorStream creates a file stream that lives as long as the server.
// nats-server (v2.15.2, stream.go) removes the account's empty streams
// directory in a goroutine after a stream is deleted; a stream created at
// that moment can find its parent gone mid-MkdirAll and is refused "error
// creating store for stream" (seen in CI when one scenario's stream was
// deleted as the next one's was created). With a stream that is never
// deleted, the directory is never empty and never removed.
func anchorStream(srv *natsserver.Server) error {
	nc, err := srv.ConnectInProcess(nats.Name("bench-anchor"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "BENCH_ANCHOR", Subjects: []string{"bench-anchor"}, Storage: jetstream.FileStorage,
	}); err != nil {
		return fmt.Errorf("scenarios: creating the anchor stream: %w", err)
	}
	return nil
}

// Close stops the servers and removes temporary stores. Idempotent.
func (e *Env) Close() {
	e.srv.Shutdown()
	e.syncMu.Lock()
	if e.syncSrv != nil {
		e.syncSrv.Shutdown()
	}
	if e.syncTempDir != "" {
		_ = os.RemoveAll(e.syncTempDir)
	}
	e.syncMu.Unlock()
	e.removeTemp()
}

func (e *Env) removeTemp() {
	if e.tempDir != "" {
		_ = os.RemoveAll(e.tempDir)
	}
}

// server is the run's server, or with sync one whose JetStream fsyncs
// every write: the run's own when it does (Options.SyncAlways), else a
// second one on the same machine with its own store, started on first use.
func (e *Env) server(sync bool) (*natsserver.Server, error) {
	if !sync || e.opts.SyncAlways {
		return e.srv, nil
	}
	e.syncMu.Lock()
	defer e.syncMu.Unlock()
	if e.syncSrv != nil {
		return e.syncSrv, nil
	}
	dir, err := os.MkdirTemp("", "sharedos-bench-sync-")
	if err != nil {
		return nil, err
	}
	srv, err := natsserver.Start(natsserver.Options{
		ServerName: "sharedos-bench-sync", JetStream: true, StoreDir: dir, SyncAlways: true,
		MaxPayload: 8 << 20,
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("scenarios: starting the sync_always NATS server: %w", err)
	}
	if err := anchorStream(srv); err != nil {
		srv.Shutdown()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	e.syncSrv, e.syncTempDir = srv, dir
	return srv, nil
}

// SyncAlways reports whether the server fsyncs every JetStream write.
func (e *Env) SyncAlways() bool { return e.opts.SyncAlways }

// prefix is a subject prefix no other scenario of this run uses.
func (e *Env) prefix() string { return fmt.Sprintf("bench%d", e.seq.Add(1)) }

// nodeConn is a node's own connection: in-process, as internal/node makes it.
func (e *Env) nodeConn(name string) (*nats.Conn, error) { return e.nodeConnOn(false, name) }

// remoteConn is the connection of another process (a client, a provider): TCP on loopback.
func (e *Env) remoteConn(name string) (*nats.Conn, error) { return e.remoteConnOn(false, name) }

// nodeConnOn is nodeConn on server(sync).
func (e *Env) nodeConnOn(sync bool, name string) (*nats.Conn, error) {
	srv, err := e.server(sync)
	if err != nil {
		return nil, err
	}
	return srv.ConnectInProcess(nats.Name(name))
}

// remoteConnOn is remoteConn on server(sync).
func (e *Env) remoteConnOn(sync bool, name string) (*nats.Conn, error) {
	srv, err := e.server(sync)
	if err != nil {
		return nil, err
	}
	return srv.Connect(nats.Name(name))
}

// closer collects teardown steps and runs them in reverse order.
type closer []func(ctx context.Context) error

func (c *closer) add(f func(ctx context.Context) error) { *c = append(*c, f) }

func (c *closer) addConn(nc *nats.Conn) {
	c.add(func(context.Context) error { nc.Close(); return nil })
}

func (c closer) close(ctx context.Context) error {
	var errs []error
	for i := len(c) - 1; i >= 0; i-- {
		errs = append(errs, c[i](ctx))
	}
	return errors.Join(errs...)
}

// deleteStream removes a scenario's stream (and its stored records).
func deleteStream(nc *nats.Conn, name string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("deleting stream %s: %w", name, err)
		}
		return nil
	}
}
