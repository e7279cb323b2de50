package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/auditstore"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/node"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

// identityNode is the sample node with two more runtimes: "globex-rt"
// bound to tenant globex, and "acme-rt2", a second runtime of acme.
func identityNode(t *testing.T) *node.Node {
	t.Helper()
	cfg := sampleConfig(t, t.TempDir())
	cfg.Identities = append(cfg.Identities,
		config.Identity{Name: "globex-rt", Role: "runtime", Tenants: []string{"globex"}},
		config.Identity{Name: "acme-rt2", Role: "runtime", Tenants: []string{"acme"}},
	)
	n := start(t, cfg)
	t.Cleanup(func() { _ = n.Shutdown(ctx(t)) })
	return n
}

// watched connects as name and collects the server's asynchronous errors
// (permission violations arrive that way).
func watched(t *testing.T, n *node.Node, name string) (*nats.Conn, <-chan error) {
	t.Helper()
	errs := make(chan error, 16)
	nc, err := n.Connect(name, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

// refused waits for the server to refuse something on nc with a
// permissions violation naming subject.
func refused(t *testing.T, nc *nats.Conn, errs <-chan error, subject string) {
	t.Helper()
	_ = nc.FlushTimeout(5 * time.Second)
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), subject) {
			t.Fatalf("%s: got %v, want a permissions violation for it", subject, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: the server allowed it", subject)
	}
}

// Nobody reaches the node's bus without an identity.
func TestUnauthenticatedClientIsRefused(t *testing.T) {
	n := identityNode(t)
	nc, err := nats.Connect(n.ClientURL(), nats.MaxReconnects(0))
	if err == nil {
		nc.Close()
		t.Fatal("an anonymous client connected")
	}
	if !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		t.Fatalf("anonymous connect: %v", err)
	}
}

// A runtime acts only for its tenants, whatever its requests say: opens
// and one-operation requests for another tenant are refused
// tenant_forbidden, also when the runtime writes someone else's identity
// into the header the server stamps (the server overwrites it).
func TestRuntimeActsOnlyForItsTenants(t *testing.T) {
	n := identityNode(t)
	globex := client.New(connectAs(t, n, "globex-rt"), nil)
	acme := client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"text"}}

	if _, err := globex.Open(ctx(t), acme); !errors.Is(err, reason.ErrTenantForbidden) {
		t.Fatalf("globex runtime opening for acme: %v", err)
	}
	if _, err := globex.ListTools(ctx(t), acme); !errors.Is(err, reason.ErrTenantForbidden) {
		t.Fatalf("globex runtime listing for acme: %v", err)
	}
	if _, err := globex.Invoke(ctx(t), acme, "text_stats", []byte(`{"text":"a"}`)); !errors.Is(err, reason.ErrTenantForbidden) {
		t.Fatalf("globex runtime calling for acme: %v", err)
	}
	// The runtime claims to be acme's runtime in the header itself.
	req, err := messages.Encode(&messages.OpenRequest{V: messages.Version, Access: messages.Access{Tenant: "acme", Principal: "ada"}})
	if err != nil {
		t.Fatal(err)
	}
	m := &nats.Msg{Subject: messages.OpenSubject("sharedos"), Data: req, Header: nats.Header{"Nats-Request-Info": []string{`{"acc":"runtime"}`}}}
	rep, err := connectAs(t, n, "globex-rt").RequestMsg(m, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var open messages.OpenReply
	if err := messages.Decode(rep.Data, &open, messages.DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	if open.Error == nil || open.Error.Code != string(reason.TenantForbidden) || open.TurnID != "" {
		t.Fatalf("a forged identity header: %+v", open)
	}
	// acme's own runtime is served, for acme only.
	own := client.New(connectAs(t, n, "runtime"), nil)
	tr, err := own.Open(ctx(t), acme)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := own.Open(ctx(t), client.Access{Tenant: "globex", Principal: "gina"}); !errors.Is(err, reason.ErrTenantForbidden) {
		t.Fatalf("acme runtime opening for globex: %v", err)
	}
	// Each refusal is in the named tenant's trail: a turn that opened for
	// the claimed access, naming the caller, and closed tenant_forbidden.
	data, evs := readAll(t, connectAs(t, n, "auditor"))
	callers := map[string]string{}
	refusals := map[string]int{}
	for _, ev := range evs {
		switch {
		case ev.Type == audit.TurnOpened:
			callers[ev.TurnID] = ev.Caller
		case ev.Type == audit.TurnClosed && ev.Close.Reason == string(reason.TenantForbidden):
			refusals[ev.Tenant+" by "+callers[ev.TurnID]]++
		}
	}
	if refusals["acme by globex-rt"] != 4 || refusals["globex by runtime"] != 1 || len(refusals) != 2 {
		t.Fatalf("recorded refusals %v, want 4 of acme by globex-rt and 1 of globex by runtime", refusals)
	}
	if rep := audit.Verify(data, false); !rep.OK() {
		t.Fatalf("verify: %+v", rep)
	}
}

// A lease belongs to the identity that took it: another runtime of the
// same tenant, holding the turn's id, authority and lease, gets
// turn_not_found, cannot close it, and the owner carries on.
func TestLeaseIsBoundToItsIdentity(t *testing.T) {
	n := identityNode(t)
	owner, err := client.New(connectAs(t, n, "runtime"), nil).Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"text"}})
	if err != nil {
		t.Fatal(err)
	}
	thief := client.New(connectAs(t, n, "acme-rt2"), nil).Resume(owner.Handle, owner.LeaseID, owner.Access())
	if _, err := thief.ListTools(ctx(t)); !errors.Is(err, reason.ErrTurnNotFound) {
		t.Fatalf("another identity with the lease: %v", err)
	}
	if _, err := thief.Invoke(ctx(t), "text_stats", []byte(`{"text":"a"}`)); !errors.Is(err, reason.ErrTurnNotFound) {
		t.Fatalf("another identity calling with the lease: %v", err)
	}
	_ = thief.Close(ctx(t)) // releasing a lease it does not hold changes nothing
	if res, err := owner.Invoke(ctx(t), "text_stats", []byte(`{"text":"a b"}`)); err != nil || res.IsError {
		t.Fatalf("the owner after the attempts: %+v %v", res, err)
	}
	if err := owner.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}
	// The trail names who opened the turn, as the bus established it.
	_, evs := readAll(t, connectAs(t, n, "auditor"))
	for _, ev := range evs {
		if ev.Type == audit.TurnOpened && ev.TurnID == owner.Handle.TurnID {
			if ev.Caller != "runtime" {
				t.Fatalf("turn.opened names caller %q, want runtime", ev.Caller)
			}
			return
		}
	}
	t.Fatal("no turn.opened for the turn")
}

// Each role is confined to its subjects by the server.
func TestRolesAreConfinedToTheirSubjects(t *testing.T) {
	n := identityNode(t)
	for _, c := range []struct {
		name, what, subject string
		do                  func(nc *nats.Conn, subject string) error
	}{
		{"runtime", "read the audit", "sharedos.audit.live.acme.tool.invoked", sub},
		{"runtime", "forge an audit event", "sharedos.audit.live.acme.tool.invoked", pub},
		{"runtime", "use JetStream", "$JS.API.STREAM.INFO.SHAREDOS_AUDIT", pub},
		{"runtime", "answer as a provider", "sharedos.provider.calendar.invoke", sub},
		{"auditor-acme", "answer as a provider", "sharedos.provider.calendar.invoke", sub},
		{"provider-calendar", "serve another provider", "sharedos.provider.notes.invoke", sub},
		{"provider-calendar", "forge an audit segment", "sharedos.audit.seg.acme", pub},
		{"provider-calendar", "open a turn", "sharedos.turn.open", pub},
		{"provider-calendar", "call a provider", "sharedos.provider.calendar.invoke", pub},
		{"auditor-acme", "watch another tenant", "sharedos.audit.live.globex.tool.invoked", sub},
		{"auditor-acme", "read the stream's info", "$JS.API.STREAM.INFO.SHAREDOS_AUDIT", pub},
		{"auditor-acme", "get a message directly", "$JS.API.DIRECT.GET.SHAREDOS_AUDIT", pub},
		{"auditor-acme", "read another tenant's segments", "$JS.API.CONSUMER.CREATE.SHAREDOS_AUDIT.x.sharedos.audit.seg.globex", pub},
		{"auditor-acme", "pull from a consumer", "$JS.API.CONSUMER.MSG.NEXT.SHAREDOS_AUDIT.export", pub},
		{"auditor-acme", "write to the stream", "sharedos.audit.seg.acme", pub},
		{"auditor", "write to the stream", "sharedos.audit.seg.acme", pub},
		{"auditor", "delete the stream", "$JS.API.STREAM.DELETE.SHAREDOS_AUDIT", pub},
	} {
		t.Run(c.name+" may not "+c.what, func(t *testing.T) {
			nc, errs := watched(t, n, c.name)
			if err := c.do(nc, c.subject); err != nil {
				t.Fatal(err)
			}
			refused(t, nc, errs, c.subject)
		})
	}
	// What the roles are for still works.
	nc, errs := watched(t, n, "auditor-acme")
	if _, err := nc.SubscribeSync("sharedos.audit.live.acme.>"); err != nil {
		t.Fatal(err)
	}
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		t.Fatalf("acme's reader watching acme: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
}

func sub(nc *nats.Conn, subject string) error {
	_, err := nc.SubscribeSync(subject)
	return err
}

func pub(nc *nats.Conn, subject string) error {
	return nc.PublishRequest(subject, nc.NewRespInbox(), []byte("{}"))
}

// A runtime identity's call rate is its own, across every principal it
// acts for.
func TestRuntimeIdentityRateLimit(t *testing.T) {
	cfg := sampleConfig(t, t.TempDir())
	for i := range cfg.Identities {
		if cfg.Identities[i].Name == "runtime" {
			cfg.Identities[i].CallRate = config.Rate{PerSecond: 0.001, Burst: 1}
		}
	}
	n := start(t, cfg)
	t.Cleanup(func() { _ = n.Shutdown(ctx(t)) })
	c := client.New(connectAs(t, n, "runtime"), nil)
	ada, err := c.Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"text"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ada.Invoke(ctx(t), "text_stats", []byte(`{"text":"a"}`)); err != nil {
		t.Fatal(err)
	}
	bob, err := c.Open(ctx(t), client.Access{Tenant: "acme", Principal: "bob", Namespaces: []string{"notes"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bob.Invoke(ctx(t), "notes_get", []byte(`{"space":"acme","title":"x"}`))
	var re *reason.Error
	if !errors.As(err, &re) || re.Code != reason.RateLimited || re.RetryAfter <= 0 {
		t.Fatalf("the identity's second call (another principal): %v", err)
	}
}

// An audit reader of acme reads acme's trail, and only it: through a push
// consumer pinned to acme's segments; another tenant's filter is refused
// by the server, so the read gets nothing.
func TestTenantAuditReaderReadsItsTenantOnly(t *testing.T) {
	n := identityNode(t)
	own := client.New(connectAs(t, n, "runtime"), nil)
	tr, err := own.Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"text"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Invoke(ctx(t), "text_stats", []byte(`{"text":"a"}`)); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}
	// A globex turn of one operation, for another tenant's records.
	if _, err := client.New(connectAs(t, n, "globex-rt"), nil).ListTools(ctx(t), client.Access{Tenant: "globex", Principal: "gina"}); err != nil {
		t.Fatal(err)
	}

	reader := connectAs(t, n, "auditor-acme")
	var types []audit.Type
	err = auditstore.ReadAll(ctx(t), reader, auditstore.TailOptions{Filter: auditstore.TailFilter{Tenant: "acme"}, Push: true}, func(_ []byte, ev *audit.Event) error {
		if ev == nil || ev.Tenant != "acme" {
			t.Fatalf("acme's reader got %+v", ev)
		}
		types = append(types, ev.Type)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(types) < 5 || types[0] != audit.TurnOpened || types[len(types)-1] != audit.TurnClosed {
		t.Fatalf("acme's reader read %v", types)
	}
	short, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err = auditstore.ReadAll(short, reader, auditstore.TailOptions{Filter: auditstore.TailFilter{Tenant: "globex"}, Push: true}, func([]byte, *audit.Event) error {
		t.Fatal("acme's reader got a globex record")
		return nil
	})
	if err == nil {
		t.Fatal("acme's reader read globex's trail")
	}
	// The pull path (ordered consumers, stream info) is closed to it too
	// (a read of its own: the one above spent short).
	short, cancel = context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err = auditstore.ReadAll(short, reader, auditstore.TailOptions{Filter: auditstore.TailFilter{Tenant: "acme"}}, func([]byte, *audit.Event) error { return nil })
	if err == nil {
		t.Fatal("acme's reader read through a pull consumer")
	}
}
