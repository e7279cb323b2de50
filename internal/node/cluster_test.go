package node_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/auditstore"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/node"
	"github.com/sharedos/sharedos/reason"
)

// freePorts returns n loopback ports nobody listens on (just now).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// clusterNode is one node of a test cluster: its id and listeners.
type clusterNode struct {
	id, url, http string
}

// clusterYAML is the sample cluster.yaml as a cluster of size nodes on
// free loopback ports, under one temporary directory (which it returns):
// one credentials directory and key, the audit stream replicated on up to
// three nodes, each node's HTTP listener on when withHTTP. edits are
// further old, new replacements of the sample's text.
func clusterYAML(t *testing.T, size int, withHTTP bool, edits ...string) (yaml, dir string, nodes []clusterNode) {
	t.Helper()
	b, err := os.ReadFile("../../cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	edits = append([]string{"data_dir: ./data", "data_dir: " + dir, "http: 127.0.0.1:8321", "http: off",
		"stream: SHAREDOS_AUDIT", fmt.Sprintf("stream: SHAREDOS_AUDIT\n  replicas: %d", min(size, 3))}, edits...)
	ports := freePorts(t, 3*size)
	var sb strings.Builder
	sb.WriteString(strings.NewReplacer(edits...).Replace(string(b)))
	sb.WriteString("\ncluster:\n  name: test\n  nodes:\n")
	for i := range size {
		n := clusterNode{id: fmt.Sprintf("node-%d", i+1), url: fmt.Sprintf("nats://127.0.0.1:%d", ports[3*i]), http: "off"}
		if withHTTP {
			n.http = fmt.Sprintf("127.0.0.1:%d", ports[3*i+2])
		}
		fmt.Fprintf(&sb, "    - {id: %s, port: %d, cluster_port: %d, http: %s, data_dir: %s}\n",
			n.id, ports[3*i], ports[3*i+1], n.http, filepath.Join(dir, n.id))
		nodes = append(nodes, n)
	}
	return sb.String(), dir, nodes
}

// clusterConfig is clusterYAML's cluster of size nodes, parsed (HTTP off).
func clusterConfig(t *testing.T, size int) *config.Config {
	t.Helper()
	y, _, _ := clusterYAML(t, size, false)
	cfg, err := config.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startCluster starts every node of cfg at once (JetStream needs a quorum
// before any node's audit stream can be made); Cleanup stops them.
func startCluster(t *testing.T, cfg *config.Config) []*node.Node {
	t.Helper()
	nodes := make([]*node.Node, len(cfg.Cluster.Nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, cn := range cfg.Cluster.Nodes {
		wg.Go(func() {
			ncfg, err := cfg.ForNode(cn.ID)
			if err != nil {
				errs[i] = err
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			nodes[i], errs[i] = node.Start(ctx, ncfg, node.Options{Logger: slog.New(slog.DiscardHandler)})
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, n := range nodes {
			if n != nil {
				_ = n.Shutdown(context.Background())
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return nodes
}

// Three nodes, one bus: a turn opened through one node's server is driven
// through another's, by another connection; the audit is one stream every
// node reads; when the turn's node stops, its callers are answered at once
// and the other nodes keep serving.
func TestClusterServesATurnFromAnyNode(t *testing.T) {
	cfg := clusterConfig(t, 3)
	t0 := time.Now()
	nodes := startCluster(t, cfg)
	t.Logf("started in %v", time.Since(t0))

	opener := client.New(connectAs(t, nodes[0], "runtime"), nil)
	access := client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"text", "calendar"}}
	opened, err := opener.Open(ctx(t), access)
	if err != nil {
		t.Fatal(err)
	}
	var owner int
	for i, n := range nodes {
		if n.Kernel().Node() == opened.Handle.Node {
			owner = i
		}
	}
	// Driven by another connection, on a server that is neither the
	// opener's nor the turn's node's (when the opener's is the owner's,
	// the next one).
	other := (owner + 1) % 3
	if other == 0 {
		other = (owner + 2) % 3
	}
	driver := client.New(connectAs(t, nodes[other], "runtime"), nil)
	tr := driver.Resume(opened.Handle, opened.LeaseID, opened.Access())
	l, err := tr.ListTools(ctx(t))
	if err != nil || len(l.Tools) == 0 {
		t.Fatalf("list through another node's server: %v", err)
	}
	for _, alias := range []string{"text_stats", "calendar_between"} {
		args := `{"text":"a b b"}`
		if alias == "calendar_between" {
			args = `{"from":"2026-11-30","to":"2026-12-24"}`
		}
		res, err := tr.Invoke(ctx(t), alias, []byte(args))
		if err != nil || res.IsError || res.CatalogHash != l.CatalogHash {
			t.Fatalf("%s through another node's server: %+v %v", alias, res, err)
		}
	}

	// Every node reads the one stream: the turn's records are there.
	reader := nodes[(owner+1)%3]
	data, evs := readAll(t, connectAs(t, reader, "auditor"))
	n := 0
	for _, ev := range evs {
		if ev.TurnID == opened.Handle.TurnID {
			n++
		}
	}
	if n < 5 { // opened, resolved, listed, two invoked/completed pairs
		t.Fatalf("%d records of the turn in the stream read through node %d", n, (owner+1)%3+1)
	}
	if rep := audit.Verify(data, true); !rep.OK() {
		t.Fatalf("verify: %+v", rep)
	}
	// acme's reader, an account of its own, reads acme's records by push
	// through every node's server (its inbox is a stream import from the
	// nodes' account, wherever the stream's leader is).
	for i, via := range nodes {
		var mine int
		err := auditstore.ReadAll(ctx(t), connectAs(t, via, "auditor-acme"), auditstore.TailOptions{Filter: auditstore.TailFilter{Tenant: "acme"}, Push: true},
			func(_ []byte, ev *audit.Event) error {
				if ev != nil && ev.TurnID == opened.Handle.TurnID {
					mine++
				}
				return nil
			})
		if err != nil || mine != n {
			t.Fatalf("acme's reader through node %d: %d of the turn's %d records, %v", i+1, mine, n, err)
		}
	}

	// The turn's node stops: its turn's callers are answered at once.
	t.Logf("turn driven at %v", time.Since(t0))
	if err := nodes[owner].Shutdown(ctx(t)); err != nil {
		t.Fatal(err)
	}
	t.Logf("owner stopped at %v", time.Since(t0))
	short, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = tr.Invoke(short, "text_stats", []byte(`{"text":"a"}`))
	if !errors.Is(err, reason.ErrNodeUnavailable) && !errors.Is(err, reason.ErrTurnNotFound) && !errors.Is(err, reason.ErrTurnClosed) {
		t.Fatalf("a call on the stopped node's turn: %v, want node_unavailable, turn_not_found or turn_closed", err)
	}
	// The others keep serving, through whichever server the client is on.
	survivor := nodes[other]
	again, err := client.New(connectAs(t, survivor, "runtime"), nil).Open(ctx(t), access)
	if err != nil {
		t.Fatalf("open after a node stopped: %v", err)
	}
	if again.Handle.Node == opened.Handle.Node {
		t.Fatalf("opened on the stopped node %s", again.Handle.Node)
	}
	if _, err := again.Invoke(ctx(t), "text_stats", []byte(`{"text":"a"}`)); err != nil {
		t.Fatal(err)
	}
	t.Logf("served after the stop at %v", time.Since(t0))
}
