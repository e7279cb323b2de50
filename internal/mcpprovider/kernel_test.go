package mcpprovider_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/provider"
	"github.com/sharedos/sharedos/reason"
)

var nodeKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, ed25519.SeedSize))

func kernelWith(t *testing.T, ps ...providers.ContextToolProvider) (*actors.Kernel, *audit.Memory) {
	t.Helper()
	src, err := authority.NewStaticSource(map[[2]string][]authority.GrantSpec{{"acme", "ada"}: {{ID: "g", Capability: "mcp.**", Resource: "mcp/**"}}})
	if err != nil {
		t.Fatal(err)
	}
	sink := audit.NewMemory()
	k, err := actors.New(actors.Options{Node: "n1", Providers: ps, Authority: src, Sink: sink,
		ResolveTimeout: 5 * time.Second, CallTimeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Shutdown(context.Background()) })
	return k, sink
}

// openTurn opens a turn for ada and returns it and ada as its caller.
func openTurn(t *testing.T, k *actors.Kernel) (actors.Opened, authority.AccessContext) {
	t.Helper()
	o, err := k.Open(ctxT(t), ada)
	if err != nil {
		t.Fatal(err)
	}
	who := ada
	who.TurnID, who.LeaseID = o.TurnID, o.LeaseID
	return o, who
}

var ada = authority.AccessContext{Tenant: "acme", Principal: "ada", EnabledNamespaces: []string{"github-work", "linear-work", "work", "tracker"}}

func aliases(l actors.ToolList) []string {
	var out []string
	for _, t := range l.Tools {
		out = append(out, t.Alias)
	}
	return out
}

// same-name-two-servers: both callable through the kernel, each audited
// under its own (server, tool) identity.
func TestKernelSameNameTwoServers(t *testing.T) {
	a := newFake(t, nil, tool("search", objSchema))
	b := newFake(t, nil, tool("search", objSchema))
	k, sink := kernelWith(t, start(t, setup{id: "github-work", servers: one(a)}), start(t, setup{id: "linear-work", servers: one(b)}))
	o, who := openTurn(t, k)
	l, err := k.ListTools(ctxT(t), who)
	if err != nil {
		t.Fatal(err)
	}
	if got := aliases(l); !slices.Equal(got, []string{"github-work_search", "linear-work_search"}) {
		t.Fatalf("aliases %v", got)
	}
	for _, alias := range []string{"github-work_search", "linear-work_search"} {
		if _, err := k.Invoke(ctxT(t), who, alias, []byte(`{"q":"x"}`)); err != nil {
			t.Fatalf("%s: %v", alias, err)
		}
	}
	if a.calls.Load() != 1 || b.calls.Load() != 1 {
		t.Fatalf("calls a=%d b=%d, want one each", a.calls.Load(), b.calls.Load())
	}
	var audited []string
	for _, ev := range sink.Events(o.TurnID) {
		if ev.Type == audit.ToolInvoked {
			audited = append(audited, ev.Call.Provider+"/"+ev.Call.Name)
		}
	}
	if !slices.Equal(audited, []string{"github-work/search", "linear-work/search"}) {
		t.Fatalf("audited %v", audited)
	}
}

// list-changed-mid-turn: the open turn keeps its pinned catalogue and
// hash; a new turn sees the change.
func TestKernelListChangedMidTurn(t *testing.T) {
	f := newFake(t, nil, tool("a", objSchema))
	f.ttlMs = ptr(3600000)
	p := start(t, setup{servers: one(f)})
	k, _ := kernelWith(t, p)
	_, who := openTurn(t, k)
	before, err := k.ListTools(ctxT(t), who)
	if err != nil {
		t.Fatal(err)
	}
	f.set(tool("a", objSchema), tool("b", objSchema))
	f.notifyChanged()
	waitFor(t, func() bool { return p.Discoveries() >= 2 })
	after, err := k.ListTools(ctxT(t), who)
	if err != nil {
		t.Fatal(err)
	}
	if after.CatalogHash != before.CatalogHash || !slices.Equal(aliases(after), []string{"work_a"}) {
		t.Fatalf("the open turn moved: %v %s → %s", aliases(after), before.CatalogHash, after.CatalogHash)
	}
	if _, err := k.Invoke(ctxT(t), who, "work_a", []byte(`{"q":"x"}`)); err != nil {
		t.Fatalf("the pinned tool, unchanged, still runs: %v", err)
	}
	fresh, err := k.ListTools(ctxT(t), ada) // a turn of its own
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(aliases(fresh), []string{"work_a", "work_b"}) || fresh.CatalogHash == before.CatalogHash {
		t.Fatalf("a new turn: %v", aliases(fresh))
	}
}

// The same provider as its own process: served over NATS through the
// provider SDK (signed grants), reached by the node's Remote proxy.
func TestOverNATSThroughTheProviderSDK(t *testing.T) {
	_, nc := natstest.Start(t, false)
	f := newFake(t, nil, tool("search", objSchema))
	p := start(t, setup{id: "tracker", servers: one(f)})
	h, err := provider.Serve(nc, "tracker", p.SDK(), &provider.Options{TrustedKeys: []ed25519.PublicKey{nodeKey.Public().(ed25519.PublicKey)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Stop(context.Background()) })
	k, _ := kernelWith(t, providers.NewRemote(nc, "tracker", "sharedos", providers.WithSigner(nodeKey)))
	_, who := openTurn(t, k)
	l, err := k.ListTools(ctxT(t), who)
	if err != nil || !slices.Equal(aliases(l), []string{"tracker_search"}) {
		t.Fatalf("%v %v", aliases(l), err)
	}
	res, err := k.Invoke(ctxT(t), who, "tracker_search", []byte(`{"q":"over nats"}`))
	if err != nil || res.Result.Text != `ran search {"q":"over nats"}` {
		t.Fatalf("%+v %v", res, err)
	}
	// The server changes the tool; the pinned call is refused, never run.
	f.set(tool("search", `{"type":"object","properties":{"text":{"type":"string"}}}`))
	f.notifyChanged()
	waitFor(t, func() bool { return p.Discoveries() >= 2 })
	if _, err := k.Invoke(ctxT(t), who, "tracker_search", []byte(`{"q":"again"}`)); reason.Of(err) != reason.CapabilityChanged {
		t.Fatalf("err %v, want capability_changed", err)
	}
	if f.calls.Load() != 1 {
		t.Fatalf("%d calls reached the server, want 1", f.calls.Load())
	}
}

// A tool the provider refused is reported in the turn's listing as the
// provider's partial status, with its reason; the others are listed.
func TestKernelReportsRefusedToolsAsPartial(t *testing.T) {
	f := newFake(t, nil, tool("good", objSchema), tool("bomb", `{"type":"object","$defs":{"a":{"$ref":"#/$defs/a"}},"properties":{"x":{"$ref":"#/$defs/a"}}}`))
	k, _ := kernelWith(t, start(t, setup{servers: one(f)}))
	l, err := k.ListTools(ctxT(t), ada)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(aliases(l), []string{"work_good"}) || len(l.Degraded) != 1 || l.Degraded[0].Status != "partial" ||
		!strings.Contains(l.Degraded[0].Error, "bomb") || !strings.Contains(l.Degraded[0].Error, "cycle") {
		t.Fatalf("listing %v degraded %+v", aliases(l), l.Degraded)
	}
}
