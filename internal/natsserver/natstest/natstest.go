// Package natstest starts a real embedded NATS server for tests. It is the
// only place that imports "testing" around natsserver, so production
// binaries that import natsserver do not link the testing package.
package natstest

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/internal/natsserver"
)

// Start starts a loopback server on a random port (with JetStream file
// storage in t.TempDir() when jetstream is true) and a TCP connection to it.
// Cleanup closes the connection and then shuts the server down. It calls
// t.Fatal if anything fails.
func Start(t testing.TB, jetstream bool) (*natsserver.Server, *nats.Conn) {
	t.Helper()
	return StartWithOptions(t, natsserver.Options{JetStream: jetstream})
}

// StartWithOptions is Start with full control over the options. When
// opts.JetStream is set and opts.StoreDir is empty, StoreDir becomes
// t.TempDir().
func StartWithOptions(t testing.TB, opts natsserver.Options) (*natsserver.Server, *nats.Conn) {
	t.Helper()
	if opts.JetStream && opts.StoreDir == "" {
		opts.StoreDir = t.TempDir()
	}
	srv, err := natsserver.Start(opts)
	if err != nil {
		t.Fatalf("natstest: start embedded NATS server: %v", err)
	}
	// Cleanups run last-in first-out: the connection closes before the
	// server shuts down, so the client does not start reconnecting.
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect(nats.Name("natstest:" + t.Name()))
	if err != nil {
		t.Fatalf("natstest: connect to embedded NATS server: %v", err)
	}
	t.Cleanup(nc.Close)
	return srv, nc
}
