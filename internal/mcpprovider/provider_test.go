package mcpprovider_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/reason"
)

func TestEmptyListIsReadyNotFailed(t *testing.T) {
	f := newFake(t, nil)
	ttl := 60000
	f.ttlMs = &ttl
	p := start(t, setup{servers: one(f)})
	cat, err := p.Catalog(ctxT(t), access(""))
	if err != nil {
		t.Fatalf("an empty list is not a failure: %v", err)
	}
	if len(cat.Definitions) != 0 {
		t.Fatalf("tools %v, want none", names(cat))
	}
	st := p.Status()
	if len(st) != 1 || st[0].State != mcpprovider.StateReady || st[0].Tools != 0 {
		t.Fatalf("status %+v, want one ready profile with 0 tools", st)
	}
}

func TestOneValidToolIsServedAndCalled(t *testing.T) {
	f := newFake(t, nil, `{"name":"search","title":"Search","description":"Find issues.","inputSchema":`+objSchema+`,"annotations":{"readOnlyHint":true}}`)
	p := start(t, setup{servers: one(f)})
	cat, err := p.Catalog(ctxT(t), access(""))
	if err != nil {
		t.Fatal(err)
	}
	if got := names(cat); !slices.Equal(got, []string{"search"}) {
		t.Fatalf("tools %v", got)
	}
	d := cat.Definitions[0]
	if d.Namespace != "work" || d.Capability != "mcp.work.search" || d.Requirement != "mcp/work/search" || d.Token == "" {
		t.Fatalf("definition %+v: namespace, capability and requirement come from the configured server id", d)
	}
	nt, err := catalog.Normalize("work", d, catalog.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Invoke(ctxT(t), providers.Call{Access: access(""), Tool: catalog.Identity{Provider: "work", Name: "search"},
		Revision: nt.Revision, Token: d.Token, Arguments: json.RawMessage(`{"q":"bug"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != `ran search {"q":"bug"}` || string(res.Structured) != `{"tool":"search"}` {
		t.Fatalf("result %+v", res)
	}
}

// The server names itself "Official GitHub MCP"; nothing of that reaches an identity.
func TestServerInfoNameIsNeverIdentity(t *testing.T) {
	f := newFake(t, nil, tool("search", objSchema))
	p := start(t, setup{id: "tracker", servers: one(f)})
	cat, err := p.Catalog(ctxT(t), access(""))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(cat)
	if strings.Contains(string(b), "Official") || cat.Definitions[0].Namespace != "tracker" {
		t.Fatalf("serverInfo leaked into the catalogue: %s", b)
	}
}

func TestSameNameOnTwoServersKeepsTwoIdentities(t *testing.T) {
	a := newFake(t, nil, tool("search", objSchema))
	b := newFake(t, nil, tool("search", `{"type":"object","properties":{"text":{"type":"string"}}}`))
	pa := start(t, setup{id: "github-work", servers: one(a)})
	pb := start(t, setup{id: "linear-work", servers: one(b)})
	var tools []*catalog.Tool
	for _, p := range []*mcpprovider.Provider{pa, pb} {
		cat, err := p.Catalog(ctxT(t), access(""))
		if err != nil {
			t.Fatal(err)
		}
		nt, err := catalog.Normalize(p.ID(), cat.Definitions[0], catalog.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		tools = append(tools, nt)
	}
	reg, err := catalog.Build(tools)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct{ alias, provider string }{{"github-work_search", "github-work"}, {"linear-work_search", "linear-work"}} {
		tl, ok := reg.Lookup(want.alias)
		if !ok || tl.Identity != (catalog.Identity{Provider: want.provider, Name: "search"}) {
			t.Fatalf("alias %s → %+v, want %s/search", want.alias, tl, want.provider)
		}
	}
	if tools[0].Capability == tools[1].Capability {
		t.Fatal("a grant for one server's search must not cover the other's")
	}
	// A call pinned to one server's contract is refused by the other.
	_, err = pb.Invoke(ctxT(t), providers.Call{Access: access(""), Tool: catalog.Identity{Provider: "linear-work", Name: "search"},
		Revision: tools[0].Revision, Token: tools[0].Token, Arguments: json.RawMessage(`{}`)})
	if reason.Of(err) != reason.CapabilityChanged {
		t.Fatalf("err %v, want capability_changed", err)
	}
	if b.calls.Load() != 0 {
		t.Fatal("the refused call reached the server")
	}
}

func TestInvalidToolIsLeftOutAndReportedOthersServed(t *testing.T) {
	f := newFake(t, nil,
		tool("good", objSchema),
		tool("not_object", `{"type":"string"}`),
		tool("remote_ref", `{"type":"object","properties":{"a":{"$ref":"https://evil.example/schema.json"}}}`),
		tool("ref_cycle", `{"type":"object","$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"properties":{"x":{"$ref":"#/$defs/a"}}}`),
		tool("missing_required", `{"type":"object","properties":{"a":{"type":"string"}},"required":["b"]}`),
	)
	p := start(t, setup{servers: one(f)})
	cat, err := p.Catalog(ctxT(t), access(""))
	if err != nil {
		t.Fatal(err)
	}
	if got := names(cat); !slices.Equal(got, []string{"good"}) {
		t.Fatalf("served %v, want only good", got)
	}
	st := p.Status()[0]
	want := map[string]string{"not_object": "schema not object", "remote_ref": "schema ref", "ref_cycle": "schema ref cycle", "missing_required": "schema required"}
	if len(st.Refused) != len(want) {
		t.Fatalf("refused %+v", st.Refused)
	}
	for _, r := range st.Refused {
		if !strings.Contains(r.Reason, want[r.Name]) {
			t.Errorf("%s refused for %q, want %q", r.Name, r.Reason, want[r.Name])
		}
	}
}

// A schema a model provider cannot represent ($dynamicRef; a top-level
// type other than object) is refused, never weakened.
func TestUnrepresentableSchemaRefusedNotWeakened(t *testing.T) {
	f := newFake(t, nil,
		tool("dyn", `{"type":"object","properties":{"a":{"$dynamicRef":"#meta"}}}`),
		tool("union", `{"type":["object","null"]}`),
	)
	p := start(t, setup{servers: one(f)})
	cat, err := p.Catalog(ctxT(t), access(""))
	if err != nil {
		t.Fatal(err)
	}
	if len(cat.Definitions) != 0 || len(p.Status()[0].Refused) != 2 {
		t.Fatalf("served %v refused %+v", names(cat), p.Status()[0].Refused)
	}
}

func TestSchemaBombsRejectedOtherServersServed(t *testing.T) {
	deep := strings.Repeat(`{"type":"object","properties":{"a":`, 200) + `{}` + strings.Repeat(`}}`, 200)
	var branches []string
	for range 100000 {
		branches = append(branches, `{}`)
	}
	anyOf := `{"type":"object","anyOf":[` + strings.Join(branches, ",") + `]}`
	wide := `{"type":"object","anyOf":[` + strings.Join(branches[:3000], ",") + `]}`
	var props []string
	for i := range 5000 {
		props = append(props, fmt.Sprintf(`"p%d":{"type":"string"}`, i))
	}
	fan := `{"type":"object","properties":{` + strings.Join(props, ",") + `}}`
	// $ref fan-out: each def points at the next twice, 2^30 visits if followed naively.
	var defs []string
	for i := range 30 {
		defs = append(defs, fmt.Sprintf(`"d%d":{"anyOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]}`, i, i+1, i+1))
	}
	defs = append(defs, `"d30":{"type":"string"}`)
	refBomb := `{"type":"object","$defs":{` + strings.Join(defs, ",") + `},"properties":{"x":{"$ref":"#/$defs/d0"}}}`

	bomb := newFake(t, nil, tool("deep", deep), tool("anyof_100k", anyOf), tool("wide", wide), tool("fan", fan), tool("ref_bomb", refBomb), tool("ok", objSchema))
	good := newFake(t, nil, tool("fine", objSchema))
	pb := start(t, setup{id: "bombs", servers: one(bomb)})
	pg := start(t, setup{id: "good", servers: one(good)})

	cat, err := pb.Catalog(ctxT(t), access(""))
	if err != nil {
		t.Fatal(err)
	}
	if got := names(cat); !slices.Equal(got, []string{"ok"}) {
		t.Fatalf("bomb server served %v, want only ok", got)
	}
	reasons := map[string]string{}
	for _, r := range pb.Status()[0].Refused {
		reasons[r.Name] = r.Reason
	}
	for name, want := range map[string]string{"deep": "too deep", "anyof_100k": "bytes", "wide": "schema nodes", "fan": "schema", "ref_bomb": "schema nodes"} {
		if !strings.Contains(reasons[name], want) {
			t.Errorf("%s: refused %q, want %q", name, reasons[name], want)
		}
	}
	if cat, err := pg.Catalog(ctxT(t), access("")); err != nil || len(cat.Definitions) != 1 {
		t.Fatalf("the other server: %v %v", names(cat), err)
	}
}

func TestSchemaChangeBetweenRefreshesRefusesPinnedCall(t *testing.T) {
	f := newFake(t, nil, tool("pay", `{"type":"object","properties":{"amount":{"type":"integer"}}}`))
	clk := newClock()
	p := start(t, setup{servers: one(f), clock: clk, cfg: mcpprovider.Config{TTL: mcpprovider.Duration(time.Minute)}})
	cat, err := p.Catalog(ctxT(t), access(""))
	if err != nil {
		t.Fatal(err)
	}
	old := cat.Definitions[0]
	oldRev := revision(t, old)
	f.set(tool("pay", `{"type":"object","properties":{"amount_cents":{"type":"integer"},"currency":{"type":"string"}}}`))
	clk.Advance(2 * time.Minute) // past the TTL: the tool is not read-only, so it is refreshed before the call
	_, err = p.Invoke(ctxT(t), providers.Call{Access: access(""), Tool: catalog.Identity{Provider: "work", Name: "pay"},
		Revision: oldRev, Token: old.Token, Arguments: json.RawMessage(`{"amount":10}`)})
	if reason.Of(err) != reason.CapabilityChanged {
		t.Fatalf("err %v, want capability_changed", err)
	}
	if f.calls.Load() != 0 {
		t.Fatal("the stale contract was executed")
	}
	cat, err = p.Catalog(ctxT(t), access(""))
	if err != nil {
		t.Fatal(err)
	}
	if cat.Definitions[0].Token == old.Token {
		t.Fatal("the new contract has the old source revision")
	}
}

func TestRemovedToolIsCapabilityChanged(t *testing.T) {
	f := newFake(t, nil, tool("create_invoice", objSchema), tool("other", objSchema))
	p := start(t, setup{servers: one(f)})
	cat, err := p.Catalog(ctxT(t), access(""))
	if err != nil {
		t.Fatal(err)
	}
	d := cat.Definitions[0]
	f.set(tool("other", objSchema))
	f.notifyChanged()
	waitFor(t, func() bool { return f.lists.Load() >= 2 })
	_, err = p.Invoke(ctxT(t), providers.Call{Access: access(""), Tool: catalog.Identity{Provider: "work", Name: "create_invoice"},
		Revision: revision(t, d), Token: d.Token, Arguments: json.RawMessage(`{"q":"x"}`)})
	if reason.Of(err) != reason.CapabilityChanged {
		t.Fatalf("err %v, want capability_changed", err)
	}
	if f.calls.Load() != 0 {
		t.Fatal("a removed tool was called")
	}
}

func revision(t *testing.T, d catalog.Definition) string {
	t.Helper()
	nt, err := catalog.Normalize("work", d, catalog.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return nt.Revision
}

// waitFor polls a condition on counters the test owns (no wall-clock
// assertion: the bound only stops a hung test).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A read-only tool may run on an expired snapshot; when the server then
// refuses the call because the tool is gone, the provider refreshes and
// says capability_changed — never the server's opaque error.
func TestRefusedCallOnRemovedToolIsCapabilityChanged(t *testing.T) {
	f := newFake(t, nil, `{"name":"search","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}`) // ttlMs absent: 0
	p := start(t, setup{servers: one(f)})
	cat, err := p.Catalog(ctxT(t), access(""))
	if err != nil {
		t.Fatal(err)
	}
	d := cat.Definitions[0]
	f.set(tool("other", objSchema))
	_, err = p.Invoke(ctxT(t), providers.Call{Access: access(""), Tool: catalog.Identity{Provider: "work", Name: "search"},
		Revision: revision(t, d), Token: d.Token, Arguments: json.RawMessage(`{}`)})
	if reason.Of(err) != reason.CapabilityChanged {
		t.Fatalf("err %v, want capability_changed", err)
	}
	if n := p.Discoveries(); n != 2 {
		t.Fatalf("%d discoveries: the refusal refreshes once", n)
	}
}
