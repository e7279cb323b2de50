package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/messages"
)

// The README's node hosts the calendar provider: a call through the node
// runs (signed with the node's key, which the hosted provider trusts with
// no set-up), and the same call sent straight to the provider's subject by
// a bus client is refused.
func TestHostedProviderRunsOnlySignedCalls(t *testing.T) {
	n := start(t, sampleConfig(t, t.TempDir()))
	defer n.Shutdown(context.Background())
	nc := connectAs(t, n, "runtime")
	turn, err := client.New(nc, nil).Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"calendar"}})
	if err != nil {
		t.Fatal(err)
	}
	args := []byte(`{"from":"2026-11-30","to":"2026-12-24"}`)
	res, err := turn.Invoke(ctx(t), "calendar_between", args)
	if err != nil || res.IsError {
		t.Fatalf("through the node: %+v %v", res, err)
	}
	if err := turn.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}

	req, err := messages.Encode(&messages.ProviderInvokeRequest{V: messages.Version, Access: messages.Access{Tenant: "acme", Principal: "ada"},
		CallID: "c1", Tool: "between", Revision: "any", Args: args, Resource: "calendar/days"})
	if err != nil {
		t.Fatal(err)
	}
	// A runtime cannot even publish to the provider's subject: the server
	// refuses it (its permissions hold the turn subjects only).
	if _, err := nc.Request(messages.ProviderInvokeSubject("sharedos", "calendar"), req, 500*time.Millisecond); err == nil {
		t.Fatal("a runtime's direct call was answered")
	}
	if err := nc.LastError(); !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("a runtime's direct call: last error %v, want a permissions violation", err)
	}
	// A node can (it is the one that calls providers), but the provider
	// still runs nothing the node did not sign.
	m, err := connectAs(t, n, "node").Request(messages.ProviderInvokeSubject("sharedos", "calendar"), req, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep messages.ProviderInvokeReply
	if err := messages.Decode(m.Data, &rep, messages.DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	if rep.Error == nil || rep.Error.Code != "invalid_request" || !strings.Contains(rep.Error.Message, "execution grant refused") || rep.Text != "" {
		t.Fatalf("a direct unsigned call: %+v %+v", rep, rep.Error)
	}
}
