package mcpserver_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/examples/mcpserver"
	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/internal/providers"
)

func TestAnalyze(t *testing.T) {
	got := mcpserver.Analyze("the cat saw the dog.\nThe end\n", 2)
	want := mcpserver.AnalyzeOut{Words: 7, Lines: 2, Characters: 29, Top: []mcpserver.Count{{Word: "the", Count: 3}, {Word: "cat", Count: 1}}}
	b1, _ := json.Marshal(got)
	b2, _ := json.Marshal(want)
	if string(b1) != string(b2) {
		t.Fatalf("got %s want %s", b1, b2)
	}
}

// Every tool of the example passes the node's discovery limits, and a
// write, a read and the analyser work through the MCP provider.
func TestThroughTheProvider(t *testing.T) {
	srv := mcpserver.New()
	p, err := mcpprovider.New("scratchpad", mcpprovider.Config{Transport: "memory", Server: "scratchpad"},
		&mcpprovider.Options{Memory: func(string) (*mcp.Server, bool) { return srv, true }})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := authority.AccessContext{Tenant: "acme", Principal: "ada"}
	cat, err := p.Catalog(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	defs := map[string]catalog.Definition{}
	for _, d := range cat.Definitions {
		names = append(names, d.Name)
		defs[d.Name] = d
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"analyze", "delete", "get", "list", "put"}) || len(p.Status()[0].Refused) != 0 {
		t.Fatalf("tools %v refused %+v", names, p.Status()[0].Refused)
	}
	if cat.Freshness.TTL <= 0 || cat.Freshness.TTL > mcpserver.TTLMs*time.Millisecond {
		t.Fatalf("freshness %+v: the server's ttlMs", cat.Freshness)
	}
	call := func(name, args string) providers.Result {
		t.Helper()
		d := defs[name]
		nt, err := catalog.Normalize("scratchpad", d, catalog.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nt.ParseArguments(json.RawMessage(args)); err != nil {
			t.Fatalf("%s %s: %v", name, args, err)
		}
		r, err := p.Invoke(ctx, providers.Call{Access: a, Tool: nt.Identity, Revision: nt.Revision, Token: d.Token, Arguments: json.RawMessage(args)})
		if err != nil || r.IsError {
			t.Fatalf("%s: %v %+v", name, err, r)
		}
		return r
	}
	call("put", `{"title":"plan","body":"ship the MCP provider, then ship the docs"}`)
	if r := call("get", `{"title":"plan"}`); string(r.Structured) != `{"body":"ship the MCP provider, then ship the docs","title":"plan"}` {
		t.Fatalf("get %s", r.Structured)
	}
	if r := call("analyze", `{"title":"plan","top":1}`); string(r.Structured) != `{"characters":41,"lines":1,"top":[{"count":2,"word":"ship"}],"words":8}` {
		t.Fatalf("analyze %s", r.Structured)
	}
	call("delete", `{"title":"plan"}`)
	if r := call("list", `{}`); string(r.Structured) != `{"notes":[]}` {
		t.Fatalf("list %s", r.Structured)
	}
}
