package auditstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedos/sharedos/audit"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/sharedos/sharedos/internal/natsserver"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
	"github.com/sharedos/sharedos/reason"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// buildTurn returns a valid, closed chain of n (>= 4) records for one turn:
// turn.opened, tool.catalog.resolved, [tool.catalog.listed],
// tool.invoked/tool.completed pairs, turn.closed.
func buildTurn(tb testing.TB, tenant, turnID string, n int) []*audit.Record {
	tb.Helper()
	if n < 4 {
		tb.Fatalf("buildTurn: n = %d < 4", n)
	}
	tool := audit.Tool{Alias: "notes_search", Provider: "notes", Name: "search", Namespace: "notes", Revision: "r1"}
	// The catalogue hash as the registry computes it (catalog/registry.go).
	sum := sha256.Sum256([]byte(`{"tools":[{"alias":"` + tool.Alias + `","revision":"` + tool.Revision + `"}],"v":1}`))
	catHash := hex.EncodeToString(sum[:])
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var out []*audit.Record
	prev := ""
	add := func(ev *audit.Event) {
		seq := uint64(len(out))
		ev.ID = turnID + "-" + strconv.FormatUint(seq, 10)
		ev.Time = base.Add(time.Duration(seq) * time.Millisecond)
		ev.Node = "n1"
		ev.Tenant = tenant
		ev.Principal = "ada"
		ev.TurnID = turnID
		ev.Seq = seq
		ev.PrevHash = prev
		rec, err := audit.Encode(ev)
		if err != nil {
			tb.Fatal(err)
		}
		prev = rec.Hash
		out = append(out, rec)
	}
	add(&audit.Event{Type: audit.TurnOpened, Namespaces: []string{"notes"}})
	add(&audit.Event{Type: audit.CatalogResolved, CatalogHash: catHash, Catalog: &audit.Catalog{Tools: []audit.Tool{tool}, Providers: []audit.ProviderStatus{{Provider: "notes", Status: "ok", Tools: 1}}}})
	if (n-3)%2 == 1 {
		add(&audit.Event{Type: audit.CatalogListed, CatalogHash: catHash, Listed: []string{tool.Alias}})
	}
	for call := 0; len(out) < n-1; call++ {
		id := "call" + strconv.Itoa(call)
		add(&audit.Event{Type: audit.ToolInvoked, CatalogHash: catHash, Call: &audit.Call{ID: id, Alias: tool.Alias, Provider: tool.Provider, Name: tool.Name, Revision: tool.Revision, Step: call + 1, Decision: "allow"}})
		add(&audit.Event{Type: audit.ToolCompleted, CatalogHash: catHash, Call: &audit.Call{ID: id, Alias: tool.Alias, Outcome: "ok", Duration: 10}})
	}
	add(&audit.Event{Type: audit.TurnClosed, CatalogHash: catHash, Close: &audit.Close{Reason: "closed", Steps: (n - 3) / 2, Events: uint64(n)}})
	return out
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newSink(t testing.TB, nc *nats.Conn, opts JetStreamOptions) *JetStreamSink {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger
	}
	s, err := NewJetStreamSink(ctxT(t, 5*time.Second), nc, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func streamMsgs(t testing.TB, nc *nats.Conn, stream string) uint64 {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctxT(t, 5*time.Second), stream)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().State.Msgs
}

func readAllData(t testing.TB, nc *nats.Conn, opts TailOptions) [][]byte {
	t.Helper()
	var out [][]byte
	err := ReadAll(ctxT(t, 10*time.Second), nc, opts, func(data []byte, ev *audit.Event) error {
		if ev == nil {
			t.Errorf("undecodable record %q", data)
		}
		out = append(out, data)
		return nil
	})
	if err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
	return out
}

func TestSubjectTenantToken(t *testing.T) {
	for _, tc := range []struct{ tenant, token string }{
		{"acme", "acme"},
		{"Acme_Corp-2", "Acme_Corp-2"},
		{"", "~"},
		{"a.b", "~612e62"},
		{"a b", "~612062"},
		{"*", "~2a"},
		{">", "~3e"},
		{"~x", "~7e78"},
		{"ü", "~c3bc"},
	} {
		if got := audit.TenantToken(tc.tenant); got != tc.token {
			t.Errorf("TenantToken(%q) = %q, want %q", tc.tenant, got, tc.token)
		}
	}
	if got, want := audit.Subject("sharedos", "acme", audit.ToolInvoked), "sharedos.audit.live.acme.tool.invoked"; got != want {
		t.Errorf("Subject = %q, want %q", got, want)
	}
	if got, want := audit.Subject("x.y", "a.b", audit.TurnOpened), "x.y.audit.live.~612e62.turn.opened"; got != want {
		t.Errorf("Subject = %q, want %q", got, want)
	}
	if got := audit.StreamSubjects("sharedos"); !slices.Equal(got, []string{"sharedos.audit.seg.*", "sharedos.audit.checkpoint.*"}) {
		t.Errorf("StreamSubjects = %q", got)
	}
	if got, want := audit.SegmentSubject("x.y", "a.b"), "x.y.audit.seg.~612e62"; got != want {
		t.Errorf("SegmentSubject = %q, want %q", got, want)
	}
	// A tenant named like the stream's own tokens keeps its live subjects
	// out of the stream: they have three tokens or more after "audit".
	for _, tenant := range []string{"seg", "checkpoint"} {
		if live := audit.Subject("p", tenant, audit.ToolInvoked); subjectMatches(audit.StreamSubjects("p"), live) {
			t.Errorf("live subject %q is captured by the stream", live)
		}
		if seg := audit.SegmentSubject("p", tenant); !subjectMatches(audit.StreamSubjects("p"), seg) {
			t.Errorf("segment subject %q is not captured by the stream", seg)
		}
	}
	// One tenant: exactly its segment subject, whatever the types.
	f := TailFilter{Tenant: "a.b", Types: []audit.Type{audit.ToolInvoked, audit.ToolInvoked, audit.TurnClosed}}
	subs, err := f.FilterSubjects("sharedos")
	if err != nil || !slices.Equal(subs, []string{"sharedos.audit.seg.~612e62"}) {
		t.Errorf("FilterSubjects = %q, %v", subs, err)
	}
	if subs, _ := (TailFilter{Types: []audit.Type{audit.ToolInvoked}}).FilterSubjects("p"); !slices.Equal(subs, []string{"p.audit.seg.*"}) {
		t.Errorf("FilterSubjects(any tenant) = %q", subs)
	}
	if subs, _ := (TailFilter{TurnID: "x"}).FilterSubjects("p"); subs != nil {
		t.Errorf("FilterSubjects(turn only) = %q, want the whole stream", subs)
	}
	for _, f := range []TailFilter{{Types: []audit.Type{"tool.*"}}, {Tenant: "acme", Types: []audit.Type{"tool.>"}}} {
		if _, err := f.FilterSubjects("p"); err == nil {
			t.Errorf("wildcard type accepted as filter: %+v", f)
		}
	}
}

// subjectMatches reports whether subject matches one of the filters
// (NATS wildcard rules: "*" one token, ">" the rest).
func subjectMatches(filters []string, subject string) bool {
	for _, f := range filters {
		ft, st := strings.Split(f, "."), strings.Split(subject, ".")
		ok := true
		for i, tok := range ft {
			if tok == ">" {
				ok = len(st) > i
				break
			}
			if i >= len(st) || tok != "*" && tok != st[i] {
				ok = false
				break
			}
			if i == len(ft)-1 && len(st) != len(ft) {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func TestNewJetStreamSinkRefusesBadOptions(t *testing.T) {
	_, nc := natstest.Start(t, true)
	for _, o := range []JetStreamOptions{
		{Prefix: "a.*"}, {Prefix: "a..b"}, {Prefix: "a b"}, {Durability: "sometimes"}, {AckTimeout: -1}, {RetryWindow: -1},
	} {
		if _, err := NewJetStreamSink(ctxT(t, 5*time.Second), nc, o); err == nil {
			t.Errorf("NewJetStreamSink(%+v) succeeded", o)
		}
	}
}

// 1000 records of 8 turns and 3 tenants, each turn emitted from its own
// goroutine (as the kernel does): every receipt ok, each turn stored in
// order with identical bytes, and the whole trail verifies.
func TestJetStreamSinkRoundTrip(t *testing.T) {
	_, nc := natstest.Start(t, true)
	var published atomic.Int64
	sink := newSink(t, nc, JetStreamOptions{OnPublish: func(_ time.Duration, err error) {
		if err == nil {
			published.Add(1)
		}
	}})
	tenants := []string{"acme", "globex", "weird tenant/ü"}
	var turns [][]*audit.Record
	for i := range 8 {
		turns = append(turns, buildTurn(t, tenants[i%3], fmt.Sprintf("n1.turn%d", i), 125))
	}
	ctx := ctxT(t, 10*time.Second)
	var wg sync.WaitGroup
	for _, recs := range turns {
		wg.Go(func() {
			receipts := make([]audit.Receipt, len(recs))
			for i, r := range recs {
				receipts[i] = sink.Emit(r)
			}
			for i, rc := range receipts {
				if err := audit.Wait(ctx, rc); err != nil {
					t.Errorf("receipt %s: %v", recs[i].Event.ID, err)
				}
			}
		})
	}
	wg.Wait()
	if got := published.Load(); got != 1000 {
		t.Errorf("OnPublish saw %d successes, want 1000", got)
		t.Logf("diagnostics: stream holds %d messages; conn stats %+v, status %v; sink pending %d", streamMsgs(t, nc, DefaultStream), nc.Stats(), nc.Status(), sink.Pending())
	}
	if n := sink.Pending(); n != 0 {
		t.Errorf("Pending = %d after every receipt completed", n)
	}

	var all [][]byte
	byTurn := map[string][][]byte{}
	err := ReadAll(ctx, nc, TailOptions{}, func(data []byte, ev *audit.Event) error {
		if ev == nil {
			return fmt.Errorf("undecodable %q", data)
		}
		all = append(all, data)
		byTurn[ev.TurnID] = append(byTurn[ev.TurnID], data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1000 {
		t.Fatalf("ReadAll returned %d records, want 1000", len(all))
	}
	for _, recs := range turns {
		got := byTurn[recs[0].Event.TurnID]
		if len(got) != len(recs) {
			t.Fatalf("turn %s: %d records, want %d", recs[0].Event.TurnID, len(got), len(recs))
		}
		for i, r := range recs {
			if !bytes.Equal(got[i], r.Data) {
				t.Fatalf("turn %s record %d differs:\n got %s\nwant %s", r.Event.TurnID, i, got[i], r.Data)
			}
		}
	}
	if rep := audit.Verify(all, false); !rep.OK() || rep.Events != 1000 || rep.Closed != 8 {
		t.Fatalf("Verify: %+v", rep)
	}
}

// A record is stored in a segment on its tenant's segment subject, with
// a segment id and the format version as headers, and its exact bytes
// framed inside.
func TestJetStreamSinkSegmentMessage(t *testing.T) {
	_, nc := natstest.Start(t, true)
	sink := newSink(t, nc, JetStreamOptions{Prefix: "p1", Stream: "HDRS"})
	rec := buildTurn(t, "a.b", "n1.hdr", 4)[0]
	if err := audit.Wait(ctxT(t, 5*time.Second), sink.Emit(rec)); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctxT(t, 5*time.Second), "HDRS")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.Subjects; !slices.Equal(got, []string{"p1.audit.seg.*", "p1.audit.checkpoint.*"}) {
		t.Errorf("stream subjects %q", got)
	}
	m, err := st.GetMsg(ctxT(t, 5*time.Second), 1)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != "p1.audit.seg.~612e62" {
		t.Errorf("subject %q", m.Subject)
	}
	if id := m.Header.Get(jetstream.MsgIDHeader); id == "" || id == rec.Event.ID {
		t.Errorf("Nats-Msg-Id = %q, want a segment id", id)
	}
	if v := m.Header.Get(HeaderSegment); v != "1" {
		t.Errorf("%s = %q, want 1", HeaderSegment, v)
	}
	want := append([]byte("SOSA\x01\x00\x00\x00\x01"), byte(len(rec.Data)>>24), byte(len(rec.Data)>>16), byte(len(rec.Data)>>8), byte(len(rec.Data)))
	want = append(want, rec.Data...)
	if !bytes.Equal(m.Data, want) {
		t.Errorf("segment bytes\n got %q\nwant %q", m.Data, want)
	}
}

// A record emitted again (as after a failed receipt) is stored in another
// segment, and read once; a segment published twice with its segment id
// is stored once.
func TestJetStreamSinkDuplicateReadOnce(t *testing.T) {
	_, nc := natstest.Start(t, true)
	sink := newSink(t, nc, JetStreamOptions{})
	recs := buildTurn(t, "acme", "n1.dup", 4)
	ctx := ctxT(t, 5*time.Second)
	for _, r := range []*audit.Record{recs[0], recs[0], recs[1], recs[0]} {
		if err := audit.Wait(ctx, sink.Emit(r)); err != nil {
			t.Fatal(err)
		}
	}
	if n := streamMsgs(t, nc, DefaultStream); n != 4 {
		t.Fatalf("stream holds %d segments, want 4 (one per commit)", n)
	}
	equalData(t, "read", readAllData(t, nc, TailOptions{}), [][]byte{recs[0].Data, recs[1].Data})

	js, _ := jetstream.New(nc)
	seg, err := audit.EncodeSegment([][]byte{recs[2].Data})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: audit.SegmentSubject(DefaultPrefix, "acme"), Data: seg},
			jetstream.WithMsgID("segment-x")); err != nil {
			t.Fatal(err)
		}
	}
	if n := streamMsgs(t, nc, DefaultStream); n != 5 {
		t.Fatalf("stream holds %d segments after a duplicate segment, want 5", n)
	}
	// A record that repeats an event id with other bytes is not dropped:
	// the verifier must see it.
	forged := *recs[1]
	forged.Data = bytes.Replace(recs[1].Data, []byte("notes"), []byte("NOTES"), 1)
	if err := audit.Wait(ctx, sink.Emit(&forged)); err != nil {
		t.Fatal(err)
	}
	got := readAllData(t, nc, TailOptions{})
	equalData(t, "read with forged", got, [][]byte{recs[0].Data, recs[1].Data, recs[2].Data, forged.Data})
	if rep := audit.Verify(got, true); rep.OK() {
		t.Error("Verify accepted a second record with seq 1")
	}
}

// Records acked by a SyncAlways server are still there after it restarts
// on the same store.
func TestJetStreamSinkSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	opts := natsserver.Options{JetStream: true, StoreDir: dir, SyncAlways: true}
	recs := append(buildTurn(t, "acme", "n1.r1", 60), buildTurn(t, "globex", "n1.r2", 41)...)

	srv, err := natsserver.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := srv.Connect()
	if err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	sink, err := NewJetStreamSink(ctxT(t, 5*time.Second), nc, JetStreamOptions{Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		sink.Emit(r)
	}
	if err := sink.Flush(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	srv.Shutdown()

	_, nc2 := natstest.StartWithOptions(t, opts)
	got := readAllData(t, nc2, TailOptions{})
	if len(got) != len(recs) {
		t.Fatalf("after restart: %d records, want %d", len(got), len(recs))
	}
	for i, r := range recs {
		if !bytes.Equal(got[i], r.Data) {
			t.Fatalf("record %d differs after restart", i)
		}
	}
	if rep := audit.Verify(got, false); !rep.OK() {
		t.Fatalf("Verify: %+v", rep)
	}
}

// waitDisconnected waits until the client noticed that the server is gone.
func waitDisconnected(t testing.TB, nc *nats.Conn) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for nc.Status() == nats.CONNECTED {
		if time.Now().After(deadline) {
			t.Fatal("client still connected")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

type publishCounter struct{ ok, failed atomic.Int64 }

func (c *publishCounter) observe(_ time.Duration, err error) {
	if err != nil {
		c.failed.Add(1)
	} else {
		c.ok.Add(1)
	}
}

// The stream is deleted under the sinks: nothing captures the subject any
// more, the server answers "no responders" and the publish fails at once.
func TestJetStreamSinkStreamDeleted(t *testing.T) {
	_, nc := natstest.Start(t, true)
	const ackTimeout = 500 * time.Millisecond
	var cAcked, cOpen, cAsync publishCounter
	// One attempt each (a window too short to retry in): the failure path
	// itself; TestJetStreamSinkRetriesWithinItsWindow has the retries.
	const once = time.Nanosecond
	acked := newSink(t, nc, JetStreamOptions{AckTimeout: ackTimeout, RetryWindow: once, OnPublish: cAcked.observe})
	open := newSink(t, nc, JetStreamOptions{AckTimeout: ackTimeout, RetryWindow: once, FailOpen: true, OnPublish: cOpen.observe})
	async := newSink(t, nc, JetStreamOptions{AckTimeout: ackTimeout, RetryWindow: once, Durability: DurabilityAsync, OnPublish: cAsync.observe})
	js, _ := jetstream.New(nc)
	if err := js.DeleteStream(ctxT(t, 5*time.Second), DefaultStream); err != nil {
		t.Fatal(err)
	}
	recs := buildTurn(t, "acme", "n1.gone", 4)
	ctx := ctxT(t, 5*time.Second)

	start := time.Now()
	err := audit.Wait(ctx, acked.Emit(recs[0]))
	if err == nil {
		t.Fatal("acked receipt succeeded without a stream")
	}
	if el := time.Since(start); el > ackTimeout {
		t.Errorf("acked receipt failed after %s, want within %s", el, ackTimeout)
	}
	if !errors.Is(err, reason.ErrInternal) || reason.Of(err) != unavailableCode || !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Errorf("error %v: want code %s wrapping ErrNoStreamResponse", err, unavailableCode)
	}
	t.Logf("acked, no stream: %v after %s", err, time.Since(start))

	if err := audit.Wait(ctx, open.Emit(recs[0])); err != nil {
		t.Errorf("fail-open receipt: %v", err)
	}
	r := async.Emit(recs[0])
	select {
	case <-r.Done():
		if r.Err() != nil {
			t.Errorf("async receipt: %v", r.Err())
		}
	default:
		t.Error("async receipt not complete at once")
	}
	for _, s := range []*JetStreamSink{acked, open, async} {
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for name, c := range map[string]*publishCounter{"acked": &cAcked, "fail-open": &cOpen, "async": &cAsync} {
		if c.failed.Load() != 1 || c.ok.Load() != 0 {
			t.Errorf("%s: OnPublish saw %d failures, %d successes; want 1, 0", name, c.failed.Load(), c.ok.Load())
		}
	}
}

// A segment the stream does not acknowledge is published again, with the
// same segment id, within the sink's retry window: a stream that comes
// back (as a new stream leader is elected) stores the record, once, and
// the chain after it stays in order.
func TestJetStreamSinkRetriesWithinItsWindow(t *testing.T) {
	_, nc := natstest.Start(t, true)
	sink := newSink(t, nc, JetStreamOptions{AckTimeout: 200 * time.Millisecond, RetryWindow: 600 * time.Millisecond})
	recs := buildTurn(t, "acme", "n1.retry", 4)
	ctx := ctxT(t, 30*time.Second)
	if err := audit.Wait(ctx, sink.Emit(recs[0])); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	info, err := js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.CachedInfo().Config
	if err := js.DeleteStream(ctx, DefaultStream); err != nil {
		t.Fatal(err)
	}
	r1, r2 := sink.Emit(recs[1]), sink.Emit(recs[2])
	// The stream is gone until the sink has retried at least once.
	for sink.Retries() == 0 {
		select {
		case <-r1.Done():
			t.Fatalf("receipt completed with no stream: %v", r1.Err())
		case <-ctx.Done():
			t.Fatal("no retry")
		case <-time.After(10 * time.Millisecond):
		}
	}
	cfg.DenyDelete, cfg.DenyPurge = false, false
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for _, r := range []audit.Receipt{r1, r2} {
		if err := audit.Wait(ctx, r); err != nil {
			t.Fatalf("receipt after the stream came back: %v", err)
		}
	}
	var got []uint64
	err = ReadAll(ctx, nc, TailOptions{}, func(_ []byte, ev *audit.Event) error {
		got = append(got, ev.Seq)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("the new stream holds seqs %v, want [1 2] once each, in order", got)
	}
}

// The server goes away: publishes are buffered by the reconnecting client
// and never acked; receipts fail by AckTimeout.
func TestJetStreamSinkServerDown(t *testing.T) {
	srv, nc := natstest.Start(t, true)
	const ackTimeout = 300 * time.Millisecond
	var c publishCounter
	const once = time.Nanosecond // one attempt: see TestJetStreamSinkStreamDeleted
	acked := newSink(t, nc, JetStreamOptions{AckTimeout: ackTimeout, RetryWindow: once, OnPublish: c.observe})
	open := newSink(t, nc, JetStreamOptions{AckTimeout: ackTimeout, RetryWindow: once, FailOpen: true})
	recs := buildTurn(t, "acme", "n1.down", 6)
	ctx := ctxT(t, 5*time.Second)
	if err := audit.Wait(ctx, acked.Emit(recs[0])); err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	// Emitted while the client may not have noticed yet: fails by the
	// disconnect or by the ack timeout.
	r1 := acked.Emit(recs[1])
	waitDisconnected(t, nc)

	start := time.Now()
	var receipts []audit.Receipt
	for _, r := range recs[2:4] {
		receipts = append(receipts, acked.Emit(r))
	}
	ro := open.Emit(recs[4])
	for _, rc := range receipts {
		if err := audit.Wait(ctx, rc); err == nil {
			t.Error("receipt succeeded with the server down")
		} else if reason.Of(err) != unavailableCode ||
			// jetstream fails what is pending when it sees the disconnect
			// (its status goroutine may run late), the rest by timeout.
			!errors.Is(err, jetstream.ErrAsyncPublishTimeout) && !errors.Is(err, nats.ErrDisconnected) {
			t.Errorf("error %v: want code %s wrapping ErrAsyncPublishTimeout", err, unavailableCode)
		}
	}
	if el := time.Since(start); el > ackTimeout+500*time.Millisecond {
		t.Errorf("receipts failed after %s, want within about %s", el, ackTimeout)
	}
	if err := audit.Wait(ctx, r1); err == nil || reason.Of(err) != unavailableCode {
		t.Errorf("receipt emitted as the server went down: %v", err)
	}
	if err := audit.Wait(ctx, ro); err != nil {
		t.Errorf("fail-open receipt: %v", err)
	}
	if got := c.failed.Load(); got != 3 {
		t.Errorf("OnPublish saw %d failures, want 3", got)
	}
	t.Logf("server down: receipts failed after %s (%v)", time.Since(start), receipts[0].Err())
}

func TestJetStreamSinkClose(t *testing.T) {
	_, nc := natstest.Start(t, true)
	sink := newSink(t, nc, JetStreamOptions{})
	open := newSink(t, nc, JetStreamOptions{FailOpen: true})
	recs := buildTurn(t, "acme", "n1.close", 4)
	ctx := ctxT(t, 5*time.Second)
	r0 := sink.Emit(recs[0])
	if err := sink.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r0.Done():
		if r0.Err() != nil {
			t.Fatalf("record emitted before Close: %v", r0.Err())
		}
	default:
		t.Fatal("Close returned before the pending record completed")
	}
	if err := sink.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	err := audit.Wait(ctx, sink.Emit(recs[1]))
	if err == nil || reason.Of(err) != unavailableCode {
		t.Fatalf("Emit after Close: %v", err)
	}
	if err := open.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := audit.Wait(ctx, open.Emit(recs[1])); err != nil {
		t.Fatalf("fail-open Emit after Close: %v", err)
	}
	if n := streamMsgs(t, nc, DefaultStream); n != 1 {
		t.Fatalf("stream holds %d messages, want 1", n)
	}
}

func TestJetStreamSinkRefusesInvalidRecords(t *testing.T) {
	_, nc := natstest.Start(t, true)
	sink := newSink(t, nc, JetStreamOptions{})
	ev := &audit.Event{ID: "x", Type: "tool.>", TurnID: "t"}
	rec, err := audit.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := audit.Wait(ctxT(t, time.Second), sink.Emit(rec)); err == nil {
		t.Error("record with a wildcard type accepted")
	}
	if err := audit.Wait(ctxT(t, time.Second), sink.Emit(nil)); err == nil {
		t.Error("nil record accepted")
	}
}

// The writer is stuck on a commit (server gone, nothing acked) and
// MaxPending records are queued behind it: Emit waits at most StallWait,
// then refuses the record overloaded. Records already queued fail once
// their segment's retry window has passed; none waits forever.
func TestJetStreamSinkOverloaded(t *testing.T) {
	srv, nc := natstest.Start(t, true)
	sink := newSink(t, nc, JetStreamOptions{MaxPending: 2, StallWait: 50 * time.Millisecond, AckTimeout: 300 * time.Millisecond,
		RetryWindow: 600 * time.Millisecond})
	recs := buildTurn(t, "acme", "n1.stall", 6)
	srv.Shutdown()
	waitDisconnected(t, nc)
	// The writer takes at most one group (at most 2 records) before it is
	// stuck for AckTimeout; 2 more can queue; the fifth record cannot.
	var receipts []audit.Receipt
	var refused int
	for _, r := range recs {
		start := time.Now()
		rc := sink.Emit(r)
		el := time.Since(start)
		select {
		case <-rc.Done():
			if !errors.Is(rc.Err(), reason.ErrOverloaded) {
				t.Errorf("refused receipt: %v, want overloaded", rc.Err())
			}
			if el < 40*time.Millisecond {
				t.Errorf("Emit refused after %s, want after StallWait (50ms)", el)
			}
			refused++
		default:
			receipts = append(receipts, rc)
		}
	}
	if refused < 2 {
		t.Errorf("%d of 6 records refused, want at least 2 (6 records, 2 queued, 2 committing)", refused)
	}
	// Each queued receipt completes by itself (the sink fails it), with
	// the sink's own error — not this wait's timeout.
	for _, rc := range receipts {
		select {
		case <-rc.Done():
			var re *reason.Error
			if err := rc.Err(); !errors.As(err, &re) || re.Code != unavailableCode {
				t.Errorf("queued receipt with the server down: %v, want the sink's %s", err, unavailableCode)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a queued receipt did not complete 10s after its retry window (600ms)")
		}
	}
}

// BenchmarkJetStreamEmit measures Emit against an embedded server that
// fsyncs every write (SyncAlways), and, for comparison, one that does not
// ("nosync"). The server runs in the benchmark's process, so B/op and
// allocs/op include the server's allocations.
//
//   - acked: one emitter, up to 256 receipts outstanding (a burst of turns);
//   - acked-wait-each: one emitter waiting for each receipt (one turn's
//     latency-bound rate);
//   - acked-parallel: 8*GOMAXPROCS emitters each waiting for each receipt;
//   - async: emit b.N records, then Flush.
//
// failed/op counts records whose publish failed (stalled beyond StallWait
// with MaxPending in flight); it should be 0.
func BenchmarkJetStreamEmit(b *testing.B) {
	_, ncSync := natstest.StartWithOptions(b, natsserver.Options{JetStream: true, SyncAlways: true})
	_, ncNoSync := natstest.StartWithOptions(b, natsserver.Options{JetStream: true})
	var turnN atomic.Int64
	records := func(n int) []*audit.Record {
		id := turnN.Add(1)
		var out []*audit.Record
		for len(out) < n {
			out = append(out, buildTurn(b, "acme", fmt.Sprintf("n1.bench%d.%d", id, len(out)), 125)...)
		}
		return out[:n]
	}
	ctx := context.Background()
	modes := []struct {
		name       string
		durability string
		f          func(b *testing.B, s *JetStreamSink, recs []*audit.Record)
	}{
		{"acked", DurabilityAcked, func(b *testing.B, s *JetStreamSink, recs []*audit.Record) {
			const window = 256
			rs := make([]audit.Receipt, 0, len(recs))
			for i, r := range recs {
				if i >= window {
					_ = audit.Wait(ctx, rs[i-window])
				}
				rs = append(rs, s.Emit(r))
			}
			for _, r := range rs {
				_ = audit.Wait(ctx, r)
			}
		}},
		{"acked-wait-each", DurabilityAcked, func(b *testing.B, s *JetStreamSink, recs []*audit.Record) {
			for _, r := range recs {
				_ = audit.Wait(ctx, s.Emit(r))
			}
		}},
		{"acked-parallel", DurabilityAcked, func(b *testing.B, s *JetStreamSink, recs []*audit.Record) {
			var next atomic.Int64
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_ = audit.Wait(ctx, s.Emit(recs[next.Add(1)-1]))
				}
			})
		}},
		{"async", DurabilityAsync, func(b *testing.B, s *JetStreamSink, recs []*audit.Record) {
			for _, r := range recs {
				s.Emit(r)
			}
			if err := s.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		}},
	}
	for _, srv := range []struct {
		name string
		nc   *nats.Conn
	}{{"sync", ncSync}, {"nosync", ncNoSync}} {
		for _, m := range modes {
			b.Run(srv.name+"/"+m.name, func(b *testing.B) {
				var failed atomic.Int64
				s := newSink(b, srv.nc, JetStreamOptions{Durability: m.durability, MaxAge: time.Hour, OnPublish: func(_ time.Duration, err error) {
					if err != nil {
						failed.Add(1)
					}
				}})
				recs := records(b.N)
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				m.f(b, s, recs)
				b.StopTimer()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
				b.ReportMetric(float64(failed.Load())/float64(b.N), "failed/op")
			})
		}
	}
}
