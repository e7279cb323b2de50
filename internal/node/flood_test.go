package node_test

import (
	"context"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

// One node of the three-process cluster gets ten times what it serves:
// its capacity is measured first (closed-loop callers on its turns), then
// ten times that rate is offered open-loop (requests sent on a schedule,
// none waiting for another's answer), each request with its own deadline
// and its own reply subject. Every request gets exactly one answer — a
// result or a typed refusal, overloaded expected — within its deadline
// plus a margin; none is silently dropped. The node's peak resident
// memory stays bounded; it serves a fresh turn after the flood; and the
// trail verifies with every answered call's records in it.
func TestFaultNodeFlooded(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/node and runs three node processes")
	}
	// The flood lasts SHAREDOS_FAULT_LOAD, at most 20s: longer repeats
	// itself, while the test's own memory (every request and its reply,
	// under the race detector) and the audit to read grow with it.
	flood := min(faultLoad(t, 2*time.Second), 20*time.Second)
	const (
		measure  = 2 * time.Second // closed-loop capacity measurement
		callers  = 32              // closed-loop callers measuring it
		turns    = 16              // turns on the flooded node (32 calls in flight each at most)
		senders  = 8               // open-loop senders of the flood
		factor   = 10              // the flood is this many times the capacity
		deadline = 5 * time.Second // each request's
		margin   = 2 * time.Second // an answer later than deadline+margin counts as none
		peakCap  = 1 << 30         // the flooded node's peak RSS must stay under this
	)
	t0 := time.Now()
	bin := buildNode(t, t.TempDir())
	t1 := time.Now()
	pc := startProcCluster(t, bin)
	pc.stopAtCleanup(t)
	t.Logf("cmd/node built in %v; three processes ready in %v", t1.Sub(t0).Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
	_, target, others := nonLeader(t, pc)
	pid := pc.cmds[target].Process.Pid
	auditorNC := pc.connect(t, others[0], "auditor")

	// Four runtime connections to the flooded node's own server, each
	// with its book; their asynchronous errors (a slow consumer would
	// drop replies on the test's side) are counted.
	var connErrs atomic.Int64
	type conn struct {
		c    *client.Client
		book *answerBook
	}
	var conns []conn
	for range 4 {
		nc := pc.connectCounted(t, target, "runtime", &connErrs)
		conns = append(conns, conn{client.New(nc, nil), newAnswerBook(t, nc)})
	}
	access := client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"text"}}
	openOnTarget := func(cl *client.Client) *client.Turn {
		t.Helper()
		for range 200 {
			octx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			tr, err := cl.Open(octx, access)
			cancel()
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			if tr.Handle.Node == pc.ids[target] {
				return tr
			}
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = tr.Close(cctx)
			cancel()
		}
		t.Fatalf("no open landed on %s in 200", pc.ids[target])
		return nil
	}
	var trs []*client.Turn
	for i := range turns {
		trs = append(trs, openOnTarget(conns[i%len(conns)].c))
	}
	args := []byte(`{"text":"a b b c c c"}`)

	// Capacity: closed-loop callers for a while, calls answered per second.
	repliedBefore := invokeReplies(t, pc.http[target])
	rssBefore, peakBefore, err := procMemory(pid)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		want     []auditKey
		measured = map[reason.Code]int{}
	)
	var wg sync.WaitGroup
	mStart := time.Now()
	for w := range callers {
		wg.Go(func() {
			cn, tr := conns[w%len(conns)], trs[w%turns]
			for time.Since(mStart) < measure {
				code, callID, _ := cn.book.invoke(tr, "text_stats", args, deadline)
				mu.Lock()
				measured[code]++
				if code == "" {
					want = append(want, auditKey{tr.Handle.TurnID, callID})
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	mTook := time.Since(mStart)
	capacity := float64(measured[""]) / mTook.Seconds()
	if measured[""] == 0 {
		t.Fatalf("no call answered while measuring the capacity: %v", measured)
	}
	rate := factor * capacity

	// The flood: senders each send rate/senders requests a second on a
	// schedule, whether or not earlier ones were answered.
	reqs := make([][]byte, turns)
	for i, tr := range trs {
		reqs[i], err = messages.Encode(&messages.InvokeRequest{V: messages.Version, Access: tr.Access(), Tool: "text_stats", Args: args,
			TimeoutMs: uint32(deadline.Milliseconds() * 9 / 10)})
		if err != nil {
			t.Fatal(err)
		}
	}
	subject := messages.TurnSubject("sharedos", pc.ids[target], messages.OpInvoke)
	var sendErrs atomic.Int64
	floodBooks := make([]*answerBook, senders)
	for s := range senders {
		// A book per sender, apart from the measurement's.
		floodBooks[s] = newAnswerBook(t, conns[s%len(conns)].book.nc)
	}
	// Round trips to the flooded node's server while it is flooded: on a
	// connection of its own (how fast the server takes a new client's
	// traffic) and on one of the flood's (what queues in the test's own
	// connection counts too).
	rtts := make([][]time.Duration, 2)
	sampling := make(chan struct{})
	var sampler sync.WaitGroup
	// And the replies waiting in the test's own subscriptions (the test
	// reads them under the race detector): a queue on the client's side.
	var backlog int
	sampler.Go(func() {
		for {
			n := 0
			for _, b := range floodBooks {
				if m, _, err := b.sub.Pending(); err == nil {
					n += m
				}
			}
			backlog = max(backlog, n)
			select {
			case <-sampling:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	for i, nc := range []*nats.Conn{pc.connect(t, target, "runtime"), conns[0].book.nc} {
		sampler.Go(func() {
			for {
				if d, err := nc.RTT(); err == nil {
					rtts[i] = append(rtts[i], d)
				}
				select {
				case <-sampling:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
	}
	fStart := time.Now()
	for s := range senders {
		wg.Go(func() {
			b, per := floodBooks[s], rate/senders
			n := 0
			for {
				el := time.Since(fStart)
				if el >= flood {
					return
				}
				for due := int(per * el.Seconds()); n < due; n++ {
					i := (n*senders + s) % turns
					if _, err := b.send(subject, reqs[i], time.Now().Add(deadline), trs[i].Handle.TurnID); err != nil {
						sendErrs.Add(1)
					}
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	wg.Wait()
	fTook := time.Since(fStart)
	// Wait for every answer, until the last deadline plus the margin.
	var all []answer
	for end := time.Now().Add(deadline + margin); ; {
		all = all[:0]
		for _, b := range floodBooks {
			all = append(all, b.answers()...)
		}
		unanswered := 0
		for _, a := range all {
			if a.replies == 0 {
				unanswered++
			}
		}
		if unanswered == 0 || time.Now().After(end) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	drained := time.Since(fStart) - fTook
	close(sampling)
	sampler.Wait()
	repliedAfter := invokeReplies(t, pc.http[target])
	_, peakAfter, err := procMemory(pid)
	if err != nil {
		t.Fatal(err)
	}

	// Every request answered once, in time.
	codes := map[reason.Code]int{}
	var okLat, overLat []time.Duration
	overBy := map[string][]time.Duration{} // overloaded, by who refused: overloadSource
	var none, late, twice, undecodable int
	var lastAt time.Time // the last first answer
	for _, a := range all {
		if a.replies == 0 {
			none++
			continue
		}
		if a.firstAt.After(lastAt) {
			lastAt = a.firstAt
		}
		if a.replies > 1 {
			twice++
		}
		lat := a.firstAt.Sub(a.sent)
		if lat > deadline+margin {
			late++
		}
		code, rep := invokeOutcome(a.first)
		codes[code]++
		switch code {
		case "":
			okLat = append(okLat, lat)
			want = append(want, auditKey{a.tag, rep.CallID})
		case reason.Overloaded:
			overLat = append(overLat, lat)
			src := overloadSource(rep.Error.Message)
			overBy[src] = append(overBy[src], lat)
		case "undecodable":
			undecodable++
		}
	}
	sent := len(all)
	// The node's own count of invoke replies agrees: every request it
	// took, it answered, and each answer reached the test.
	var replied, measuredN float64
	byNode := map[string]float64{}
	for code, n := range repliedAfter {
		byNode[code] = n - repliedBefore[code]
		replied += n - repliedBefore[code]
	}
	for _, n := range measured {
		measuredN += float64(n)
	}
	if replied != measuredN+float64(sent) {
		t.Errorf("the node counts %.0f invoke replies (%v); the test sent %.0f (measurement %.0f, flood %d)", replied, byNode, measuredN+float64(sent), measuredN, sent)
	}
	if none > 0 {
		t.Errorf("%d of %d requests never answered (no reply by their deadline plus %v)", none, sent, margin)
	}
	if late > 0 {
		t.Errorf("%d requests answered later than their deadline plus %v", late, margin)
	}
	if twice > 0 {
		t.Errorf("%d requests answered more than once", twice)
	}
	for code, n := range codes {
		switch code {
		case "", reason.Overloaded, reason.DeadlineExceeded, reason.RateLimited:
		default:
			t.Errorf("%d requests answered %q; want a result, overloaded, rate_limited or deadline_exceeded", n, code)
		}
	}
	if n := sendErrs.Load(); n > 0 {
		t.Errorf("%d requests could not be published", n)
	}
	if n := connErrs.Load(); n > 0 {
		t.Errorf("%d asynchronous errors or disconnections on the test's connections", n)
	}
	if codes[reason.Overloaded] == 0 {
		t.Errorf("no request refused overloaded: the node was not flooded (offered %.0f/s, capacity %.0f/s)", float64(sent)/fTook.Seconds(), capacity)
	}
	if peakAfter > peakCap {
		t.Errorf("the flooded node's peak RSS %s is over %s", mib(peakAfter), mib(peakCap))
	}

	// The node still serves: a fresh turn and a call.
	fresh := openOnTarget(conns[0].c)
	code, callID, _ := conns[0].book.invoke(fresh, "text_stats", args, 10*time.Second)
	if code != "" {
		t.Errorf("a call on a fresh turn after the flood: %s", code)
	} else {
		want = append(want, auditKey{fresh.Handle.TurnID, callID})
	}
	for _, tr := range append(trs, fresh) {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := tr.Close(cctx); err != nil {
			t.Errorf("closing %s after the flood: %v", tr.Handle, err)
		}
		cancel()
	}

	// The audit, once the cluster settles.
	s := readSettled(t, auditorNC, want, nil)
	rep := audit.Verify(s.data, true)
	if !rep.OK() {
		t.Errorf("the trail does not verify: %+v", rep.Violations)
	}
	for _, k := range s.missing[:min(len(s.missing), 10)] {
		t.Errorf("answered but not in the audit: turn %s call %s (invoked %d, completed %d)", k.turn, k.call, s.invoked[k], s.completed[k])
	}
	if s.dups > 0 {
		t.Errorf("%d records stored twice", s.dups)
	}
	// What the node logged about its bus (a slow consumer is a drop).
	var slow []string
	for _, l := range strings.Split(pc.log(target), "\n") {
		if strings.Contains(strings.ToLower(l), "slow consumer") {
			slow = append(slow, l)
		}
	}
	if len(slow) > 0 {
		t.Errorf("the flooded node logged %d slow-consumer lines, e.g. %s", len(slow), slow[0])
	}

	pct := func(ds []time.Duration, p int) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return ds[min(len(ds)-1, len(ds)*p/100)].Round(100 * time.Microsecond)
	}
	t.Logf("FIGURES flood of %s: capacity %.0f calls/s (%d closed-loop callers on %d of its turns for %v: %v); offered %.0f/s (%.1fx, target %dx) open-loop by %d senders for %v: %d requests, each with a %v deadline",
		pc.ids[target], capacity, callers, turns, mTook.Round(time.Millisecond), measured, float64(sent)/fTook.Seconds(), float64(sent)/fTook.Seconds()/capacity, factor, senders, fTook.Round(time.Millisecond), sent, deadline)
	t.Logf("FIGURES answers: ok %d, overloaded %d, other %v; never answered %d, answered after deadline+%v %d, answered twice %d; the last answer %v after the flood's end (all in by the poll %v after)",
		codes[""], codes[reason.Overloaded], without(codes, "", reason.Overloaded), none, margin, late, twice,
		lastAt.Sub(fStart.Add(fTook)).Round(time.Millisecond), drained.Round(time.Millisecond))
	t.Logf("FIGURES latency: overloaded p50 %v p99 %v; ok p50 %v p99 %v",
		pct(overLat, 50), pct(overLat, 99), pct(okLat, 50), pct(okLat, 99))
	for _, src := range slices.Sorted(maps.Keys(overBy)) {
		t.Logf("FIGURES overloaded by %s: %d, p50 %v p99 %v", src, len(overBy[src]), pct(overBy[src], 50), pct(overBy[src], 99))
	}
	t.Logf("FIGURES the node's own count of invoke replies (sharedos_requests_total): %.0f %v, the test's requests %.0f",
		replied, byNode, measuredN+float64(sent))
	t.Logf("FIGURES round trips to the flooded server during the flood: a quiet connection p50 %v max %v (%d samples); a flooding connection p50 %v max %v (%d samples); replies waiting in the test's subscriptions at most %d",
		pct(rtts[0], 50), pct(rtts[0], 100), len(rtts[0]), pct(rtts[1], 50), pct(rtts[1], 100), len(rtts[1]), backlog)
	t.Logf("FIGURES memory of %s (pid %d): RSS before %s (peak since start %s); peak after the flood %s (bound %s)",
		pc.ids[target], pid, mib(rssBefore), mib(peakBefore), mib(peakAfter), mib(peakCap))
	t.Logf("FIGURES audit: %d records, settled %v (%d reads failed), acked-lost %d, duplicates %d, calls allowed but never completed %d, calls denied (recorded decisions) %v, verify ok=%v (%d turns, %d closed, %d checkpoints)",
		len(s.data), s.took.Round(time.Millisecond), s.readErrs, len(s.missing), s.dups, len(s.neverCompleted()), s.denied, rep.OK(), rep.Turns, rep.Closed, rep.Checkpoints)
}

// overloadSource says which bound refused a request overloaded, from the
// refusal's message: the NATS front's requests in flight (answered before
// the request is decoded), the turn's calls in flight (a decision, recorded
// in the trail as a denied tool.invoked), or the audit writer's queue.
func overloadSource(msg string) string {
	switch {
	case strings.Contains(msg, "requests in flight"):
		return "the front (requests in flight on the node)"
	case strings.Contains(msg, "calls in flight in this turn"):
		return "the turn (calls in flight in it)"
	case strings.Contains(msg, "audit"):
		return "the audit writer (records queued)"
	}
	return "other: " + msg
}

// invokeReplies scrapes a node's /metrics for its invoke replies by code
// (sharedos_requests_total{op="invoke"}).
func invokeReplies(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, l := range strings.Split(string(b), "\n") {
		labels, ok := strings.CutPrefix(l, "sharedos_requests_total{")
		if !ok || !strings.Contains(labels, `op="invoke"`) {
			continue
		}
		_, rest, _ := strings.Cut(labels, `code="`)
		code, _, _ := strings.Cut(rest, `"`)
		_, v, _ := strings.Cut(l, "} ")
		n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", l, err)
		}
		out[code] = n
	}
	return out
}

// without is m less the given keys.
func without(m map[reason.Code]int, keys ...reason.Code) map[reason.Code]int {
	out := map[reason.Code]int{}
	for k, v := range m {
		if !slices.Contains(keys, k) {
			out[k] = v
		}
	}
	return out
}
