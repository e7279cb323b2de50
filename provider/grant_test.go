package provider_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/internal/natsserver/natstest"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/provider"
	"github.com/sharedos/sharedos/reason"
)

// recorder is a provider whose tools record every call their handlers run.
type recorder struct {
	mu    sync.Mutex
	calls []provider.Call
	// byPrincipal: each principal is offered a different contract of
	// "echo" (its description names the principal).
	byPrincipal bool
}

func (r *recorder) Tools(_ context.Context, a provider.Access) ([]provider.Tool, error) {
	h := func(_ context.Context, call provider.Call) (provider.Result, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.calls = append(r.calls, call)
		return provider.Result{Text: "ran " + call.Tool + " for " + call.Access.Principal}, nil
	}
	desc := "echo"
	if r.byPrincipal {
		desc = "echo for " + a.Principal
	}
	return []provider.Tool{tool("echo", desc, h), tool("other", "other", h)}, nil
}

func (r *recorder) ran() []provider.Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]provider.Call(nil), r.calls...)
}

// direct is a bus client that talks to a provider's subjects itself, as
// any process on the bus can.
type direct struct {
	t     *testing.T
	nc    *nats.Conn
	id    string
	token map[string]string // tool → revision advertised to ada
}

func newDirect(t *testing.T, nc *nats.Conn, id string) *direct {
	d := &direct{t: t, nc: nc, id: id, token: map[string]string{}}
	cat, err := providers.NewRemote(nc, id, "sharedos").Catalog(ctx(t), ada)
	if err != nil {
		t.Fatal(err)
	}
	for _, def := range cat.Definitions {
		d.token[def.Name] = def.Token
	}
	return d
}

var callSeq int

// request is a well-formed, correctly signed call of tool for ada; edit
// changes the grant before it is signed.
func (d *direct) request(key ed25519.PrivateKey, tool string, args string, edit func(*providers.Grant)) *messages.ProviderInvokeRequest {
	callSeq++
	now := time.Now()
	req := &messages.ProviderInvokeRequest{V: messages.Version,
		Access: messages.Access{Tenant: "acme", Principal: "ada", TurnID: "n1.turn"},
		CallID: "c" + strconv.Itoa(callSeq), Tool: tool, Revision: d.token[tool], Args: []byte(args), Resource: "x/" + tool, TimeoutMs: 5000}
	g := &providers.Grant{V: providers.GrantVersion, Call: req.CallID, Turn: "n1.turn", Node: "n1", Tenant: "acme", Principal: "ada",
		Provider: d.id, Tool: tool, Revision: "node-rev", Token: req.Revision, CatalogHash: "h", ArgsSHA256: providers.ArgsHash(req.Args),
		Resource: req.Resource, IssuedAt: now.UnixMilli(), Expires: now.Add(5 * time.Second).UnixMilli()}
	if edit != nil {
		edit(g)
	}
	s, err := providers.NewGrantSigner(key)
	if err != nil {
		d.t.Fatal(err)
	}
	if err := s.Sign(req, g); err != nil {
		d.t.Fatal(err)
	}
	return req
}

func (d *direct) send(req *messages.ProviderInvokeRequest) *messages.ProviderInvokeReply {
	d.t.Helper()
	b, err := messages.Encode(req)
	if err != nil {
		d.t.Fatal(err)
	}
	m, err := d.nc.Request(messages.ProviderInvokeSubject("sharedos", d.id), b, 10*time.Second)
	if err != nil {
		d.t.Fatal(err)
	}
	var rep messages.ProviderInvokeReply
	if err := messages.Decode(m.Data, &rep, messages.DefaultLimits()); err != nil {
		d.t.Fatal(err)
	}
	return &rep
}

// A call straight to a provider's invoke subject runs only with a grant a
// trusted node signed for exactly this call: every other attempt is
// refused invalid_request ("execution grant refused") and the handler
// never runs.
func TestDirectCallsAreRefused(t *testing.T) {
	_, nc := natstest.Start(t, false)
	rec := &recorder{}
	serve(t, nc, "p", rec, time.Hour)
	d := newDirect(t, nc, "p")
	otherKey := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{8}, ed25519.SeedSize))

	replayed := d.request(nodeKey, "echo", `{}`, nil)
	if rep := d.send(replayed); rep.Error != nil || rep.Text != "ran echo for ada" {
		t.Fatalf("a signed call: %+v %+v", rep, rep.Error)
	}
	if n := len(rec.ran()); n != 1 {
		t.Fatalf("%d runs after the signed call", n)
	}

	attacks := map[string]*messages.ProviderInvokeRequest{}
	unsigned := d.request(nodeKey, "echo", `{}`, nil)
	unsigned.Grant, unsigned.GrantSig, unsigned.GrantKey = nil, nil, ""
	attacks["unsigned"] = unsigned
	forged := d.request(nodeKey, "echo", `{}`, nil)
	forged.GrantSig[0] ^= 1
	attacks["forged signature"] = forged
	tampered := d.request(nodeKey, "echo", `{}`, nil)
	tampered.Grant = bytes.Replace(tampered.Grant, []byte(`"ada"`), []byte(`"bob"`), 1)
	tampered.Access.Principal = "bob"
	attacks["grant bytes changed after signing"] = tampered
	attacks["wrong key"] = d.request(otherKey, "echo", `{}`, nil)
	wrongKeyID := d.request(otherKey, "echo", `{}`, nil)
	wrongKeyID.GrantKey = providers.GrantKeyID(nodePub)
	attacks["wrong key, trusted key's id"] = wrongKeyID
	attacks["expired"] = d.request(nodeKey, "echo", `{}`, func(g *providers.Grant) {
		g.IssuedAt, g.Expires = time.Now().Add(-time.Minute).UnixMilli(), time.Now().Add(-30*time.Second).UnixMilli()
	})
	attacks["too long-lived"] = d.request(nodeKey, "echo", `{}`, func(g *providers.Grant) {
		g.Expires = time.Now().Add(time.Hour).UnixMilli()
	})
	attacks["replayed"] = replayed
	anotherTool := d.request(nodeKey, "other", `{}`, nil)
	anotherTool.Tool, anotherTool.Revision, anotherTool.Resource = "echo", d.token["echo"], "x/echo"
	attacks["another tool's grant"] = anotherTool
	attacks["another provider's grant"] = d.request(nodeKey, "echo", `{}`, func(g *providers.Grant) { g.Provider = "q" })
	argsChanged := d.request(nodeKey, "echo", `{"a":1}`, nil)
	argsChanged.Args = []byte(`{"a":2}`)
	attacks["args changed after signing"] = argsChanged
	resourceChanged := d.request(nodeKey, "echo", `{}`, nil)
	resourceChanged.Resource = "x/elsewhere"
	attacks["resource changed after signing"] = resourceChanged
	revisionChanged := d.request(nodeKey, "echo", `{}`, nil)
	revisionChanged.Revision = d.token["other"]
	attacks["revision changed after signing"] = revisionChanged
	accessChanged := d.request(nodeKey, "echo", `{}`, nil)
	accessChanged.Access.Principal = "bob"
	attacks["access changed after signing"] = accessChanged

	for name, req := range attacks {
		rep := d.send(req)
		if rep.Error == nil || rep.Error.Code != string(reason.InvalidRequest) || !strings.Contains(rep.Error.Message, "execution grant refused") {
			t.Errorf("%s: answered %+v (error %+v), want invalid_request: execution grant refused", name, rep, rep.Error)
		}
	}
	if n := len(rec.ran()); n != 1 {
		t.Fatalf("the handler ran %d times; only the one signed call may run", n)
	}
}

// Through the node, a signed call runs and the handler sees the access the
// node decided for.
func TestHandlerGetsTheGrantedAccess(t *testing.T) {
	_, nc := natstest.Start(t, false)
	rec := &recorder{}
	serve(t, nc, "x", rec, time.Hour)
	w := kernel(t, nc, "x")
	open, err := w.k.Open(ctx(t), ada)
	if err != nil {
		t.Fatal(err)
	}
	a := ada
	a.TurnID, a.LeaseID = open.TurnID, open.LeaseID
	res, err := w.k.Invoke(ctx(t), a, "x_echo", json.RawMessage(`{}`))
	if err != nil || res.Result.Text != "ran echo for ada" {
		t.Fatalf("invoke: %+v %v", res, err)
	}
	calls := rec.ran()
	if len(calls) != 1 || calls[0].Access.Principal != "ada" || calls[0].Access.Tenant != "acme" || calls[0].Access.TurnID != open.TurnID || calls[0].Access.LeaseID != "" {
		t.Fatalf("handler saw %+v", calls)
	}
}

// A revision advertised to ada runs for ada within its TTL, but not for
// bob: the ledger holds it under the scope it was advertised to (here
// principal), and bob's contract is another.
func TestLedgerHonoursScope(t *testing.T) {
	for _, tc := range []struct {
		scope   string
		bobRuns bool
	}{{"principal", false}, {"tenant", true}, {"global", true}} {
		t.Run(tc.scope, func(t *testing.T) {
			_, nc := natstest.Start(t, false)
			rec := &recorder{byPrincipal: true}
			h, err := provider.Serve(nc, "p", rec, &provider.Options{TTL: time.Hour, Scope: tc.scope, TrustedKeys: []ed25519.PublicKey{nodePub}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = h.Stop(context.Background()) })
			d := newDirect(t, nc, "p") // advertises ada's echo
			// Ada's contract changes: her advertised revision stays
			// executable for her within the TTL.
			rec.mu.Lock()
			rec.byPrincipal = false
			rec.mu.Unlock()
			if rep := d.send(d.request(nodeKey, "echo", `{}`, nil)); rep.Error != nil {
				t.Fatalf("ada's advertised revision for ada: %+v", rep.Error)
			}
			bob := d.request(nodeKey, "echo", `{}`, func(g *providers.Grant) { g.Principal = "bob" })
			bob.Access.Principal = "bob"
			rep := d.send(bob)
			switch {
			case tc.bobRuns && rep.Error != nil:
				t.Fatalf("scope %s: bob refused %+v", tc.scope, rep.Error)
			case !tc.bobRuns && (rep.Error == nil || rep.Error.Code != string(reason.CapabilityChanged)):
				t.Fatalf("scope %s: ada's revision for bob answered %+v %+v, want capability_changed", tc.scope, rep, rep.Error)
			}
			if tc.scope == "tenant" { // another tenant never shares a tenant-scoped revision
				globex := d.request(nodeKey, "echo", `{}`, func(g *providers.Grant) { g.Tenant = "globex" })
				globex.Access.Tenant = "globex"
				if rep := d.send(globex); rep.Error == nil || rep.Error.Code != string(reason.CapabilityChanged) {
					t.Fatalf("tenant scope: ada's revision for globex answered %+v %+v", rep, rep.Error)
				}
			}
			want := 1
			if tc.bobRuns {
				want = 2
			}
			if n := len(rec.ran()); n != want {
				t.Fatalf("%d runs, want %d", n, want)
			}
		})
	}
}

// Without trusted keys the SDK does not serve, unless told to be insecure.
func TestServeNeedsTrustedKeys(t *testing.T) {
	_, nc := natstest.Start(t, false)
	if _, err := provider.Serve(nc, "p", &recorder{}, &provider.Options{}); err == nil || !strings.Contains(err.Error(), "no trusted node keys") {
		t.Fatalf("Serve without keys: %v", err)
	}
	if _, err := provider.Serve(nc, "p", &recorder{}, &provider.Options{Scope: "tenants", TrustedKeys: []ed25519.PublicKey{nodePub}}); err == nil {
		t.Fatal("Serve with an unknown scope started")
	}
	h, err := provider.Serve(nc, "p", &recorder{}, &provider.Options{InsecureUnsigned: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = h.Stop(context.Background())
}
