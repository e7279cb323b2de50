package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/sharedos/sharedos/internal/natsserver"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStartCore(t *testing.T) {
	srv, nc := Start(t, false)
	if srv.JetStreamEnabled() {
		t.Fatal("JetStream enabled on a core-only server")
	}
	sub, err := nc.Subscribe("svc.ping", func(m *nats.Msg) { _ = m.Respond([]byte("pong")) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	reply, err := nc.Request("svc.ping", nil, 2*time.Second)
	if err != nil {
		t.Fatalf("Request: %v", err)
	}
	if string(reply.Data) != "pong" {
		t.Fatalf("reply = %q", reply.Data)
	}
}

func TestStartJetStream(t *testing.T) {
	srv, nc := Start(t, true)
	if !srv.JetStreamEnabled() {
		t.Fatal("JetStream not enabled")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	if _, err := js.Publish(ctx, "t.x", []byte("x")); err != nil {
		t.Fatalf("Publish: %v", err)
	}
}

// The cleanup registered by Start must leave no goroutines behind even when
// the test itself never closes anything; goleak in TestMain checks that
// across all tests, this subtest makes the order of cleanups observable.
func TestCleanupShutsDown(t *testing.T) {
	var srv *natsserver.Server
	var nc *nats.Conn
	t.Run("inner", func(t *testing.T) {
		srv, nc = Start(t, true)
	})
	if !nc.IsClosed() {
		t.Error("connection still open after the subtest's cleanup")
	}
	if _, err := srv.Connect(); err == nil {
		t.Error("server still accepting connections after the subtest's cleanup")
	}
}
