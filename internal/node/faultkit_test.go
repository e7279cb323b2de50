package node_test

// Helpers shared by the fault tests (fault_test.go, pause_test.go,
// flood_test.go, rolling_test.go, partition_test.go, addnode_test.go):
// the load's duration, the victim (a node that does not lead the audit
// stream), opening a turn on a given node, requests whose every reply is
// counted, the audit read once the cluster settles, the audit leader's
// changes, and a process's memory.

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/auditstore"
	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

// faultLoad is SHAREDOS_FAULT_LOAD (faultLoadEnv), or def when unset.
func faultLoad(t *testing.T, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(faultLoadEnv)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", faultLoadEnv, v, err)
	}
	return d
}

// nonLeader waits for the audit stream's leader and returns it with the
// index of the last node that does not lead it (the victim of a fault
// that is not about the leader) and the other two.
func nonLeader(t *testing.T, pc *procCluster) (leader string, victim int, others []int) {
	t.Helper()
	js, err := jetstream.New(pc.connect(t, 0, "auditor"))
	if err != nil {
		t.Fatal(err)
	}
	for wait := time.Now().Add(30 * time.Second); ; {
		s, err := js.Stream(ctx(t), "SHAREDOS_AUDIT")
		if err == nil && s.CachedInfo().Cluster != nil && s.CachedInfo().Cluster.Leader != "" {
			leader = s.CachedInfo().Cluster.Leader
			break
		}
		if time.Now().After(wait) {
			t.Fatalf("no audit stream leader after 30s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	victim = 2
	for i := 2; i >= 0; i-- {
		if "sharedos-"+pc.ids[i] != leader {
			victim = i
			break
		}
	}
	for i := range pc.ids {
		if i != victim {
			others = append(others, i)
		}
	}
	return leader, victim, others
}

// connectCounted connects to node i's server as name, like
// procCluster.connect, and counts the connection's asynchronous errors
// (a slow consumer on the client's side would drop replies) and its
// disconnections in errs.
func (pc *procCluster) connectCounted(t *testing.T, i int, name string, errs *atomic.Int64) *nats.Conn {
	t.Helper()
	auth, err := client.CredentialOptions(identity.SeedFile(pc.creds, name))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(pc.urls[i], append(auth, nats.Name("fault-"+name), nats.MaxReconnects(-1),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) { errs.Add(1) }),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { errs.Add(1) }))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// answerBook sends requests with a reply subject of its own for each and
// counts every reply each gets, including those that arrive after the
// caller stopped waiting (the client package's requests drop such a reply
// unseen) and any second one. Safe for concurrent use.
type answerBook struct {
	nc   *nats.Conn
	base string
	sub  *nats.Subscription
	mu   sync.Mutex
	seq  uint64
	reqs map[string]*asked
	// strays are replies for no request of this book.
	strays int
}

// asked is one request and the replies it got.
type asked struct {
	subject  string
	tag      string // the sender's: the turn, for the flood
	sent     time.Time
	deadline time.Time
	done     chan struct{} // closed at the first reply
	// Guarded by the book's mu.
	first    *nats.Msg
	firstAt  time.Time
	replies  int
	gaveUp   bool      // the caller stopped waiting before a reply came
	lateAt   time.Time // the first reply that came after the caller gave up
	lateCode reason.Code
	late     *nats.Msg
}

// newAnswerBook subscribes to the book's replies on nc (without pending
// limits: the test, not the client, must never drop a reply).
func newAnswerBook(t *testing.T, nc *nats.Conn) *answerBook {
	t.Helper()
	b := &answerBook{nc: nc, base: nc.NewInbox(), reqs: map[string]*asked{}}
	sub, err := nc.Subscribe(b.base+".*", b.receive)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	b.sub = sub
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return b
}

func (b *answerBook) receive(m *nats.Msg) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.reqs[m.Subject]
	if a == nil {
		b.strays++
		return
	}
	a.replies++
	if a.replies > 1 {
		return
	}
	if a.gaveUp {
		a.lateAt, a.lateCode, a.late = now, replyCode(m), m
		return
	}
	a.first, a.firstAt = m, now
	close(a.done)
}

// send publishes one request without waiting; deadline is when its
// caller stops waiting for it, tag is the caller's.
func (b *answerBook) send(subject string, data []byte, deadline time.Time, tag string) (*asked, error) {
	b.mu.Lock()
	b.seq++
	reply := b.base + "." + strconv.FormatUint(b.seq, 10)
	a := &asked{subject: subject, tag: tag, sent: time.Now(), deadline: deadline, done: make(chan struct{})}
	b.reqs[reply] = a
	b.mu.Unlock()
	return a, b.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Data: data})
}

// wait waits for a's first reply until its deadline; without one by
// then, the caller gives up (a later reply is counted as late).
func (b *answerBook) wait(a *asked) *nats.Msg {
	t := time.NewTimer(time.Until(a.deadline))
	defer t.Stop()
	select {
	case <-a.done:
	case <-t.C:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if a.first == nil {
		a.gaveUp = true
	}
	return a.first
}

// invoke calls alias on tr through the book, the way client.Turn.Invoke
// does (the node is told 90% of the caller's wait), and returns the
// outcome's code ("" for success, "tool_error" for a tool's error result,
// deadline_exceeded when no reply came in time) and the call's id.
func (b *answerBook) invoke(tr *client.Turn, alias string, args []byte, timeout time.Duration) (reason.Code, string, *asked) {
	data, err := messages.Encode(&messages.InvokeRequest{V: messages.Version, Access: tr.Access(), Tool: alias, Args: args,
		TimeoutMs: uint32(timeout.Milliseconds() * 9 / 10)})
	if err != nil {
		panic(err)
	}
	a, err := b.send(messages.TurnSubject("sharedos", tr.Handle.Node, messages.OpInvoke), data, time.Now().Add(timeout), tr.Handle.TurnID)
	if err != nil {
		return "publish_failed", "", a
	}
	m := b.wait(a)
	if m == nil {
		return reason.DeadlineExceeded, "", a
	}
	code, rep := invokeOutcome(m)
	return code, rep.CallID, a
}

// invokeOutcome is an invoke reply's code and decoded reply: NATS's no
// responders status is what the client reports as turn_not_found.
func invokeOutcome(m *nats.Msg) (reason.Code, *messages.InvokeReply) {
	var rep messages.InvokeReply
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		return reason.TurnNotFound, &rep
	}
	if err := messages.Decode(m.Data, &rep, messages.DefaultLimits()); err != nil {
		return "undecodable", &rep
	}
	switch {
	case rep.Error != nil:
		return reason.Code(rep.Error.Code), &rep
	case rep.IsError:
		return "tool_error", &rep
	}
	return "", &rep
}

func replyCode(m *nats.Msg) reason.Code {
	c, _ := invokeOutcome(m)
	return c
}

// answer is a snapshot of one request: when it was sent, its first
// reply and when it came, and how many replies it got.
type answer struct {
	tag              string
	sent, firstAt    time.Time
	first, late      *nats.Msg
	replies          int
	deadline, lateAt time.Time
}

// answers is a snapshot of every request the book sent.
func (b *answerBook) answers() []answer {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]answer, 0, len(b.reqs))
	for _, a := range b.reqs {
		out = append(out, answer{tag: a.tag, sent: a.sent, firstAt: a.firstAt, first: a.first, replies: a.replies, deadline: a.deadline, lateAt: a.lateAt, late: a.late})
	}
	return out
}

// tally is what the book saw: requests sent, answered once in time,
// answered only after the caller gave up (late), answered more than once
// (twice), never answered, and replies to no request.
type tally struct {
	sent, inTime, late, twice, never, strays int
	lateCodes                                map[reason.Code]int
}

func (b *answerBook) tally() tally {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := tally{sent: len(b.reqs), strays: b.strays, lateCodes: map[reason.Code]int{}}
	for _, a := range b.reqs {
		switch {
		case a.replies == 0:
			t.never++
		case a.first == nil:
			t.late++
			t.lateCodes[a.lateCode]++
		default:
			t.inTime++
		}
		if a.replies > 1 {
			t.twice++
		}
	}
	return t
}

func (t *tally) add(u tally) {
	t.sent, t.inTime, t.late, t.twice, t.never, t.strays = t.sent+u.sent, t.inTime+u.inTime, t.late+u.late, t.twice+u.twice, t.never+u.never, t.strays+u.strays
	if t.lateCodes == nil {
		t.lateCodes = map[reason.Code]int{}
	}
	for c, n := range u.lateCodes {
		t.lateCodes[c] += n
	}
}

// auditKey names a call in the trail.
type auditKey struct{ turn, call string }

// settledAudit is the whole stream as read once every wanted call had its
// records (or the read gave up): the records, each call's tool.invoked and
// tool.completed counts, the records stored twice, how long it took to
// settle and how many reads failed before.
type settledAudit struct {
	data               [][]byte
	invoked, completed map[auditKey]int
	dups               int
	missing            []auditKey
	took               time.Duration
	readErrs           int
	// resolutions are, by turn, its catalogue resolution as recorded.
	resolutions map[string]resolution
	// allowed are the calls decided allow (tool.invoked, decision allow);
	// denied counts the calls denied, by reason.
	allowed map[auditKey]bool
	denied  map[string]int
	// closedBy counts turn.closed records by reason.
	closedBy map[string]int
	// lastUncompleted counts the calls of lastOfTurn answered whose
	// tool.completed is not in the stream.
	lastUncompleted int
}

// resolution is a turn's tool.catalog.resolved: when it was recorded, the
// provider that took longest, and the providers that failed.
type resolution struct {
	at      time.Time
	slowest string        // "calendar ok after 2.95s"
	took    time.Duration // the slowest provider's
	failed  []string      // "calendar: provider_timeout after 5s"
}

// readSettled reads the whole audit stream as the auditor on nc until
// every call in want has its tool.invoked and tool.completed — or, for a
// call in lastOfTurn, its tool.invoked: a call's result is answered once
// its tool.invoked is stored, and its tool.completed is stored before
// anything later of its turn is answered, so the result of a turn's last
// answered call may precede a crash that loses its tool.completed
// (docs/audit.md, "What an answer waits for"). Each read
// gets 15s plus 1s per 1,000 calls wanted (a flood's trail holds more
// records than its answered calls: its denied ones); the settle at least
// 90s and four reads.
func readSettled(t *testing.T, nc *nats.Conn, want []auditKey, lastOfTurn map[auditKey]bool) settledAudit {
	t.Helper()
	attempt := 15*time.Second + time.Duration(len(want)/1000)*time.Second
	start := time.Now()
	for n := 0; ; n++ {
		s := settledAudit{invoked: map[auditKey]int{}, completed: map[auditKey]int{}, resolutions: map[string]resolution{}, allowed: map[auditKey]bool{}, denied: map[string]int{}, closedBy: map[string]int{}}
		ids := map[string]int{}
		rctx, cancel := context.WithTimeout(context.Background(), attempt)
		err := auditstore.ReadAll(rctx, nc, auditstore.TailOptions{Prefix: "sharedos", Stream: "SHAREDOS_AUDIT"}, func(d []byte, ev *audit.Event) error {
			s.data = append(s.data, d)
			id := ev.ID
			if id == "" { // a checkpoint: no id; the same bytes twice would be a duplicate
				id = string(d)
			}
			if ids[id]++; ids[id] == 2 {
				s.dups++
			}
			if ev.Type == audit.CatalogResolved && ev.Catalog != nil {
				r := resolution{at: ev.Time}
				for _, p := range ev.Catalog.Providers {
					d := (time.Duration(p.DurationMicros) * time.Microsecond).Round(time.Millisecond)
					if d >= r.took {
						r.took, r.slowest = d, fmt.Sprintf("%s %s after %v", p.Provider, p.Status, d)
					}
					if p.Status == "failed" {
						r.failed = append(r.failed, fmt.Sprintf("%s: %s after %v", p.Provider, p.Reason, d))
					}
				}
				s.resolutions[ev.TurnID] = r
			}
			if ev.Type == audit.TurnClosed && ev.Close != nil {
				s.closedBy[ev.Close.Reason]++
			}
			if ev.Type == audit.ToolInvoked && ev.Call != nil {
				if ev.Call.Decision == "allow" {
					s.allowed[auditKey{ev.TurnID, ev.Call.ID}] = true
				} else {
					s.denied[ev.Call.Reason]++
				}
			}
			if ev.Call != nil {
				switch ev.Type {
				case audit.ToolInvoked:
					s.invoked[auditKey{ev.TurnID, ev.Call.ID}]++
				case audit.ToolCompleted:
					s.completed[auditKey{ev.TurnID, ev.Call.ID}]++
				}
			}
			return nil
		})
		cancel()
		if err == nil {
			for _, k := range want {
				switch {
				case s.invoked[k] == 0:
					s.missing = append(s.missing, k)
				case s.completed[k] == 0 && lastOfTurn[k]:
					s.lastUncompleted++
				case s.completed[k] == 0:
					s.missing = append(s.missing, k)
				}
			}
			if len(s.missing) == 0 {
				s.took = time.Since(start)
				return s
			}
		} else {
			s.readErrs = n + 1
			t.Logf("reading the audit at +%v: %v", time.Since(start).Round(time.Millisecond), err)
		}
		if time.Since(start) > max(90*time.Second, 4*attempt) {
			if err != nil {
				t.Fatalf("reading the audit: %v", err)
			}
			s.took = time.Since(start)
			return s
		}
		time.Sleep(time.Second)
	}
}

// twiceCompleted counts calls with more than one tool.invoked or more
// than one tool.completed: a call carried out twice.
func (s settledAudit) twiceCompleted() int {
	n := 0
	for k, c := range s.invoked {
		if c > 1 || s.completed[k] > 1 {
			n++
		}
	}
	return n
}

// neverCompleted are the calls allowed (tool.invoked, decision allow)
// with no tool.completed, as "turn/call".
func (s settledAudit) neverCompleted() []string {
	var out []string
	for k := range s.allowed {
		if s.completed[k] == 0 {
			out = append(out, k.turn+"/"+k.call)
		}
	}
	return out
}

// procMemory is a process's resident set now (VmRSS) and its peak
// (VmHWM), in bytes, from /proc/<pid>/status.
func procMemory(pid int) (rss, peak int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status %s: %w", pid, k, err)
		}
		if k == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
	}
	if rss == 0 || peak == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no VmRSS/VmHWM", pid)
	}
	return rss, peak, sc.Err()
}

// mib formats bytes as MiB.
func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// stopAtCleanup registers a cleanup, run before procCluster's own
// (cleanups run last-first), that stops the nodes still running: first
// those given, one by one, then the others at once, with SIGTERM repeated
// until each exits (the second ends its drain), and logs how long that
// took. procCluster's cleanup, run after, stops them one by one (a second
// SIGTERM 100ms after the first), sends no SIGCONT, and logs nothing. A
// node holding turns nobody will close (a paused node's stale opens) is
// best stopped first, while the audit stream has its quorum for the
// records of those turns' closing.
func (pc *procCluster) stopAtCleanup(t *testing.T, first ...int) {
	t.Cleanup(func() {
		start := time.Now()
		var took []string
		wait := func(i int) {
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			giveUp := time.After(30 * time.Second)
		waiting:
			for {
				select {
				case <-pc.exited[i]:
					break waiting
				case <-tick.C:
					// Again: a second SIGTERM ends the drain at once (turns
					// nobody will close would hold it for drain_timeout).
					_ = pc.cmds[i].Process.Signal(syscall.SIGTERM)
				case <-giveUp:
					_ = pc.cmds[i].Process.Kill()
					<-pc.exited[i]
					break waiting
				}
			}
			d := time.Since(start)
			took = append(took, fmt.Sprintf("%s %v", pc.ids[i], d.Round(time.Millisecond)))
			if d > 10*time.Second {
				l := pc.log(i)
				t.Logf("%s took %v to stop; the end of its log:\n%s", pc.ids[i], d.Round(time.Millisecond), l[max(0, len(l)-3000):])
			}
		}
		for _, cmd := range pc.cmds {
			_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot stop
		}
		for _, i := range first {
			_ = pc.cmds[i].Process.Signal(syscall.SIGTERM)
			wait(i)
		}
		var rest []int
		for i, cmd := range pc.cmds {
			if !slices.Contains(first, i) {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				rest = append(rest, i)
			}
		}
		for _, i := range rest {
			wait(i)
		}
		t.Logf("the processes stopped (SIGTERM): %s", strings.Join(took, ", "))
	})
}

// leaderLog is the audit stream's leader as one server sees it, polled
// every 200ms until stop: each change with its instant ("none" without a
// leader, "?" while stream info goes unanswered, as in an election).
type leaderLog struct {
	mu   sync.Mutex
	seen []leaderSeen
}

type leaderSeen struct {
	at     time.Time
	leader string
}

func watchLeader(t *testing.T, nc *nats.Conn, stop context.Context, wg *sync.WaitGroup) *leaderLog {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	l := &leaderLog{}
	wg.Go(func() {
		last := ""
		for stop.Err() == nil {
			c, cancel := context.WithTimeout(stop, time.Second)
			st, err := js.Stream(c, "SHAREDOS_AUDIT")
			cancel()
			now := "?"
			if err == nil && st.CachedInfo().Cluster != nil {
				now = strings.TrimPrefix(cmp.Or(st.CachedInfo().Cluster.Leader, "none"), "sharedos-")
			}
			if now != last && stop.Err() == nil {
				l.mu.Lock()
				l.seen = append(l.seen, leaderSeen{time.Now(), now})
				l.mu.Unlock()
				last = now
			}
			select {
			case <-stop.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
	return l
}

// unsettled reports whether the stream had no leader, or changed leader,
// at some point between from and to (widened by the poll's own 2s).
func (l *leaderLog) unsettled(from, to time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	from, to = from.Add(-2*time.Second), to.Add(2*time.Second)
	for i, s := range l.seen {
		if i == 0 {
			continue // the first sighting is no change
		}
		if !s.at.Before(from) && !s.at.After(to) {
			return true
		}
		if (s.leader == "none" || s.leader == "?") && s.at.Before(to) && (i+1 == len(l.seen) || l.seen[i+1].at.After(from)) {
			return true
		}
	}
	return false
}

// leaderless is the first stretch without a leader ("none" or "?", until
// the next change or end) that overlaps from..to.
func (l *leaderLog) leaderless(from, to, end time.Time) (leaderSeen, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, s := range l.seen {
		if s.leader != "none" && s.leader != "?" {
			continue
		}
		until := end
		if i+1 < len(l.seen) {
			until = l.seen[i+1].at
		}
		if !s.at.After(to) && !until.Before(from) {
			return s, true
		}
	}
	return leaderSeen{}, false
}

// leaderlessFor is how long the stream had no leader, up to end.
func (l *leaderLog) leaderlessFor(end time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var d time.Duration
	for i, s := range l.seen {
		if s.leader == "none" || s.leader == "?" {
			until := end
			if i+1 < len(l.seen) {
				until = l.seen[i+1].at
			}
			d += until.Sub(s.at)
		}
	}
	return d
}

// since lists the changes relative to t0.
func (l *leaderLog) since(t0 time.Time) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.seen {
		out = append(out, fmt.Sprintf("%s at %+v", s.leader, s.at.Sub(t0).Round(10*time.Millisecond)))
	}
	return strings.Join(out, ", ")
}

// attempt is one call of a worker, for refusalWindow.
type attempt struct {
	worker int
	start  time.Time
	took   time.Duration
	failed bool
}

// refusalWindow is the longest time, over the workers, from a failed call
// to the same worker's next answered one (to end, if none came).
func refusalWindow(attempts []attempt, end time.Time) time.Duration {
	perWorker := map[int][]attempt{}
	for _, a := range attempts {
		perWorker[a.worker] = append(perWorker[a.worker], a)
	}
	var window time.Duration
	for _, as := range perWorker {
		slices.SortFunc(as, func(a, b attempt) int { return a.start.Compare(b.start) })
		var failedAt time.Time
		for _, a := range as {
			switch {
			case a.failed && failedAt.IsZero():
				failedAt = a.start
			case !a.failed && !failedAt.IsZero():
				window = max(window, a.start.Add(a.took).Sub(failedAt))
				failedAt = time.Time{}
			}
		}
		if !failedAt.IsZero() {
			window = max(window, end.Sub(failedAt))
		}
	}
	return window
}

// openOn opens a turn for access through cl, each open given timeout,
// until one lands on want (any node when want is ""): opens go to any
// node by a queue group, and turns that land elsewhere are closed. note,
// when set, is told each open's outcome (nil for a turn) until ctx is
// done; then openOn returns ctx's error.
func openOn(ctx context.Context, cl *client.Client, access client.Access, want string, timeout time.Duration, note func(error)) (*client.Turn, error) {
	for {
		octx, cancel := context.WithTimeout(ctx, timeout)
		tr, err := cl.Open(octx, access)
		cancel()
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err() // the load is over: not an open's outcome
		}
		if note != nil {
			note(err)
		}
		if err != nil {
			continue
		}
		if want == "" || tr.Handle.Node == want {
			return tr, nil
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		_ = tr.Close(cctx)
		cancel()
	}
}

// startNodeProc starts `bin serve` with args (after "serve"), wrapped by
// wrap (e.g. ip netns exec NS) when set, its output appended to logPath;
// the channel closes when it has exited.
func startNodeProc(t *testing.T, logPath string, wrap []string, bin string, args ...string) (*exec.Cmd, chan struct{}) {
	t.Helper()
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	argv := append(append(slices.Clone(wrap), bin, "serve"), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()
	return cmd, done
}
