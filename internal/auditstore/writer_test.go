package auditstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedos/sharedos/audit"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/internal/natsserver"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
	"github.com/sharedos/sharedos/reason"
)

// storedSegments returns every message of the stream.
func storedSegments(t *testing.T, nc *nats.Conn, stream string) []*jetstream.RawStreamMsg {
	t.Helper()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctxT(t, 5*time.Second), stream)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := uint64(1); seq <= st.CachedInfo().State.LastSeq; seq++ {
		m, err := st.GetMsg(ctxT(t, 5*time.Second), seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// Records queued while nothing forces a commit (MaxWait far away) are
// committed together once MaxSegmentBytes are queued, or at Close: few
// segments, each of one tenant on that tenant's subject, none beyond
// MaxSegmentBytes; every receipt completes and every turn reads back in
// order and verifies.
func TestGroupCommitSegments(t *testing.T) {
	_, nc := natstest.Start(t, true)
	const maxSeg = 8 << 10
	var published sync.Map
	sink, err := NewJetStreamSink(ctxT(t, 5*time.Second), nc, JetStreamOptions{
		MaxWait: time.Hour, MaxSegmentBytes: maxSeg, Logger: quietLogger,
		OnPublish: func(_ time.Duration, err error) { published.Store(fmt.Sprint(err), true) },
	})
	if err != nil {
		t.Fatal(err)
	}
	tenants := []string{"acme", "globex", "we.ird"}
	var turns [][]*audit.Record
	for i := range 30 {
		turns = append(turns, buildTurn(t, tenants[i%3], fmt.Sprintf("n1.g%d", i), 10))
	}
	var mu sync.Mutex
	var receipts []audit.Receipt
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := w; i < len(turns); i += 3 {
				for _, r := range turns[i] {
					rc := sink.Emit(r)
					mu.Lock()
					receipts = append(receipts, rc)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if err := sink.Close(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, rc := range receipts {
		select {
		case <-rc.Done():
			if rc.Err() != nil {
				t.Fatalf("receipt: %v", rc.Err())
			}
		default:
			t.Fatal("a receipt is still open after Close")
		}
	}
	if _, failed := published.Load("<nil>"); !failed {
		t.Error("OnPublish never saw a success")
	}

	segs := storedSegments(t, nc, DefaultStream)
	records := 0
	for _, m := range segs {
		n, err := audit.SegmentCount(m.Data)
		if err != nil {
			t.Fatalf("message %d: %v", m.Sequence, err)
		}
		records += n
		if len(m.Data) > maxSeg && n > 1 {
			t.Errorf("segment %d: %d bytes holding %d records, more than MaxSegmentBytes", m.Sequence, len(m.Data), n)
		}
		var tenant string
		_ = audit.DecodeSegment(m.Data, func(r []byte) error {
			var ev audit.Event
			if err := json.Unmarshal(r, &ev); err != nil {
				t.Fatalf("record %q does not parse: %v", r, err)
			}
			if tenant == "" {
				tenant = ev.Tenant
			} else if ev.Tenant != tenant {
				t.Errorf("segment %d mixes tenants %q and %q", m.Sequence, tenant, ev.Tenant)
			}
			return nil
		})
		if m.Subject != audit.SegmentSubject(DefaultPrefix, tenant) {
			t.Errorf("segment %d of tenant %q on %q", m.Sequence, tenant, m.Subject)
		}
	}
	if records != 300 || len(segs) > 300/4 {
		t.Errorf("%d records in %d segments; want 300 in far fewer (group commit)", records, len(segs))
	}
	t.Logf("300 records of 3 tenants in %d segments", len(segs))

	byTurn := map[string][][]byte{}
	var all [][]byte
	if err := ReadAll(ctxT(t, 10*time.Second), nc, TailOptions{}, func(data []byte, ev *audit.Event) error {
		byTurn[ev.TurnID] = append(byTurn[ev.TurnID], data)
		all = append(all, data)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, recs := range turns {
		equalData(t, recs[0].Event.TurnID, byTurn[recs[0].Event.TurnID], dataOf(recs, func(*audit.Event) bool { return true }))
	}
	if rep := audit.Verify(all, false); !rep.OK() || rep.Events != 300 {
		t.Fatalf("Verify: %+v", rep)
	}
}

// A stored record is also published, after its segment is acked, as a
// core message on its live subject, which the stream does not capture; a
// record whose segment was not stored has no live copy.
func TestLiveCopies(t *testing.T) {
	_, nc := natstest.Start(t, true)
	sink := newSink(t, nc, JetStreamOptions{AckTimeout: time.Second})
	type live struct {
		subject string
		data    []byte
	}
	got := make(chan live, 100)
	sub, err := nc.Subscribe(DefaultPrefix+".audit.live.acme.>", func(m *nats.Msg) { got <- live{m.Subject, m.Data} })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	// marker makes sure every live copy published before it was delivered.
	marker := func() []live {
		t.Helper()
		if err := sink.Flush(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish(DefaultPrefix+".audit.live.acme.end.marker", nil); err != nil {
			t.Fatal(err)
		}
		var out []live
		for {
			select {
			case l := <-got:
				if l.subject == DefaultPrefix+".audit.live.acme.end.marker" {
					return out
				}
				out = append(out, l)
			case <-time.After(5 * time.Second):
				t.Fatal("marker never arrived")
			}
		}
	}

	recs := buildTurn(t, "acme", "n1.live", 6)
	other := buildTurn(t, "globex", "n1.other", 4)
	for _, r := range slices.Concat(recs[:3], other) {
		sink.Emit(r)
	}
	copies := marker()
	if len(copies) != 3 {
		t.Fatalf("%d live copies, want 3", len(copies))
	}
	for i, l := range copies {
		if l.subject != audit.Subject(DefaultPrefix, "acme", recs[i].Event.Type) || !bytes.Equal(l.data, recs[i].Data) {
			t.Errorf("live copy %d: %s %q", i, l.subject, l.data)
		}
	}
	// The live subjects are not in the stream: it holds the 7 records in
	// segments only.
	stored := 0
	for _, m := range storedSegments(t, nc, DefaultStream) {
		n, err := audit.SegmentCount(m.Data)
		if err != nil || !strings.HasPrefix(m.Subject, DefaultPrefix+".audit.seg.") {
			t.Errorf("stream message %d on %s is not a segment: %v", m.Sequence, m.Subject, err)
		}
		stored += n
	}
	if stored != 7 {
		t.Errorf("stream holds %d records, want 7", stored)
	}

	js, _ := jetstream.New(nc)
	if err := js.DeleteStream(ctxT(t, 5*time.Second), DefaultStream); err != nil {
		t.Fatal(err)
	}
	if err := audit.Wait(ctxT(t, 5*time.Second), sink.Emit(recs[3])); err == nil {
		t.Fatal("receipt succeeded without a stream")
	}
	if copies := marker(); len(copies) != 0 {
		t.Fatalf("live copy of a record that was not stored: %q", copies[0].data)
	}
}

// A stream made before segments (subjects "<prefix>.audit.>", one record
// per message) is moved to the segment subjects; its old records and the
// new segments read back as one trail.
func TestStreamUpgradeFromRecordSubjects(t *testing.T) {
	_, nc := natstest.Start(t, true)
	js, _ := jetstream.New(nc)
	ctx := ctxT(t, 10*time.Second)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: DefaultStream, Subjects: []string{DefaultPrefix + ".audit.>"}, Duplicates: DuplicateWindow}); err != nil {
		t.Fatal(err)
	}
	recs := buildTurn(t, "acme", "n1.old", 6)
	for _, r := range recs[:2] {
		if _, err := js.PublishMsg(ctx, &nats.Msg{
			Subject: audit.Subject(DefaultPrefix, "acme", r.Event.Type), Data: r.Data,
			Header: nats.Header{HeaderTurn: {r.Event.TurnID}},
		}, jetstream.WithMsgID(r.Event.ID)); err != nil {
			t.Fatal(err)
		}
	}
	sink := newSink(t, nc, JetStreamOptions{})
	st, err := js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.Subjects; !slices.Equal(got, audit.StreamSubjects(DefaultPrefix)) {
		t.Fatalf("stream subjects %q", got)
	}
	emitAll(t, sink, recs[2:])
	all := readAllData(t, nc, TailOptions{})
	equalData(t, "upgraded", all, dataOf(recs, func(*audit.Event) bool { return true }))
	if rep := audit.Verify(all, false); !rep.OK() {
		t.Fatalf("Verify: %+v", rep.Violations)
	}
}

// Close with a context that ends while a commit waits for its ack
// (server gone) abandons what is pending: it fails the records (every
// receipt complete, audit_unavailable), stops the writer and returns the
// context's error.
func TestCloseAbortsCommit(t *testing.T) {
	srv, nc := natstest.Start(t, true)
	sink := newSink(t, nc, JetStreamOptions{AckTimeout: time.Hour})
	recs := buildTurn(t, "acme", "n1.abort", 4)
	srv.Shutdown()
	waitDisconnected(t, nc)
	var rs []audit.Receipt
	for _, r := range recs {
		rs = append(rs, sink.Emit(r))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := sink.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want deadline exceeded", err)
	}
	for _, rc := range rs {
		select {
		case <-rc.Done():
			if err := rc.Err(); err == nil || reason.Of(err) != unavailableCode {
				t.Errorf("abandoned receipt: %v", err)
			}
		default:
			t.Error("a receipt is still open after Close returned")
		}
	}
	if err := sink.Flush(ctxT(t, time.Second)); err != nil {
		t.Errorf("Flush after Close: %v", err)
	}
}

// BenchmarkGroupCommit measures the writer against an embedded server that
// fsyncs every write: 64 emitters, each waiting for its receipt before its
// next record (a turn's tool.invoked before the tool runs), for MaxWait 0
// (commit as soon as the last commit is acked) and two waits. It reports
// records/s, the median and p99 receipt latency, and records per segment.
//
//	go test -run '^$' -bench GroupCommit -benchtime 20000x ./internal/audit
func BenchmarkGroupCommit(b *testing.B) {
	_, nc := natstest.StartWithOptions(b, natsserver.Options{JetStream: true, SyncAlways: true})
	recs := buildTurn(b, "acme", "n1.gc", 125)
	for _, wait := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond} {
		b.Run("wait="+wait.String(), func(b *testing.B) {
			s := newSink(b, nc, JetStreamOptions{MaxAge: time.Hour, MaxWait: wait})
			js, _ := jetstream.New(nc)
			st, err := js.Stream(context.Background(), DefaultStream)
			if err != nil {
				b.Fatal(err)
			}
			before := st.CachedInfo().State.Msgs
			const emitters = 64
			lat := make([][]time.Duration, emitters)
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for w := range emitters {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						t0 := time.Now()
						if err := audit.Wait(context.Background(), s.Emit(recs[w%len(recs)])); err != nil {
							b.Error(err)
							return
						}
						lat[w] = append(lat[w], time.Since(t0))
					}
				})
			}
			wg.Wait()
			el := time.Since(start)
			b.StopTimer()
			all := slices.Concat(lat...)
			slices.Sort(all)
			info, err := st.Info(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/el.Seconds(), "records/s")
			b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(b.N)/float64(info.State.Msgs-before), "records/segment")
		})
	}
}
