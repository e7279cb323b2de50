package busrpc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/internal/busrpc"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
	"github.com/sharedos/sharedos/reason"
)

var svc = busrpc.Service{Name: "the test service", Role: "a tester"}

func TestCallDecodesTheAnswerAndNamesAMissingService(t *testing.T) {
	_, nc := natstest.Start(t, false)
	ctx := context.Background()
	var rep struct{ Echo string }
	err := busrpc.Call(ctx, nc, svc, "svc.none", time.Second, map[string]string{"echo": "x"}, &rep)
	if !errors.Is(err, reason.ErrNodeUnavailable) {
		t.Fatalf("no responder: %v, want node_unavailable", err)
	}
	sub, err := nc.Subscribe("svc.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := busrpc.Call(ctx, nc, svc, "svc.echo", time.Second, map[string]string{"echo": "x"}, &rep); err != nil || rep.Echo != "x" {
		t.Fatalf("echo: %+v %v", rep, err)
	}
	bad, err := nc.Subscribe("svc.bad", func(m *nats.Msg) { _ = m.Respond([]byte("{not json")) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = bad.Unsubscribe() }()
	if err := busrpc.Call(ctx, nc, svc, "svc.bad", time.Second, struct{}{}, &rep); err == nil {
		t.Fatal("an undecodable answer was accepted")
	}
}
