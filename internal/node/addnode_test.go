package node_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/reason"
)

// addNode writes the cluster's file with one more node (free ports, its
// own data directory), starts that node from it and waits for /readyz —
// docs/operations.md's "Adding": the running nodes keep their file and
// are not restarted; NATS gossips the new route to them.
func (pc *procCluster) addNode(t *testing.T, bin string) int {
	t.Helper()
	b, err := os.ReadFile(pc.config)
	if err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 3)
	id := fmt.Sprintf("node-%d", len(pc.ids)+1)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[2])
	y := strings.TrimRight(string(b), "\n") + fmt.Sprintf("\n    - {id: %s, port: %d, cluster_port: %d, http: %s, data_dir: %s}\n",
		id, ports[0], ports[1], httpAddr, filepath.Join(pc.dir, id))
	file := filepath.Join(pc.dir, "cluster-"+id+".yaml")
	if err := os.WriteFile(file, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, done := startNodeProc(t, filepath.Join(pc.dir, id+".log"), nil, bin, "--config", file, "--node", id, "--log-level", "warn")
	pc.ids, pc.urls, pc.http = append(pc.ids, id), append(pc.urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[0])), append(pc.http, httpAddr)
	pc.cmds, pc.exited = append(pc.cmds, cmd), append(pc.exited, done)
	i := len(pc.ids) - 1
	pc.waitReady(t, i, 90*time.Second)
	return i
}

// A fourth node is added to a running three-node cluster under load, as
// docs/operations.md says: its file lists the others, they are not
// restarted. It takes opens from the queue group at once, serves turns to
// clients on its own server and on the others', writes to the existing R3
// audit stream; then it is drained with SIGTERM. No call or open fails,
// and the trail is complete and verifies.
func TestFaultNodeAddedAndDrained(t *testing.T) {
	if testing.Short() || os.Getenv(faultLoadEnv) == "" {
		t.Skip("builds cmd/node and runs four node processes: make soak-faults (SHAREDOS_FAULT_LOAD set) runs it")
	}
	load := faultLoad(t, 2*time.Second)
	bin := buildNode(t, t.TempDir())
	pc := startProcCluster(t, bin)
	auditor := pc.connectAll(t, "auditor")
	access := client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"text"}}

	var (
		mu      sync.Mutex
		perNode = map[string]int{}
		calls   int
		failed  []error
		want    []auditKey
	)
	worker := func(c *client.Client, stop context.Context) {
		for stop.Err() == nil {
			octx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			tr, err := c.Open(octx, access)
			cancel()
			if err != nil {
				mu.Lock()
				failed = append(failed, fmt.Errorf("open: %w", err))
				mu.Unlock()
				continue
			}
			mu.Lock()
			perNode[tr.Handle.Node]++
			mu.Unlock()
			for range 5 {
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				rep, err := tr.Invoke(cctx, "text_stats", []byte(`{"text":"a b b"}`))
				cancel()
				mu.Lock()
				calls++
				if err != nil {
					failed = append(failed, fmt.Errorf("call on %s: %w (%s)", tr.Handle, err, reason.Of(err)))
				} else {
					want = append(want, auditKey{tr.Handle.TurnID, rep.CallID})
				}
				mu.Unlock()
			}
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := tr.Close(cctx); err != nil {
				mu.Lock()
				failed = append(failed, fmt.Errorf("close: %w", err))
				mu.Unlock()
			}
			cancel()
		}
	}
	stop, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	var wg sync.WaitGroup
	for range 4 {
		c := client.New(pc.connectAll(t, "runtime"), nil)
		wg.Go(func() { worker(c, stop) })
	}
	time.Sleep(load / 2)

	t0 := time.Now()
	added := pc.addNode(t, bin)
	id := pc.ids[added]
	readyIn := time.Since(t0)
	// A client on the new node's own server.
	own := client.New(pc.connect(t, added, "runtime"), nil)
	wg.Go(func() { worker(own, stop) })
	time.Sleep(load)

	mu.Lock()
	took := perNode[id]
	mu.Unlock()
	if took == 0 {
		t.Errorf("%s took no open in %v of load (opens by node: %v)", id, load, perNode)
	}
	t1 := time.Now()
	if err := pc.cmds[added].Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-pc.exited[added]:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not stop within 60s; log:\n%s", id, pc.log(added))
	}
	drained := time.Since(t1)
	if code := pc.cmds[added].ProcessState.ExitCode(); code != 0 {
		t.Errorf("%s exited %d; log:\n%s", id, code, pc.log(added))
	}
	time.Sleep(load / 2)
	stopLoad()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	// The worker on the drained node's server lost its server: its
	// connection moves to another (it learned the others from INFO).
	for _, err := range failed[:min(5, len(failed))] {
		t.Errorf("%v", err)
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d calls, opens and closes failed", len(failed), calls)
	}
	s := readSettled(t, auditor, want, nil)
	if len(s.missing) > 0 || s.twiceCompleted() > 0 || s.dups > 0 {
		t.Errorf("audit: %d answered calls missing, %d recorded twice, %d records twice", len(s.missing), s.twiceCompleted(), s.dups)
	}
	rep := audit.Verify(s.data, true)
	if !rep.OK() {
		t.Errorf("verify: %v", rep.Violations[:min(3, len(rep.Violations))])
	}
	t.Logf("FIGURES node added under load: %s ready %v after start; opens by node %v; %d calls, %d failed; drained and stopped in %v; audit %d records, verify ok=%v",
		id, readyIn.Round(time.Millisecond), perNode, calls, len(failed), drained.Round(time.Millisecond), len(s.data), rep.OK())
}
