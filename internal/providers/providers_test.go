package providers_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/reason"
)

func def(capability string) catalog.Definition {
	return catalog.Definition{Name: "t", Namespace: "ns", Description: "d", Capability: capability, Requirement: "r/x",
		InputSchema: json.RawMessage(`{"type":"object"}`)}
}

func revision(t *testing.T, provider string, d catalog.Definition) string {
	t.Helper()
	tool, err := catalog.Normalize(provider, d, catalog.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return tool.Revision
}

func TestMemoryHonoursAdvertisedRevisionsUntilRetired(t *testing.T) {
	ctx := context.Background()
	m := providers.NewMemory("p", providers.MemoryTool{Definition: def("a.b"), Handler: providers.EchoHandler})
	old := revision(t, "p", def("a.b"))
	m.Set(providers.MemoryTool{Definition: def("a.c"), Handler: providers.EchoHandler})
	call := providers.Call{Tool: catalog.Identity{Provider: "p", Name: "t"}, Revision: old, Arguments: json.RawMessage(`{"x":1}`)}
	if res, err := m.Invoke(ctx, call); err != nil || string(res.Structured) != `{"x":1}` {
		t.Fatalf("advertised revision refused before retirement: %v", err)
	}
	m.Retire("t")
	if _, err := m.Invoke(ctx, call); !errors.Is(err, reason.ErrCapabilityChanged) {
		t.Fatalf("retired revision: %v, want capability_changed", err)
	}
	call.Revision = revision(t, "p", def("a.c"))
	if _, err := m.Invoke(ctx, call); err != nil {
		t.Fatalf("current revision: %v", err)
	}
	if m.InvokeCalls() != 3 {
		t.Fatalf("InvokeCalls = %d", m.InvokeCalls())
	}
	cat, err := m.Catalog(ctx, authority.AccessContext{})
	if err != nil || len(cat.Definitions) != 1 || cat.Definitions[0].Capability != "a.c" || m.CatalogCalls() != 1 {
		t.Fatalf("catalog: %+v %v", cat, err)
	}
}

func TestStaticRefusesUnknownRevisions(t *testing.T) {
	s, err := providers.NewStatic("s", []providers.StaticTool{{Definition: def("a.b"), Handler: providers.EchoHandler}})
	if err != nil {
		t.Fatal(err)
	}
	call := providers.Call{Tool: catalog.Identity{Provider: "s", Name: "t"}, Revision: "deadbeef"}
	if _, err := s.Invoke(context.Background(), call); !errors.Is(err, reason.ErrCapabilityChanged) {
		t.Fatalf("unknown revision: %v", err)
	}
	if _, err := providers.NewStatic("s", []providers.StaticTool{{Definition: def("a.b")}}); err == nil {
		t.Fatal("tool without handler accepted")
	}
	if _, err := providers.NewStatic("s", []providers.StaticTool{{Definition: def("a.*"), Handler: providers.EchoHandler}}); err == nil {
		t.Fatal("invalid definition accepted")
	}
}

func TestClassify(t *testing.T) {
	cases := map[error]reason.Code{
		context.DeadlineExceeded:                             reason.ProviderTimeout,
		reason.New(reason.CapabilityChanged, "x"):            reason.CapabilityChanged,
		reason.New(reason.ProviderUnavailable, "x"):          reason.ProviderUnavailable,
		reason.New(reason.NoMatchingGrant, "not a provider"): reason.ProviderError,
		errors.New("boom"):                                   reason.ProviderError,
	}
	for err, want := range cases {
		if got := providers.Classify(err); got != want {
			t.Errorf("Classify(%v) = %s, want %s", err, got, want)
		}
	}
}

func TestBuiltinsDoRealWork(t *testing.T) {
	h := providers.Builtins()
	ctx := context.Background()
	acme := authority.AccessContext{Tenant: "acme"}
	call := func(name, args, resource string, access authority.AccessContext) providers.Result {
		t.Helper()
		res, err := h[name](ctx, providers.Call{Access: access, Arguments: json.RawMessage(args), Resource: resource})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return res
	}
	call("notes.put", `{"title":"plan","body":"Ship the kernel"}`, "notes/acme/items", acme)
	if r := call("notes.get", `{"title":"plan"}`, "notes/acme/items", acme); r.Text != "Ship the kernel" || r.IsError {
		t.Fatalf("get: %+v", r)
	}
	// Notes are scoped by tenant and by the authorized resource.
	if r := call("notes.get", `{"title":"plan"}`, "notes/other/items", acme); !r.IsError {
		t.Fatalf("note leaked across resources: %+v", r)
	}
	if r := call("notes.get", `{"title":"plan"}`, "notes/acme/items", authority.AccessContext{Tenant: "globex"}); !r.IsError {
		t.Fatalf("note leaked across tenants: %+v", r)
	}
	if r := call("notes.search", `{"query":"KERNEL"}`, "notes/acme/items", acme); string(r.Structured) != `{"titles":["plan"]}` {
		t.Fatalf("search: %s", r.Structured)
	}
	if r := call("text.stats", `{"text":"a b b\nc"}`, "", acme); r.Text != "4 words, 2 lines, 7 characters" {
		t.Fatalf("stats: %q", r.Text)
	}
	if r := call("hash.sha256", `{"text":"abc"}`, "", acme); r.Text != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Fatalf("sha256: %q", r.Text)
	}
}
