package node_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/reason"
)

// With the audit stream gone, a call from the Go client (which resends a
// call whose answer is late, under the same request id) is answered
// audit_unavailable naming the call it decided: the answer of the call
// itself, not a refusal of one of its resends, and not turn_closed.
func TestCallWithTheStreamGoneIsAuditUnavailable(t *testing.T) {
	cfg := sampleConfig(t, t.TempDir())
	cfg.Audit.AckTimeout = config.Duration(500 * time.Millisecond)
	cfg.Audit.RetryWindow = config.Duration(3 * time.Second) // past the client's first resend (2 s)
	n, _ := startConnected(t, cfg)
	c := client.New(connectAs(t, n, "runtime"), nil)
	turn, err := c.Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"text"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := turn.Invoke(ctx(t), "text_stats", []byte(`{"text":"a b"}`)); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(n.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx(t), cfg.Audit.Stream); err != nil {
		t.Fatal(err)
	}
	_, err = turn.Invoke(ctx(t), "text_stats", []byte(`{"text":"c d"}`))
	var ce *client.CallError
	if !errors.Is(err, reason.ErrAuditUnavailable) || !errors.As(err, &ce) || ce.Reply == nil || ce.Reply.CallID == "" {
		t.Fatalf("a call with the stream gone: %v, want audit_unavailable naming its call", err)
	}
	if d := ce.Reply.Dispatched; d == nil || *d {
		t.Fatal("the call is reported dispatched although its tool.invoked was never stored")
	}
}
