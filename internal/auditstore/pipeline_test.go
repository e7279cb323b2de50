package auditstore

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
)

// With several commits in flight, many turns emitting concurrently (each
// one record at a time without waiting, the most a turn may have queued)
// are stored each in chain order, every receipt succeeds, and the whole
// trail verifies.
func TestPipelinedCommitsKeepEveryChainInOrder(t *testing.T) {
	_, nc := natstest.Start(t, true)
	sink := newSink(t, nc, JetStreamOptions{MaxInFlight: 8})
	ctx := ctxT(t, 30*time.Second)
	const turns, per = 24, 41
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range turns {
		recs := buildTurn(t, "t"+strconv.Itoa(i%3), "n1.p"+strconv.Itoa(i), per)
		wg.Go(func() {
			var rs []audit.Receipt
			for _, r := range recs {
				rs = append(rs, sink.Emit(r))
			}
			for _, r := range rs {
				if audit.Wait(ctx, r) != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d receipts failed on a healthy stream", n)
	}
	var trail [][]byte
	next := map[string]uint64{}
	if err := ReadAll(ctx, nc, TailOptions{}, func(data []byte, ev *audit.Event) error {
		if ev.Seq != next[ev.TurnID] {
			t.Errorf("turn %s: seq %d stored where %d was due", ev.TurnID, ev.Seq, next[ev.TurnID])
		}
		next[ev.TurnID] = ev.Seq + 1
		trail = append(trail, data)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(trail) != turns*per {
		t.Fatalf("%d records stored, want %d", len(trail), turns*per)
	}
	if rep := cpVerify(t, trail, audit.VerifyOptions{}, false); !rep.OK() || rep.Closed != turns {
		t.Fatalf("verify: %+v", rep)
	}
}

// loseFirst is the stream as seen by the sink, but the first publish of
// the segment with id lose is lost on the way (never stored; its ack
// times out), as when a stream leader goes while later segments reach
// the next one.
type loseFirst struct {
	jetstream.JetStream
	lose    string
	timeout chan struct{} // closed: the lost publish's ack times out
	lost    atomic.Bool
}

func (l *loseFirst) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	if m.Header.Get(jetstream.MsgIDHeader) == l.lose && l.lost.CompareAndSwap(false, true) {
		f := &lostFuture{msg: m, ok: make(chan *jetstream.PubAck), err: make(chan error, 1)}
		go func() {
			<-l.timeout
			f.err <- jetstream.ErrAsyncPublishTimeout
		}()
		return f, nil
	}
	return l.JetStream.PublishMsgAsync(m, opts...)
}

type lostFuture struct {
	msg *nats.Msg
	ok  chan *jetstream.PubAck
	err chan error
}

func (f *lostFuture) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f *lostFuture) Err() <-chan error            { return f.err }
func (f *lostFuture) Msg() *nats.Msg               { return f.msg }

// A segment lost while the segments after it were stored is published
// again and stored after them: its receipt succeeds, and theirs fail —
// they lie before it in the stream, out of chain order — so no caller is
// told a record is stored in order when it is not.
func TestSegmentStoredBeforeAnEarlierRetryFails(t *testing.T) {
	_, nc := natstest.Start(t, true)
	sink := newSink(t, nc, JetStreamOptions{MaxInFlight: 4, AckTimeout: 200 * time.Millisecond, RetryWindow: 5 * time.Second})
	ctx := ctxT(t, 30*time.Second)
	recs := buildTurn(t, "acme", "n1.lost", 6)
	if err := audit.Wait(ctx, sink.Emit(recs[0])); err != nil { // segment 1
		t.Fatal(err)
	}
	lose := &loseFirst{JetStream: sink.js, lose: sink.segID + "2", timeout: make(chan struct{})}
	sink.js = lose
	// Segment 2 is lost; 3 and 4 are published behind it, each once the
	// one before was taken, and only then does 2's ack time out.
	first := sink.Emit(recs[1])
	waitTaken(t, sink)
	second := sink.Emit(recs[2])
	waitTaken(t, sink)
	third := sink.Emit(recs[3])
	waitTaken(t, sink)
	close(lose.timeout)
	if err := audit.Wait(ctx, first); err != nil {
		t.Fatalf("the lost segment, published again: %v", err)
	}
	for i, r := range []audit.Receipt{second, third} {
		if err := audit.Wait(ctx, r); !errors.Is(err, errReordered) {
			t.Errorf("segment %d, stored before the segment retried ahead of it: %v, want %v", i+3, err, errReordered)
		}
	}
	if sink.Retries() == 0 {
		t.Fatal("the lost segment was not published again")
	}
}

// waitTaken waits until the writer took the queue (a step of the
// scenario, bounded; not a timing assert).
func waitTaken(t *testing.T, s *JetStreamSink) {
	t.Helper()
	for range 5000 {
		s.mu.Lock()
		n := s.queue.records
		s.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("the writer never took the queue")
}
