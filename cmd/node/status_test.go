package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/node"
)

// node status shows the sample MCP server unknown until a turn asks,
// then ready with its five tools.
func TestStatusCommand(t *testing.T) {
	n, _ := startSample(t, true)
	status := func() node.Status {
		t.Helper()
		code, out, errOut := runCLI(t, "status", "--http", n.HTTPAddr())
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var st node.Status
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return st
	}
	if st := status(); !st.Ready || len(st.MCP) != 0 {
		t.Fatalf("before any turn: %+v", st)
	}
	nc, err := n.Connect("runtime")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := client.New(nc, nil).ListTools(context.Background(), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"scratchpad"}}); err != nil {
		t.Fatal(err)
	}
	st := status()
	if len(st.MCP) != 1 || st.MCP[0].Server != "scratchpad" || st.MCP[0].State != "ready" || st.MCP[0].Tools != 5 {
		t.Fatalf("after a turn: %+v", st)
	}
}
