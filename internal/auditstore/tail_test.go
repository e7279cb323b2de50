package auditstore

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sharedos/sharedos/audit"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/internal/natsserver/natstest"
)

func emitAll(t testing.TB, s *JetStreamSink, recs ...[]*audit.Record) {
	t.Helper()
	ctx := ctxT(t, 5*time.Second)
	for _, rs := range recs {
		for _, r := range rs {
			if err := audit.Wait(ctx, s.Emit(r)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// tailCollector runs Tail in a goroutine and collects what it delivers.
type tailCollector struct {
	mu     sync.Mutex
	got    [][]byte
	notify chan struct{}
	done   chan error
	cancel context.CancelFunc
}

func startTail(t *testing.T, nc *nats.Conn, opts TailOptions) *tailCollector {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &tailCollector{notify: make(chan struct{}, 1), done: make(chan error, 1), cancel: cancel}
	go func() {
		c.done <- Tail(ctx, nc, opts, func(data []byte, ev *audit.Event) error {
			if ev == nil {
				t.Errorf("undecodable %q", data)
			}
			c.mu.Lock()
			c.got = append(c.got, data)
			c.mu.Unlock()
			select {
			case c.notify <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	t.Cleanup(func() { c.stop(t) })
	return c
}

func (c *tailCollector) waitFor(t *testing.T, n int) [][]byte {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		c.mu.Lock()
		got := slices.Clone(c.got)
		c.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-c.notify:
		case err := <-c.done:
			t.Fatalf("Tail returned early: %v", err)
		case <-deadline:
			t.Fatalf("Tail delivered %d records, want %d", len(got), n)
		}
	}
}

func (c *tailCollector) stop(t *testing.T) {
	if c.cancel == nil {
		return
	}
	c.cancel()
	c.cancel = nil
	select {
	case err := <-c.done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Tail = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("Tail did not return after cancel")
	}
}

func dataOf(recs []*audit.Record, keep func(*audit.Event) bool) [][]byte {
	var out [][]byte
	for _, r := range recs {
		if keep(r.Event) {
			out = append(out, r.Data)
		}
	}
	return out
}

func equalData(t *testing.T, name string, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", name, len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("%s: record %d:\n got %s\nwant %s", name, i, got[i], want[i])
		}
	}
}

// Tail with tenant, turn and type filters delivers the matching stored
// records, then the matching records emitted while it runs.
func TestTailFiltersLive(t *testing.T) {
	_, nc := natstest.Start(t, true)
	sink := newSink(t, nc, JetStreamOptions{})
	a1 := buildTurn(t, "acme", "n1.a1", 12)
	a2 := buildTurn(t, "acme", "n1.a2", 12)
	g1 := buildTurn(t, "globex", "n1.g1", 12)
	w1 := buildTurn(t, "we.ird", "n1.w1", 12)
	// The first half of every turn is stored before the tails start.
	emitAll(t, sink, a1[:6], a2[:6], g1[:6], w1[:6])

	invoked := func(ev *audit.Event) bool { return ev.Type == audit.ToolInvoked || ev.Type == audit.TurnClosed }
	cases := []struct {
		name string
		f    TailFilter
		keep func(*audit.Event) bool
	}{
		{"tenant", TailFilter{Tenant: "acme"}, func(ev *audit.Event) bool { return ev.Tenant == "acme" }},
		{"tenant-hex", TailFilter{Tenant: "we.ird"}, func(ev *audit.Event) bool { return ev.Tenant == "we.ird" }},
		{"turn", TailFilter{TurnID: "n1.a2"}, func(ev *audit.Event) bool { return ev.TurnID == "n1.a2" }},
		{"types", TailFilter{Types: []audit.Type{audit.ToolInvoked, audit.TurnClosed}}, invoked},
		{"tenant+turn+type", TailFilter{Tenant: "acme", TurnID: "n1.a1", Types: []audit.Type{audit.ToolInvoked, audit.TurnClosed}},
			func(ev *audit.Event) bool { return ev.TurnID == "n1.a1" && invoked(ev) }},
		{"everything", TailFilter{}, func(*audit.Event) bool { return true }},
	}
	tails := make([]*tailCollector, len(cases))
	for i, tc := range cases {
		tails[i] = startTail(t, nc, TailOptions{Filter: tc.f, FromStart: true})
	}
	stored := slices.Concat(a1[:6], a2[:6], g1[:6], w1[:6])
	for i, tc := range cases {
		want := dataOf(stored, tc.keep)
		equalData(t, tc.name+" (stored)", tails[i].waitFor(t, len(want)), want)
	}
	// Live: the second halves, emitted after every tail caught up.
	live := slices.Concat(a1[6:], a2[6:], g1[6:], w1[6:])
	emitAll(t, sink, live)
	for i, tc := range cases {
		want := dataOf(slices.Concat(stored, live), tc.keep)
		tails[i].waitFor(t, len(want))
		// Nothing beyond what matched arrives either.
		time.Sleep(20 * time.Millisecond)
		tails[i].mu.Lock()
		got := slices.Clone(tails[i].got)
		tails[i].mu.Unlock()
		equalData(t, tc.name+" (live)", got, want)
	}
}

// Without FromStart, Tail delivers only what is stored after it started.
func TestTailNewOnly(t *testing.T) {
	_, nc := natstest.Start(t, true)
	sink := newSink(t, nc, JetStreamOptions{})
	recs := buildTurn(t, "acme", "n1.new", 10)
	emitAll(t, sink, recs[:4])
	c := startTail(t, nc, TailOptions{})
	// Wait for the tail's consumer to exist before emitting.
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctxT(t, 5*time.Second), DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		info, err := st.Info(ctxT(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Consumers > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("tail consumer never appeared")
		}
		time.Sleep(5 * time.Millisecond)
	}
	emitAll(t, sink, recs[4:])
	equalData(t, "new only", c.waitFor(t, 6), dataOf(recs[4:], func(*audit.Event) bool { return true }))
}

// A durable consumer resumes where the last run stopped; a record fn
// failed is delivered again.
func TestTailDurableResumes(t *testing.T) {
	_, nc := natstest.Start(t, true)
	sink := newSink(t, nc, JetStreamOptions{})
	a := buildTurn(t, "acme", "n1.d1", 10)
	g := buildTurn(t, "globex", "n1.d2", 10)
	emitAll(t, sink, a, g)
	errStop := errors.New("stop")
	opts := TailOptions{Durable: "ext-sub", FromStart: true, Filter: TailFilter{Tenant: "acme"}}

	// First run: take 3 records, fail the 4th.
	var got [][]byte
	err := Tail(ctxT(t, 5*time.Second), nc, opts, func(data []byte, ev *audit.Event) error {
		if len(got) == 3 {
			return errStop
		}
		got = append(got, data)
		return nil
	})
	if !errors.Is(err, errStop) {
		t.Fatalf("Tail = %v, want errStop", err)
	}
	// Second run: resumes at the failed record; then live records arrive.
	// (Within 5s: the failed record must come back at once, not after the
	// consumer's 30s AckWait.)
	more := buildTurn(t, "acme", "n1.d3", 4)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var once sync.Once
	err = Tail(ctx, nc, opts, func(data []byte, ev *audit.Event) error {
		once.Do(func() {
			go func() {
				for _, r := range more {
					sink.Emit(r)
				}
			}()
		})
		got = append(got, data)
		if len(got) == len(a)+len(more) {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("second Tail = %v", err)
	}
	equalData(t, "durable", got, dataOf(slices.Concat(a, more), func(*audit.Event) bool { return true }))

	js, _ := jetstream.New(nc)
	cons, err := js.Consumer(ctxT(t, 5*time.Second), DefaultStream, "ext-sub")
	if err != nil {
		t.Fatal(err)
	}
	if info := cons.CachedInfo(); info.NumAckPending != 0 || info.NumPending != 0 {
		t.Errorf("durable consumer: %d ack pending, %d pending", info.NumAckPending, info.NumPending)
	}
	// A run stopped right after a record (the next one may already be
	// buffered in the client) hands back what it did not process: the
	// next run gets it at once.
	later := buildTurn(t, "acme", "n1.d4", 6)
	emitAll(t, sink, later)
	got = nil
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	err = Tail(ctx2, nc, opts, func(data []byte, ev *audit.Event) error {
		got = append(got, data)
		cancel2()
		return nil
	})
	if !errors.Is(err, context.Canceled) || len(got) != 1 {
		t.Fatalf("stopped Tail = %v after %d records", err, len(got))
	}
	ctx2, cancel2 = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	err = Tail(ctx2, nc, opts, func(data []byte, ev *audit.Event) error {
		got = append(got, data)
		if len(got) == len(later) {
			cancel2()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("resumed Tail = %v after %d records", err, len(got))
	}
	equalData(t, "durable after stop", got, dataOf(later, func(*audit.Event) bool { return true }))

	// A run without FromStart keeps the consumer's policy and sees nothing old.
	opts.FromStart = false
	ctx3, cancel3 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel3()
	err = Tail(ctx3, nc, opts, func(data []byte, ev *audit.Event) error { return errors.New("unexpected record") })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third Tail = %v", err)
	}
}

func TestReadAllFilteredAndEmpty(t *testing.T) {
	_, nc := natstest.Start(t, true)
	sink := newSink(t, nc, JetStreamOptions{})
	if got := readAllData(t, nc, TailOptions{}); len(got) != 0 {
		t.Fatalf("empty stream: %d records", len(got))
	}
	a := buildTurn(t, "acme", "n1.ra", 20)
	g := buildTurn(t, "globex", "n1.rg", 20)
	emitAll(t, sink, a[:10], g, a[10:])
	equalData(t, "turn", readAllData(t, nc, TailOptions{Filter: TailFilter{TurnID: "n1.ra"}}), dataOf(a, func(*audit.Event) bool { return true }))
	equalData(t, "tenant", readAllData(t, nc, TailOptions{Filter: TailFilter{Tenant: "globex"}}), dataOf(g, func(*audit.Event) bool { return true }))
	if got := readAllData(t, nc, TailOptions{Filter: TailFilter{Tenant: "nobody"}}); len(got) != 0 {
		t.Fatalf("unknown tenant: %d records", len(got))
	}
	if got := readAllData(t, nc, TailOptions{Filter: TailFilter{Types: []audit.Type{audit.TurnOpened}}}); len(got) != 2 {
		t.Fatalf("turn.opened: %d records", len(got))
	}
	if err := ReadAll(ctxT(t, time.Second), nc, TailOptions{Durable: "x"}, func([]byte, *audit.Event) error { return nil }); err == nil {
		t.Error("ReadAll accepted Durable")
	}
	// The consumers ReadAll created are gone.
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctxT(t, 5*time.Second), DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Consumers; n != 0 {
		t.Errorf("%d consumers left behind", n)
	}
	// While records keep arriving, ReadAll still ends.
	var busy [][]*audit.Record
	for i := range 500 {
		busy = append(busy, buildTurn(t, "acme", "n1.busy"+strconv.Itoa(i), 4))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, recs := range busy {
			select {
			case <-stop:
				return
			default:
			}
			for _, r := range recs {
				sink.Emit(r)
			}
			time.Sleep(time.Millisecond)
		}
	})
	n := len(readAllData(t, nc, TailOptions{}))
	close(stop)
	wg.Wait()
	if n < 40 {
		t.Errorf("ReadAll under load returned %d records", n)
	}
}

// A record that is not an Event, and a message that is not a
// well-formed segment, are delivered with a nil Event, so a verifier can
// report them — to turn readers too, since whose they are cannot be told.
func TestReadAllUndecodable(t *testing.T) {
	_, nc := natstest.Start(t, true)
	sink := newSink(t, nc, JetStreamOptions{})
	recs := buildTurn(t, "acme", "n1.bad", 4)
	emitAll(t, sink, recs[:2])
	js, _ := jetstream.New(nc)
	notJSON, err := audit.EncodeSegment([][]byte{[]byte("not json")})
	if err != nil {
		t.Fatal(err)
	}
	truncated := []byte("SOSA\x01\x00\x00\x00\x02\x00\x00\x00\x02{}")
	for _, data := range [][]byte{notJSON, truncated} {
		if _, err := js.PublishMsg(ctxT(t, 5*time.Second), &nats.Msg{Subject: audit.SegmentSubject(DefaultPrefix, "acme"), Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	emitAll(t, sink, recs[2:])
	var all [][]byte
	var nilEvents int
	for _, turn := range []string{"", "n1.bad", "n1.other"} {
		all, nilEvents = nil, 0
		err := ReadAll(ctxT(t, 5*time.Second), nc, TailOptions{Filter: TailFilter{TurnID: turn}}, func(data []byte, ev *audit.Event) error {
			if ev == nil {
				nilEvents++
			}
			all = append(all, data)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		want := 6
		if turn == "n1.other" {
			want = 2
		}
		if len(all) != want || nilEvents != 2 {
			t.Errorf("turn %q: %d records, %d undecodable; want %d, 2", turn, len(all), nilEvents, want)
		}
		if turn != "n1.other" && len(all) == want && string(all[2]) != "not json" {
			t.Errorf("turn %q: the undecodable record is not in stream order: %q", turn, all)
		}
	}
	all = nil
	_ = ReadAll(ctxT(t, 5*time.Second), nc, TailOptions{}, func(data []byte, _ *audit.Event) error { all = append(all, data); return nil })
	if !bytes.Equal(all[3], truncated) {
		t.Errorf("the malformed segment is not delivered whole: %q", all[3])
	}
	if rep := audit.Verify(all, false); rep.OK() {
		t.Error("Verify accepted a trail with an undecodable record")
	}
}
