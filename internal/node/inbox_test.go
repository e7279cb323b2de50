package node_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/client"
)

// Which inbox prefix each role needs (docs/security.md, "Connecting as an
// identity"): a runtime works with the client library's default _INBOX; an
// audit reader receives only under _INBOX_<name>, so with the default its
// replies are refused and with its own prefix its JetStream requests are
// answered; a provider may subscribe to no inbox at all (it never asks
// anything), so it needs none.
func TestInboxPrefixEachRoleNeeds(t *testing.T) {
	n := identityNode(t)

	rt, err := n.Connect("runtime", nats.CustomInboxPrefix("_INBOX"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	turn, err := client.New(rt, nil).Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"text"}})
	if err != nil {
		t.Fatalf("a runtime with the default inbox prefix: %v", err)
	}
	if err := turn.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}

	for _, reader := range []string{"auditor", "auditor-acme"} {
		t.Run(reader, func(t *testing.T) {
			errs := make(chan error, 16)
			nc, err := n.Connect(reader, nats.CustomInboxPrefix("_INBOX"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				select {
				case errs <- err:
				default:
				}
			}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			if err := sub(nc, nc.NewRespInbox()); err != nil {
				t.Fatal(err)
			}
			refused(t, nc, errs, "_INBOX.")
		})
	}
	own := connectAs(t, n, "auditor") // _INBOX_auditor
	if _, err := own.Request("$JS.API.STREAM.INFO.SHAREDOS_AUDIT", nil, 10*time.Second); err != nil {
		t.Fatalf("the all-tenant reader with its own inbox prefix: %v", err)
	}

	for _, inbox := range []string{"_INBOX.x", "_INBOX_provider-calendar.x"} {
		nc, errs := watched(t, n, "provider-calendar")
		if err := sub(nc, inbox); err != nil {
			t.Fatal(err)
		}
		refused(t, nc, errs, inbox)
	}
}
