package node_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/reason"
)

// pauseCall is one call of the pause test's load.
type pauseCall struct {
	worker       int
	via          string // the server the caller is connected to
	node, turn   string
	callID       string
	nth          int // the call's place on its turn (1: the first, which resolves the catalogue)
	start        time.Time
	took         time.Duration
	code         reason.Code // "" when it succeeded
	onVictimTurn bool
}

// pausePhase says when a call started: before the pause, during it, or
// after the resume.
type pausePhase int

const (
	beforePause pausePhase = iota
	duringPause
	afterResume
)

// A node process is stopped with SIGSTOP for twice the callers' deadline
// while runtime clients on the two other nodes' servers call tools in
// turns open on all three, then resumed with SIGCONT. Its embedded server
// stops with it: its routes go quiet and the R3 audit stream loses a
// replica for the pause. Every call is answered or refused within its
// deadline; the other nodes' turns keep being served (a call there fails
// only when a new turn's catalogue waits for the paused node's calendar
// provider, or when the resumed node's Raft election leaves the audit
// stream without a leader for a while: each checked); nothing is answered
// twice (each request has its own reply subject, and every reply, even
// one after the caller gave up, is counted); the resumed node serves its
// turns again; and once the cluster settles every call a caller got a
// result for has tool.invoked and tool.completed in the stream, nothing
// is stored twice, and the trail verifies: the stale work the resumed
// node finds in its buffers breaks no chain.
func TestFaultNodePaused(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/node and runs three node processes")
	}
	load := faultLoad(t, time.Second)
	const (
		workers      = 9               // 0-5 hold a turn (two on each node); 6-8 rotate
		holders      = 6               //
		callTimeout  = 3 * time.Second // each caller's deadline
		callsPerTurn = 25              // a rotating worker closes its turn then and opens another
	)
	pause := max(2*callTimeout, load/4)
	t0 := time.Now()
	bin := buildNode(t, t.TempDir())
	t1 := time.Now()
	pc := startProcCluster(t, bin)
	t.Logf("cmd/node built in %v; three processes ready in %v", t1.Sub(t0).Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))

	// The victim does not lead the audit stream: pausing the leader is
	// the leader fault's (docs/operations.md).
	leader, victim, survivors := nonLeader(t, pc)
	t.Logf("audit stream leader %s; pausing %s", leader, pc.ids[victim])
	pc.stopAtCleanup(t, victim) // first: it holds the stale opens' turns, closed at shutdown while the stream has its quorum
	auditorNC := pc.connect(t, survivors[0], "auditor")

	// Four runtime connections, two on each survivor's server; calls go
	// through an answerBook per connection, opens and closes through the
	// client.
	type conn struct {
		c      *client.Client
		book   *answerBook
		server string // the node whose server it is connected to
	}
	var conns []conn
	for k := range 4 {
		nc := pc.connect(t, survivors[k%2], "runtime")
		conns = append(conns, conn{client.New(nc, nil), newAnswerBook(t, nc), pc.ids[survivors[k%2]]})
	}
	access := client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"text"}}

	var (
		mu                  sync.Mutex
		calls               []pauseCall
		opens               = map[reason.Code]int{}
		openErrs            = map[reason.Code]string{} // the first of each code but deadline_exceeded
		abandoned           []*client.Turn             // turns left after a failed call
		pausedAt, resumedAt time.Time
	)
	phaseOf := func(at time.Time) pausePhase {
		switch {
		case pausedAt.IsZero() || at.Before(pausedAt):
			return beforePause
		case resumedAt.IsZero() || at.Before(resumedAt):
			return duringPause
		}
		return afterResume
	}
	noteOpen := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		code := reason.Of(err)
		opens[code]++
		if code != "" && code != reason.DeadlineExceeded && openErrs[code] == "" {
			openErrs[code] = err.Error()
		}
	}
	stop, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	var wg sync.WaitGroup
	// The audit stream's leader as a survivor's server sees it.
	leaders := watchLeader(t, pc.connect(t, survivors[1], "auditor"), stop, &wg)
	ready := make(chan struct{}, workers)
	var workersWG sync.WaitGroup
	for w := range workers {
		workersWG.Go(func() {
			cn := conns[w%len(conns)]
			// Each worker starts on a turn of node w%3. A holder keeps its
			// turn through deadline_exceeded (its node may come back) and
			// takes a new one on any other refusal; a rotating worker
			// takes a new one every callsPerTurn calls and on any failure.
			tr, err := openOn(stop, cn.c, access, pc.ids[w%3], callTimeout, noteOpen)
			ready <- struct{}{}
			n := 0
			for stop.Err() == nil {
				if err != nil || (w >= holders && n == callsPerTurn) {
					switch {
					case tr != nil && err == nil:
						cctx, cancel := context.WithTimeout(context.Background(), callTimeout)
						_ = tr.Close(cctx)
						cancel()
					case tr != nil: // closed once the load is over (its node may be paused)
						mu.Lock()
						abandoned = append(abandoned, tr)
						mu.Unlock()
					}
					if tr, err = openOn(stop, cn.c, access, "", callTimeout, noteOpen); err != nil {
						return
					}
					n = 0
				}
				n++
				start := time.Now()
				code, callID, _ := cn.book.invoke(tr, "text_stats", []byte(`{"text":"a b b c c c"}`), callTimeout)
				c := pauseCall{worker: w, via: cn.server, node: tr.Handle.Node, turn: tr.Handle.TurnID, callID: callID, nth: n, start: start,
					took: time.Since(start), code: code, onVictimTurn: tr.Handle.Node == pc.ids[victim]}
				mu.Lock()
				calls = append(calls, c)
				mu.Unlock()
				switch {
				case code == "" || code == "tool_error":
				case code == reason.DeadlineExceeded && w < holders:
				default:
					err = reason.New(code, "call failed") // a new turn for the next call
				}
			}
			if tr != nil {
				cctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				_ = tr.Close(cctx)
				cancel()
			}
		})
	}
	for range workers {
		select {
		case <-ready:
		case <-time.After(60 * time.Second):
			t.Fatal("workers could not open their turns in 60s")
		}
	}
	// Whatever happens below, the victim is not left stopped (cleanups
	// run last-first: this one before the cluster's SIGTERM).
	proc := pc.cmds[victim].Process
	t.Cleanup(func() { _ = proc.Signal(syscall.SIGCONT) })

	time.Sleep(load) // load before the pause (the test's sleeps are the load's and the pause's durations)
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	pausedAt = time.Now()
	mu.Unlock()
	time.Sleep(pause)
	if err := proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	resumedAt = time.Now()
	mu.Unlock()
	// Load after the resume: long enough for every call made during the
	// pause to reach its deadline and its caller to call again.
	time.Sleep(load + callTimeout)

	// The resumed node takes a fresh turn and serves it.
	probe := conns[0]
	pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	ptr, err := openOn(pctx, probe.c, access, pc.ids[victim], callTimeout, noteOpen)
	cancel()
	if err != nil {
		t.Fatalf("opening a turn on the resumed %s: %v", pc.ids[victim], err)
	}
	probeCode, probeCall, _ := probe.book.invoke(ptr, "text_stats", []byte(`{"text":"back"}`), 10*time.Second)
	if probeCode != "" {
		t.Errorf("a call on a fresh turn of the resumed %s: %s", pc.ids[victim], probeCode)
	}
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = ptr.Close(cctx)
	cancel()
	stopLoad()
	workersWG.Wait()
	wg.Wait()
	loadEnd := time.Now()
	// The turns left after a failed call are closed (their nodes all
	// serve again), so that no node stops with a turn open but the
	// stale opens' on the resumed node, which nobody knows of.
	for _, tr := range abandoned {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = tr.Close(cctx)
		cancel()
	}

	// The figures, from the callers' side.
	mu.Lock()
	defer mu.Unlock()
	pauseLen := resumedAt.Sub(pausedAt)
	type side struct {
		calls, ok int
		codes     map[reason.Code]int
	}
	var victimSide, survivorSide [3]side // by phase
	for i := range 3 {
		victimSide[i].codes, survivorSide[i].codes = map[reason.Code]int{}, map[reason.Code]int{}
	}
	var (
		hung        int
		longest     time.Duration
		backAfter   time.Duration // from the resume to the first answered call on one of the victim's turns
		want        []auditKey
		inFlightOld int // calls on the victim's turns that were in flight at the pause or started during it
		stalled     int // of them, those that waited out their deadline
		// survivorFailed are the failed calls on the other nodes' turns,
		// judged once the audit is read.
		survivorFailed []pauseCall
	)
	for _, c := range calls {
		ph := phaseOf(c.start)
		s := &survivorSide[ph]
		if c.onVictimTurn {
			s = &victimSide[ph]
			if ph == duringPause || c.start.Add(c.took).After(pausedAt) && ph == beforePause {
				inFlightOld++
				if c.code == reason.DeadlineExceeded {
					stalled++
				}
			}
			if ph == afterResume && c.code == "" && (backAfter == 0 || c.start.Add(c.took).Sub(resumedAt) < backAfter) {
				backAfter = c.start.Add(c.took).Sub(resumedAt)
			}
		}
		s.calls++
		if c.code == "" {
			s.ok++
		} else {
			s.codes[c.code]++
		}
		if c.code == "" || c.code == "tool_error" {
			want = append(want, auditKey{c.turn, c.callID})
		}
		longest = max(longest, c.took)
		if c.took > callTimeout+2*time.Second {
			hung++
		}
		if !c.onVictimTurn && c.code != "" {
			survivorFailed = append(survivorFailed, c)
		}
		if c.onVictimTurn {
			// policy_stale: a call the paused node decided on waking,
			// before it had confirmed its view of the policy again (it
			// heard nothing for longer than policy.max_staleness).
			switch c.code {
			case "", reason.DeadlineExceeded, reason.TurnNotFound, reason.NodeUnavailable, reason.TurnClosed, reason.PolicyStale:
			default:
				t.Errorf("a call on the paused node's turn %s: %s, want success, deadline_exceeded, turn_not_found, node_unavailable, turn_closed or policy_stale", c.turn, c.code)
			}
		}
	}
	if probeCode == "" {
		want = append(want, auditKey{ptr.Handle.TurnID, probeCall})
	}
	if hung > 0 {
		t.Errorf("%d calls answered later than their deadline (%v) plus 2s", hung, callTimeout)
	}
	// The longest refusal window: for each worker, the longest time from a
	// failed call to its next successful call.
	attempts := make([]attempt, len(calls))
	for i, c := range calls {
		attempts[i] = attempt{worker: c.worker, start: c.start, took: c.took, failed: c.code != ""}
	}
	window := refusalWindow(attempts, loadEnd)
	var books tally
	var stale []auditKey // calls answered with a result only after their caller gave up
	for _, cn := range conns {
		books.add(cn.book.tally())
		for _, a := range cn.book.answers() {
			if a.late == nil {
				continue
			}
			if code, rep := invokeOutcome(a.late); code == "" || code == "tool_error" {
				stale = append(stale, auditKey{a.tag, rep.CallID})
			}
		}
	}
	if books.twice > 0 {
		t.Errorf("%d requests answered more than once", books.twice)
	}
	if books.strays > 0 {
		t.Errorf("%d replies to no request", books.strays)
	}
	if stalled == 0 {
		t.Errorf("none of the %d calls on the paused node's turns in flight at the pause or made during it waited out its deadline: the fault was not exercised", inFlightOld)
	}

	// The audit, once the cluster settles.
	// The stale calls the resumed node carried out are recorded too.
	s := readSettled(t, auditorNC, append(want, stale...), nil)
	rep := audit.Verify(s.data, true)
	if !rep.OK() {
		t.Errorf("the trail does not verify: %+v", rep.Violations)
	}
	for _, k := range s.missing {
		t.Errorf("answered but not in the audit: turn %s call %s (invoked %d, completed %d)", k.turn, k.call, s.invoked[k], s.completed[k])
	}
	if s.dups > 0 {
		t.Errorf("%d records stored twice", s.dups)
	}
	// A call on another node's turn may fail in one way only: it is the
	// first call of a new turn, which resolves the turn's catalogue, and a
	// provider hosted by every node in a queue group (calendar) was asked
	// on the paused node: the resolution waits until the node resumes or
	// the resolve timeout (5s) passes, and the caller's deadline passes
	// first, or too little of it is left for the decision and the call's
	// two records (the node is told 90% of it). The trail shows it: the
	// turn's tool.catalog.resolved is recorded 80% or more of the
	// caller's deadline after the call, a provider having taken 1s or more.
	// Or the audit stream had no leader during the call: the resumed
	// node, its Raft election timer expired while it was stopped, may call
	// an election at a higher term, which makes the leader step down; the
	// records of every node wait for a new leader (the writer retries
	// within its retry window) and a caller's deadline may pass. The poll
	// of the leader shows it ("none" or "?"), give or take its own 2s.
	var resolveStalled, electionStalled int
	var unexplained []pauseCall
	for _, c := range survivorFailed {
		at := c.start.Sub(pausedAt).Round(time.Millisecond)
		r, ok := s.resolutions[c.turn]
		if c.nth == 1 && c.code == reason.DeadlineExceeded && ok && r.took >= time.Second && r.at.Sub(c.start) >= callTimeout*8/10 {
			resolveStalled++
			t.Logf("the first call on %s's new turn %s (started at %+v of the pause) waited for its catalogue, resolved %v after the call started: slowest %s, failed %v",
				c.node, c.turn, at, r.at.Sub(c.start).Round(time.Millisecond), r.slowest, r.failed)
			continue
		}
		if l, ok := leaders.leaderless(c.start.Add(-2*time.Second), c.start.Add(c.took+2*time.Second), loadEnd); ok && c.code == reason.DeadlineExceeded {
			electionStalled++
			t.Logf("call %d on %s's turn %s (started at %+v of the pause) waited out its deadline while the audit stream had no leader (%s from %+v)",
				c.nth, c.node, c.turn, at, l.leader, l.at.Sub(pausedAt).Round(10*time.Millisecond))
			continue
		}
		t.Errorf("call %d on %s's turn %s through %s's server, started at %+v of the pause, failed: %s (its catalogue resolved %v after the call started: slowest %s)",
			c.nth, c.node, c.turn, c.via, at, c.code, r.at.Sub(c.start).Round(time.Millisecond), r.slowest)
		unexplained = append(unexplained, c)
	}
	// What the nodes logged (warnings and errors) around an unexplained failure.
	if len(unexplained) > 0 {
		from, to := unexplained[0].start.Add(-3*time.Second), unexplained[len(unexplained)-1].start.Add(callTimeout+time.Second)
		for i := range pc.ids {
			for _, l := range strings.Split(pc.log(i), "\n") {
				ts, _, _ := strings.Cut(strings.TrimPrefix(l, `{"time":"`), `"`)
				if at, err := time.Parse(time.RFC3339Nano, ts); err == nil && !at.Before(from) && !at.After(to) {
					t.Logf("%s at %+v of the pause: %s", pc.ids[i], at.Sub(pausedAt).Round(time.Millisecond), l)
				}
			}
		}
	}
	twice := s.twiceCompleted()
	if twice > 0 {
		t.Errorf("%d calls with two tool.invoked or two tool.completed records", twice)
	}

	t.Logf("FIGURES SIGSTOP of %s (not the audit leader %s) for %v (caller deadline %v), %v of load before, %v after the resume; %d workers on 4 connections to the other nodes' servers (%d holding a turn, two on each node, %d opening a new turn every %d calls)",
		pc.ids[victim], leader, pauseLen.Round(time.Millisecond), callTimeout, load, load+callTimeout, workers, holders, workers-holders, callsPerTurn)
	names := [3]string{"before the pause", "during the pause", "after the resume"}
	for ph := range 3 {
		t.Logf("FIGURES %s: on the paused node's turns %d calls, %d ok, refused %v; on the other nodes' turns %d calls, %d ok, refused %v",
			names[ph], victimSide[ph].calls, victimSide[ph].ok, victimSide[ph].codes, survivorSide[ph].calls, survivorSide[ph].ok, survivorSide[ph].codes)
	}
	t.Logf("FIGURES the audit stream's leader, polled through %s (times from the pause, resumed at %+v): %s; without a leader for %v",
		pc.ids[survivors[1]], pauseLen.Round(10*time.Millisecond), leaders.since(pausedAt), leaders.leaderlessFor(loadEnd).Round(10*time.Millisecond))
	var slow []string // resolutions that took a second or more
	for turn, r := range s.resolutions {
		if r.took >= time.Second {
			slow = append(slow, turn+": "+r.slowest)
		}
	}
	slices.Sort(slow)
	t.Logf("FIGURES the other nodes' turns: %d failed calls: %d the first call of a new turn waiting for its catalogue, %d waiting while the audit stream had no leader; catalogue resolutions that waited 1s or more for a provider: %d %v",
		len(survivorFailed), resolveStalled, electionStalled, len(slow), slow)
	t.Logf("FIGURES the paused node's turns answered again %v after the resume; a fresh turn on it: call %q; opens %v %v",
		backAfter.Round(time.Millisecond), probeCode, opens, openErrs)
	t.Logf("FIGURES replies: %d requests, %d answered in time, %d answered only after the caller gave up (late: %v; %d of them carried out, their records in the trail), %d answered twice, %d never answered, %d stray replies",
		books.sent, books.inTime, books.late, books.lateCodes, len(stale), books.twice, books.never, books.strays)
	t.Logf("FIGURES longest answer %v (deadline %v), answered past deadline+2s %d; longest refusal window (a caller's failed call to its next success) %v",
		longest.Round(time.Millisecond), callTimeout, hung, window.Round(time.Millisecond))
	t.Logf("FIGURES audit: %d records, settled %v after the load (%d reads failed), acked-lost %d, duplicates %d, calls invoked or completed twice %d, invoked but never completed %v, verify ok=%v (%d turns, %d closed, %d checkpoints); turns closed by reason %v",
		len(s.data), s.took.Round(time.Millisecond), s.readErrs, len(s.missing), s.dups, twice, s.neverCompleted(), rep.OK(), rep.Turns, rep.Closed, rep.Checkpoints, s.closedBy)
}
