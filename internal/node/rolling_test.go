package node_test

import (
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/reason"
)

// restart starts node i's process again with the same command line and
// waits for /readyz; Cleanup stops it as it stops the others.
func (pc *procCluster) restart(t *testing.T, i int, bin string) {
	t.Helper()
	pc.cmds[i], pc.exited[i] = startNodeProc(t, filepath.Join(pc.dir, pc.ids[i]+".log"), nil, bin,
		"--config", pc.config, "--node", pc.ids[i], "--log-level", "warn")
	pc.waitReady(t, i, 90*time.Second)
}

// waitReady waits for node i's /readyz to answer 200.
func (pc *procCluster) waitReady(t *testing.T, i int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		resp, err := http.Get("http://" + pc.http[i] + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-pc.exited[i]:
			t.Fatalf("%s exited while starting; log:\n%s", pc.ids[i], pc.log(i))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after %v; log:\n%s", pc.ids[i], limit, pc.log(i))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitReplicasCurrent waits until the audit stream has a leader and
// every replica is current: only then may the next node go, or the
// stream would lose its quorum.
func waitReplicasCurrent(t *testing.T, nc *nats.Conn, limit time.Duration) time.Duration {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := js.Stream(ctx, "SHAREDOS_AUDIT")
		cancel()
		if err == nil {
			ci := s.CachedInfo().Cluster
			ok := ci != nil && ci.Leader != "" && len(ci.Replicas) == 2
			for _, r := range ci.Replicas {
				ok = ok && r.Current && !r.Offline
			}
			if ok {
				return time.Since(start)
			}
		}
		if time.Since(start) > limit {
			t.Fatalf("the audit stream's replicas not current after %v (last error %v)", limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// connectAll connects as identity name with every node's URL, so the
// connection moves to another server when its own restarts.
func (pc *procCluster) connectAll(t *testing.T, name string) *nats.Conn {
	t.Helper()
	auth, err := client.CredentialOptions(identity.SeedFile(pc.creds, name))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(strings.Join(pc.urls, ","), append(auth, nats.Name("rolling-"+name),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.ReconnectJitter(50*time.Millisecond, 50*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// All three node processes are restarted one after another with SIGTERM
// while runtime clients open turns, call tools in them and close them.
// Each node drains (its turns are served to their end; opens go to the
// others), stops, starts again and catches up before the next goes. The
// clients are the Go client with its defaults: opens that no node took
// are sent again, and a listing or call whose answer was lost while the
// client's connection moved to another server is sent again with the
// same request id (the turn answers it from the first execution). No
// call fails, no open fails, and every answered call is in the audit
// trail exactly once.
func TestFaultRollingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/node and runs three node processes")
	}
	load := faultLoad(t, 2*time.Second)
	const (
		workers      = 6
		callsPerTurn = 10
		callTimeout  = 10 * time.Second
	)
	bin := buildNode(t, t.TempDir())
	pc := startProcCluster(t, bin)
	auditor := pc.connectAll(t, "auditor")

	type call struct {
		node, turn, callID string
		took               time.Duration
		code               reason.Code
		err                error
	}
	var (
		mu         sync.Mutex
		calls      []call
		openFails  = map[reason.Code]int{}
		closeFails []error
		opens      int
		resent     uint64
		perNode    = map[string]int{}
	)
	stop, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	var wg sync.WaitGroup
	access := client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"text"}}
	for range workers {
		c := client.New(pc.connectAll(t, "runtime"), nil)
		wg.Go(func() {
			defer func() {
				mu.Lock()
				resent += c.Resent()
				mu.Unlock()
			}()
			for stop.Err() == nil {
				octx, cancel := context.WithTimeout(context.Background(), callTimeout)
				tr, err := c.Open(octx, access)
				cancel()
				mu.Lock()
				if err != nil {
					openFails[reason.Of(err)]++
					mu.Unlock()
					t.Errorf("open failed: %v", err)
					continue
				}
				opens++
				perNode[tr.Handle.Node]++
				mu.Unlock()
				for range callsPerTurn {
					cctx, cancel := context.WithTimeout(context.Background(), callTimeout)
					start := time.Now()
					rep, err := tr.Invoke(cctx, "text_stats", []byte(`{"text":"a b b c c c"}`))
					cancel()
					k := call{node: tr.Handle.Node, turn: tr.Handle.TurnID, took: time.Since(start), err: err}
					if err != nil {
						k.code = reason.Of(err)
					} else {
						k.callID = rep.CallID
					}
					mu.Lock()
					calls = append(calls, k)
					mu.Unlock()
				}
				cctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				if err := tr.Close(cctx); err != nil {
					mu.Lock()
					closeFails = append(closeFails, err)
					mu.Unlock()
				}
				cancel()
			}
		})
	}

	type restarted struct {
		id                       string
		stopped, ready, caughtUp time.Duration
	}
	var rounds []restarted
	time.Sleep(load)
	for i := range pc.ids {
		t0 := time.Now()
		if err := pc.cmds[i].Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-pc.exited[i]:
		case <-time.After(60 * time.Second):
			t.Fatalf("%s did not stop within 60s of SIGTERM; log:\n%s", pc.ids[i], pc.log(i))
		}
		if code := pc.cmds[i].ProcessState.ExitCode(); code != 0 {
			t.Errorf("%s exited %d after SIGTERM; log:\n%s", pc.ids[i], code, pc.log(i))
		}
		r := restarted{id: pc.ids[i], stopped: time.Since(t0)}
		t1 := time.Now()
		pc.restart(t, i, bin)
		r.ready = time.Since(t1)
		r.caughtUp = waitReplicasCurrent(t, auditor, 60*time.Second)
		rounds = append(rounds, r)
		time.Sleep(load / 2)
	}
	time.Sleep(load / 2)
	stopLoad()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	var failed []call
	var want []auditKey
	var longest time.Duration
	lat := make([]time.Duration, 0, len(calls))
	for _, c := range calls {
		longest = max(longest, c.took)
		lat = append(lat, c.took)
		if c.err != nil {
			failed = append(failed, c)
			continue
		}
		want = append(want, auditKey{c.turn, c.callID})
	}
	slices.Sort(lat)
	byCode := map[reason.Code]int{}
	for _, c := range failed {
		byCode[c.code]++
	}
	for _, c := range failed[:min(5, len(failed))] {
		t.Errorf("a call on %s's turn %s failed after %v: %v", c.node, c.turn, c.took.Round(time.Millisecond), c.err)
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d calls failed (%v); a rolling restart must fail none", len(failed), len(calls), byCode)
	}
	for _, err := range closeFails[:min(3, len(closeFails))] {
		t.Errorf("closing a turn: %v", err)
	}
	if len(want) == 0 {
		t.Fatal("no call answered")
	}
	s := readSettled(t, auditor, want, nil)
	if len(s.missing) > 0 {
		t.Errorf("%d answered calls have no tool.invoked + tool.completed, e.g. %v", len(s.missing), s.missing[0])
	}
	if n := s.twiceCompleted(); n > 0 {
		t.Errorf("%d calls recorded twice", n)
	}
	if s.dups > 0 {
		t.Errorf("%d records stored twice", s.dups)
	}
	rep := audit.Verify(s.data, true)
	if !rep.OK() {
		t.Errorf("verify: %v", rep.Violations[:min(3, len(rep.Violations))])
	}

	q := func(p float64) time.Duration {
		return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(time.Millisecond)
	}
	t.Logf("FIGURES rolling restart of 3 node processes with SIGTERM under load: %d workers (Go client defaults: resend after 2s, 3 open attempts), turns of %d calls, caller deadline %v, %v of load before the first restart and %v between",
		workers, callsPerTurn, callTimeout, load, load/2)
	for _, r := range rounds {
		t.Logf("FIGURES %s: drained and stopped in %v, ready %v after starting again, audit replicas current %v later",
			r.id, r.stopped.Round(time.Millisecond), r.ready.Round(time.Millisecond), r.caughtUp.Round(time.Millisecond))
	}
	t.Logf("FIGURES calls %d: failed %d %v; opens %d (by node %v), failed after retries %v; closes failed %d; requests resent by clients %d",
		len(calls), len(failed), byCode, opens, perNode, openFails, len(closeFails), resent)
	t.Logf("FIGURES call latency p50 %v, p99 %v, p99.9 %v, max %v", q(0.5), q(0.99), q(0.999), longest.Round(time.Millisecond))
	t.Logf("FIGURES audit: %d records, answered calls without their records %d, calls recorded twice %d, records stored twice %d, verify ok=%v (%d turns); settled %v after the load",
		len(s.data), len(s.missing), s.twiceCompleted(), s.dups, rep.OK(), rep.Turns, s.took.Round(time.Millisecond))
}
