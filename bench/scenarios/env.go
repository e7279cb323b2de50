package scenarios

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
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
	// Logger receives the components' logs; default: discarded.
	Logger *slog.Logger
}

// Env is what every scenario of one run shares: one embedded NATS server
// with JetStream on loopback, so floors and scenarios are measured on the
// same server. Each scenario makes its own connections, subjects (a prefix
// of its own) and stream, and removes them when it is torn down.
type Env struct {
	srv     *natsserver.Server
	opts    Options
	tempDir string
	seq     atomic.Int64
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
	return e, nil
}

// Close stops the server and removes a temporary store. Idempotent.
func (e *Env) Close() {
	e.srv.Shutdown()
	e.removeTemp()
}

func (e *Env) removeTemp() {
	if e.tempDir != "" {
		_ = os.RemoveAll(e.tempDir)
	}
}

// SyncAlways reports whether the server fsyncs every JetStream write.
func (e *Env) SyncAlways() bool { return e.opts.SyncAlways }

// prefix is a subject prefix no other scenario of this run uses.
func (e *Env) prefix() string { return fmt.Sprintf("bench%d", e.seq.Add(1)) }

// nodeConn is a node's own connection: in-process, as internal/node makes it.
func (e *Env) nodeConn(name string) (*nats.Conn, error) {
	return e.srv.ConnectInProcess(nats.Name(name))
}

// remoteConn is the connection of another process (a client, a provider): TCP on loopback.
func (e *Env) remoteConn(name string) (*nats.Conn, error) {
	return e.srv.Connect(nats.Name(name))
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
