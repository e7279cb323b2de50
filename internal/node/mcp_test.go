package node_test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/internal/node"
)

// The sample config's MCP provider: a turn lists and calls the example
// scratchpad server's tools through the kernel; /status and /metrics
// show its discovery state.
func TestSampleMCPProvider(t *testing.T) {
	n, nc := startConnected(t, sampleConfig(t, t.TempDir()))
	turn, err := client.New(nc, nil).Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"scratchpad"}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := turn.ListTools(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var aliases []string
	for _, tl := range l.Tools {
		aliases = append(aliases, tl.Alias)
	}
	if !slices.Equal(aliases, []string{"scratchpad_analyze", "scratchpad_delete", "scratchpad_get", "scratchpad_list", "scratchpad_put"}) {
		t.Fatalf("aliases %v", aliases)
	}
	if r, err := turn.Invoke(ctx(t), "scratchpad_put", []byte(`{"title":"plan","body":"ship it, then ship the docs"}`)); err != nil || r.IsError {
		t.Fatalf("put: %+v %v", r, err)
	}
	r, err := turn.Invoke(ctx(t), "scratchpad_analyze", []byte(`{"title":"plan","top":1}`))
	if err != nil || !strings.Contains(string(r.Structured), `"top":[{"count":2,"word":"ship"}]`) {
		t.Fatalf("analyze: %+v %v", r, err)
	}
	resp, err := http.Get("http://" + n.HTTPAddr() + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st node.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if len(st.MCP) != 1 || st.MCP[0].Server != "scratchpad" || st.MCP[0].State != mcpprovider.StateReady || st.MCP[0].Tools != 5 || st.MCP[0].Protocol != "2026-07-28" {
		t.Fatalf("status %+v", st)
	}
	mresp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer mresp.Body.Close()
	body, _ := io.ReadAll(mresp.Body)
	if !strings.Contains(string(body), `sharedos_mcp_discovery_state{profile="",server="scratchpad",state="ready"} 1`) {
		t.Fatalf("metrics lack the discovery gauge:\n%s", body)
	}
}
