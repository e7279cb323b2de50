package node_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/examples/mcpserver"
	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/internal/node"
	"github.com/sharedos/sharedos/internal/policy"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/reason"
)

// aliases lists a turn's tools whose alias starts with prefix.
func aliases(t *testing.T, tr *client.Turn, prefix string) []string {
	t.Helper()
	l, err := tr.ListTools(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tl := range l.Tools {
		if strings.HasPrefix(tl.Alias, prefix) {
			out = append(out, tl.Alias)
		}
	}
	return out
}

// putAndApply writes value (nil: deletes) at key on n's policy and waits
// until n's view has applied it.
func putAndApply(t *testing.T, n *node.Node, k policy.Key, value string, rev uint64) uint64 {
	t.Helper()
	var won uint64
	if value == "" {
		r, err := n.Policy().Delete(ctx(t), k, rev, "admin")
		if err != nil {
			t.Fatal(err)
		}
		won = r
	} else {
		e, err := n.Policy().Put(ctx(t), k, []byte(value), rev, "admin")
		if err != nil {
			t.Fatal(err)
		}
		won = e.Revision
	}
	if err := n.PolicyView().WaitFor(ctx(t), won); err != nil {
		t.Fatal(err)
	}
	return won
}

// An MCP server added to the policy while the node runs (a go-sdk server
// over streamable HTTP on loopback) is reached by a client the node
// starts: a new turn lists and calls its tools, a turn opened before
// does not list them. Retired, new turns lack it, the turn that held it
// keeps its held catalogue and is refused provider_unavailable calling
// it, and the node no longer reports the server.
func TestPolicyMCPProviderAddedAndRetiredLive(t *testing.T) {
	srv := mcpserver.New()
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	cfg := sampleConfig(t, t.TempDir())
	for i, p := range cfg.Principals {
		if p.Tenant == "acme" && p.Principal == "ada" {
			cfg.Principals[i].Grants = append(p.Grants, authority.GrantSpec{ID: "ada-pad", Capability: "mcp.pad.*", Resource: "mcp/pad/**"})
		}
	}
	n, rt := startConnected(t, cfg)
	c := client.New(rt, nil)
	access := client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"pad", "notes"}}
	before, err := c.Open(ctx(t), access)
	if err != nil {
		t.Fatal(err)
	}
	if got := aliases(t, before, "pad_"); len(got) != 0 {
		t.Fatalf("before the provider exists: %v", got)
	}

	k := policy.Key{Kind: policy.Providers, Name: "pad"}
	rev := putAndApply(t, n, k, "id: pad\nkind: mcp\nmcp: {transport: http, url: \""+hs.URL+"/mcp\"}\n", 0)
	after, err := c.Open(ctx(t), access)
	if err != nil {
		t.Fatal(err)
	}
	held := aliases(t, after, "pad_")
	if !slices.Contains(held, "pad_put") {
		t.Fatalf("a new turn after the add lists %v, want the server's tools", held)
	}
	if r, err := after.Invoke(ctx(t), "pad_put", []byte(`{"title":"plan","body":"ship"}`)); err != nil || r.IsError {
		t.Fatalf("a call to the added server: %+v %v", r, err)
	}
	if got := aliases(t, before, "pad_"); len(got) != 0 {
		t.Fatalf("the turn opened before the add gained %v", got)
	}
	if !slices.ContainsFunc(n.MCPStatus(), func(s mcpprovider.ProfileStatus) bool { return s.Server == "pad" }) {
		t.Fatalf("the node does not report the added server: %+v", n.MCPStatus())
	}

	putAndApply(t, n, k, "", rev)
	later, err := c.Open(ctx(t), access)
	if err != nil {
		t.Fatal(err)
	}
	if got := aliases(t, later, "pad_"); len(got) != 0 {
		t.Fatalf("a new turn after the retirement lists %v", got)
	}
	if got := aliases(t, after, "pad_"); !slices.Equal(got, held) {
		t.Fatalf("the open turn's held catalogue changed: %v, held %v", got, held)
	}
	if _, err := after.Invoke(ctx(t), "pad_get", []byte(`{"title":"plan"}`)); !errors.Is(err, reason.ErrProviderUnavailable) {
		t.Fatalf("the open turn calling the retired server: %v, want provider_unavailable", err)
	}
	if slices.ContainsFunc(n.MCPStatus(), func(s mcpprovider.ProfileStatus) bool { return s.Server == "pad" }) {
		t.Fatalf("the node still reports the retired server: %+v", n.MCPStatus())
	}
	for _, tr := range []*client.Turn{before, after, later} {
		_ = tr.Close(ctx(t))
	}
}

// A provider the node hosts (calendar, host: calendar) retired from the
// policy stops being served by the node: new turns lack it, its instance
// answers no one, and a turn that held it is refused provider_unavailable.
// Put back, the node serves a new instance: a new turn lists and calls
// it, a turn opened meanwhile does not list it.
func TestPolicyHostedProviderRetiredAndAddedLive(t *testing.T) {
	n, rt := startConnected(t, sampleConfig(t, t.TempDir()))
	c := client.New(rt, nil)
	access := client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"calendar"}}
	between := []byte(`{"from":"2026-12-01","to":"2026-12-04"}`)
	first, err := c.Open(ctx(t), access)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := first.Invoke(ctx(t), "calendar_between", between); err != nil || r.IsError {
		t.Fatalf("the seeded hosted provider: %+v %v", r, err)
	}
	k := policy.Key{Kind: policy.Providers, Name: "calendar"}
	e, err := n.Policy().Get(ctx(t), k)
	if err != nil {
		t.Fatal(err)
	}
	putAndApply(t, n, k, "", e.Revision)
	if _, err := first.Invoke(ctx(t), "calendar_between", between); !errors.Is(err, reason.ErrProviderUnavailable) {
		t.Fatalf("the open turn calling the retired provider: %v, want provider_unavailable", err)
	}
	gone, err := c.Open(ctx(t), access)
	if err != nil {
		t.Fatal(err)
	}
	if got := aliases(t, gone, "calendar_"); len(got) != 0 {
		t.Fatalf("a new turn after the retirement lists %v", got)
	}
	// Nobody serves calendar any more: its provider identity left the bus
	// with it, and the node stopped its instance (in the background,
	// draining: ask until no answer comes; goleak sees an instance left
	// running).
	remote := providers.NewRemote(n.Conn(), "calendar", "sharedos")
	for {
		if _, err := remote.Catalog(ctx(t), authority.AccessContext{Tenant: "acme", Principal: "ada"}); err != nil {
			break
		}
		if ctx(t).Err() != nil {
			t.Fatal("the retired provider's instance still answers")
		}
		time.Sleep(10 * time.Millisecond)
	}

	putAndApply(t, n, k, string(e.Value), 0)
	back, err := c.Open(ctx(t), access)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := back.Invoke(ctx(t), "calendar_between", between); err != nil || r.IsError {
		t.Fatalf("a new turn calling the provider put back: %+v %v", r, err)
	}
	if got := aliases(t, gone, "calendar_"); len(got) != 0 {
		t.Fatalf("the turn opened while it was retired gained %v", got)
	}
	for _, tr := range []*client.Turn{first, gone, back} {
		_ = tr.Close(ctx(t))
	}
}
