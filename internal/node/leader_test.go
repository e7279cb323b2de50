package node_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/node"
	"github.com/sharedos/sharedos/reason"
)

// leaderLoad runs calls on turns of the given nodes, each worker on its
// own connection and turn (a new turn before the step ceiling), until
// stop. It records every call answered and every refusal.
type leaderLoad struct {
	mu       sync.Mutex
	answered map[string]bool // "turn/call" of calls whose result a caller received
	refused  map[reason.Code]int
	other    []error
	// victim is the node stopped under load; its turns' callers may be
	// answered node_unavailable, turn_not_found or turn_closed.
	victim       string
	victimRefuse map[reason.Code]int
	// gaps: the longest time a worker waited between two answered calls.
	longest time.Duration
}

func (l *leaderLoad) run(t *testing.T, n *node.Node, stop <-chan struct{}, wg *sync.WaitGroup) {
	c := client.New(connectAs(t, n, "runtime"), nil)
	wg.Go(func() {
		last := time.Now()
		for {
			tr, err := c.Open(context.Background(), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"text"}})
			if err != nil {
				l.note(err, "")
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
					continue
				}
			}
			for range 60 {
				select {
				case <-stop:
					_ = tr.Close(context.Background())
					return
				default:
				}
				cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				res, err := tr.Invoke(cctx, "text_stats", []byte(`{"text":"a b"}`))
				cancel()
				if err != nil {
					l.note(err, tr.Handle.Node)
					break // the turn may have failed closed: take a new one
				}
				now := time.Now()
				l.mu.Lock()
				l.answered[tr.Handle.TurnID+"/"+res.CallID] = true
				l.longest = max(l.longest, now.Sub(last))
				l.mu.Unlock()
				last = now
			}
			_ = tr.Close(context.Background())
		}
	})
}

func (l *leaderLoad) note(err error, turnNode string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var re *reason.Error
	if errors.As(err, &re) {
		if turnNode != "" && turnNode == l.victim {
			l.victimRefuse[re.Code]++
			return
		}
		l.refused[re.Code]++
		return
	}
	l.other = append(l.other, err)
}

// The audit stream's leader changes under load — stepped down twice, then
// the server that leads it stopped with its node: publishes are retried
// within the call's deadline, so no call on the surviving nodes is refused
// audit_unavailable, and every call a caller saw answered has its
// tool.invoked and tool.completed in the stream.
func TestAuditLeaderLossUnderLoad(t *testing.T) {
	cfg := clusterConfig(t, 3)
	nodes := startCluster(t, cfg)
	admin := connectAs(t, nodes[0], "node")
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	// leaderOf is the stream leader's server, "" while there is none or
	// the cluster is too busy to say (asked again by the callers).
	leaderOf := func() string {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := js.Stream(c, cfg.Audit.Stream)
		if err != nil {
			return ""
		}
		if cl := s.CachedInfo().Cluster; cl != nil {
			return cl.Leader
		}
		return ""
	}
	// stepDown asks the stream's leader to step down (to the server
	// preferred, when not "") and waits for another to lead.
	stepDown := func(preferred string) {
		t.Helper()
		// Generous bounds: CI runs other packages' clusters beside this one.
		before := ""
		for deadline := time.Now().Add(60 * time.Second); before == ""; {
			if before = leaderOf(); before == "" {
				if time.Now().After(deadline) {
					t.Fatal("the stream has no leader")
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		var body []byte
		if preferred != "" {
			body = fmt.Appendf(nil, `{"placement":{"preferred":%q}}`, preferred)
		}
		rep, err := admin.Request("$JS.API.STREAM.LEADER.STEPDOWN."+cfg.Audit.Stream, body, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(rep.Data), `"error"`) {
			t.Fatalf("step-down: %s", rep.Data)
		}
		for deadline := time.Now().Add(60 * time.Second); ; {
			if l := leaderOf(); l != "" && l != before {
				t.Logf("stream leader %s → %s", before, l)
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("no new stream leader")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// The load's clients are on two nodes' servers (their opens land on
	// any node); the third node, the victim, is stopped at the end, while
	// its server leads the stream.
	const victim = 2
	victimServer := "sharedos-" + nodes[victim].Kernel().Node()
	load := &leaderLoad{answered: map[string]bool{}, refused: map[reason.Code]int{},
		victim: nodes[victim].Kernel().Node(), victimRefuse: map[reason.Code]int{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, n := range nodes[:victim] {
		for range 3 {
			load.run(t, n, stop, &wg)
		}
	}
	time.Sleep(time.Second)
	stepDown("")
	time.Sleep(time.Second)
	stepDown("")
	time.Sleep(time.Second)
	// The victim leads when it stops: a step-down that prefers it. (Up to
	// six plain step-downs could leave another leading — (2/3)^6, about
	// one run in eleven if elections are even — and a follower stopped.)
	if leaderOf() != victimServer {
		stepDown(victimServer)
	}
	if l := leaderOf(); l != victimServer {
		t.Fatalf("stream leader %s after a step-down to %s", l, victimServer)
	}
	t.Logf("stopping %s (stream leader %s)", nodes[victim].Kernel().Node(), victimServer)
	if err := nodes[victim].Shutdown(ctx(t)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()

	load.mu.Lock()
	defer load.mu.Unlock()
	t.Logf("answered %d calls; refusals %v (of the stopped node's turns: %v); other errors %d; longest wait between a worker's answered calls %v",
		len(load.answered), load.refused, load.victimRefuse, len(load.other), load.longest)
	if load.refused[reason.AuditUnavailable] > 0 {
		t.Errorf("%d calls refused audit_unavailable while the stream's leader changed", load.refused[reason.AuditUnavailable])
	}
	// Calls on the surviving nodes' turns are never refused; the stopped
	// node's turns' callers are told so.
	for code, n := range load.refused {
		t.Errorf("%d calls on surviving nodes' turns refused %s", n, code)
	}
	for code, n := range load.victimRefuse {
		if code != reason.NodeUnavailable && code != reason.TurnNotFound && code != reason.TurnClosed {
			t.Errorf("%d calls on the stopped node's turns refused %s", n, code)
		}
	}
	if len(load.other) > 0 {
		t.Errorf("%d calls failed: %v", len(load.other), load.other[0])
	}
	if len(load.answered) == 0 {
		t.Fatal("no call answered")
	}

	// Every answered call is in the stream, invoked and completed.
	survivor := nodes[0]
	data, evs := readAll(t, connectAs(t, survivor, "auditor"))
	invoked, completed := map[string]bool{}, map[string]bool{}
	for _, ev := range evs {
		if ev.Call == nil {
			continue
		}
		key := ev.TurnID + "/" + ev.Call.ID
		switch ev.Type {
		case audit.ToolInvoked:
			invoked[key] = true
		case audit.ToolCompleted:
			completed[key] = true
		}
	}
	var lost []string
	for key := range load.answered {
		if !invoked[key] || !completed[key] {
			lost = append(lost, key)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d answered calls without their records, e.g. %v", len(lost), lost[:min(3, len(lost))])
	}
	if rep := audit.Verify(data, true); !rep.OK() {
		t.Fatalf("verify: %s", fmt.Sprint(rep.Violations))
	}
}
