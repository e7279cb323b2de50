package auditstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharedos/sharedos/audit"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/sharedos/sharedos/reason"
)

// unavailableCode is the reason code of every receipt that fails because
// the audit stream did not take an event (and of Emit on a closed sink).
// It is the one place to change when a dedicated code exists.
var unavailableCode = reason.Internal

// Defaults for JetStreamOptions.
const (
	DefaultPrefix = "sharedos"
	DefaultStream = "SHAREDOS_AUDIT"
	DefaultMaxAge = 30 * 24 * time.Hour
	// DefaultAckTimeout is how long one publish of a segment waits for
	// its ack before the segment is published again: far above a
	// healthy stream's ack (milliseconds, fsync included), and the stall
	// a segment lost with its stream leader costs the calls behind it.
	DefaultAckTimeout = time.Second
	// DefaultRetryWindow is how long a commit retries a segment the stream
	// did not acknowledge: long enough for JetStream to elect a new stream
	// leader (a few seconds), well inside the default call timeout (30s).
	DefaultRetryWindow = 10 * time.Second
	// DefaultMaxPending and DefaultMaxPendingBytes bound the records
	// queued for the writer (not yet taken into a commit).
	DefaultMaxPending      = 16384
	DefaultMaxPendingBytes = 32 << 20
	DefaultStallWait       = 200 * time.Millisecond
	// DefaultMaxInFlight is how many commits the writer has in flight at
	// once (docs/performance.md has the measured trade-off).
	DefaultMaxInFlight = 1
	// MaxMaxInFlight bounds MaxInFlight.
	MaxMaxInFlight = 64
	// DefaultMaxSegmentBytes bounds one segment (one stored message);
	// it must stay below the server's maximum message size.
	DefaultMaxSegmentBytes = 512 << 10
	// MinSegmentBytes is the least MaxSegmentBytes: room for a few
	// ordinary records per segment.
	MinSegmentBytes = 4 << 10
	// DuplicateWindow is the stream's deduplication window: a segment
	// re-published (same segment id, hence same Nats-Msg-Id) within it is
	// stored once.
	DuplicateWindow = 2 * time.Minute
)

// Durability modes.
const (
	// DurabilityAcked: a receipt completes when the stream acknowledged
	// the segment holding the record (or its publish failed).
	DurabilityAcked = "acked"
	// DurabilityAsync: Emit returns a completed receipt at once; the
	// record is still written and failures are logged and reported.
	DurabilityAsync = "async"
)

// Headers. A segment carries Nats-Msg-Id (its segment id) and
// HeaderSegment; segments have no per-record headers (the records are in
// the payload). HeaderTurn, HeaderSeq and HeaderHash are on the per-record
// messages of streams written before segments, which readers still read.
const (
	HeaderSegment = "Sharedos-Segment"
	HeaderTurn    = "Sharedos-Turn"
	HeaderSeq     = "Sharedos-Seq"
	HeaderHash    = "Sharedos-Hash"
)

// JetStreamOptions configures a JetStreamSink. The zero value is usable.
type JetStreamOptions struct {
	// Prefix is the subject prefix, default "sharedos". One or more
	// dot-separated tokens of [A-Za-z0-9_-].
	Prefix string
	// Stream is the stream name, default "SHAREDOS_AUDIT".
	Stream string
	// MaxAge is the retention, default 30 days, and MaxBytes the most the
	// stream keeps, default 0: unlimited (the oldest records go first).
	// Both only apply when the sink creates the stream: an existing
	// stream's limits are the operator's (see StreamNeeds).
	MaxAge   time.Duration
	MaxBytes int64
	// Replicas is the stream's replica count, default 1: the sink creates
	// the stream with it and refuses an existing stream with fewer.
	Replicas int
	// DuplicateWindow is the stream's deduplication window, default
	// DuplicateWindow (2m): the sink creates the stream with it and
	// refuses an existing stream with a shorter one.
	DuplicateWindow time.Duration
	// Durability is "acked" (default) or "async"; see DurabilityAcked and
	// DurabilityAsync.
	Durability string
	// FailOpen makes receipts complete nil even when the write failed
	// (the failure is logged at Error and reported to OnPublish): the
	// node keeps serving when the audit stream is down.
	FailOpen bool
	// AckTimeout bounds how long one attempt waits for the stream to
	// acknowledge a segment, default DefaultAckTimeout (1s).
	AckTimeout time.Duration
	// RetryWindow is how long a commit keeps publishing a segment the
	// stream did not acknowledge (a stream leader lost, a server
	// restarting), default DefaultRetryWindow; after it the receipts of
	// the segment's records fail (audit_unavailable). Keep it below the
	// call timeout: a caller in acked mode waits through it.
	RetryWindow time.Duration
	// MaxSegmentBytes bounds one segment, default 512 KiB, at least
	// MinSegmentBytes: a commit
	// writes a tenant's records in as many segments as this needs. A
	// record larger than it is written in a segment of its own (and fails
	// if the server refuses a message that large). Keep it below the
	// server's max_payload.
	MaxSegmentBytes int
	// MaxWait is how long the writer may wait, once a record is queued,
	// for more records before it commits, default 0: it commits as soon
	// as the previous commit is acknowledged (records queue meanwhile, so
	// a group grows with the load without any added wait). A positive
	// MaxWait trades latency for fewer, larger segments; the writer
	// commits early when MaxSegmentBytes are queued.
	MaxWait time.Duration
	// MaxInFlight is how many commits may be published and not yet
	// resolved at once, default DefaultMaxInFlight. Segments are resolved
	// in the order they were published whatever the depth, so a receipt
	// completes only after every earlier segment's outcome is known.
	MaxInFlight int
	// MaxPending and MaxPendingBytes bound the records queued for the
	// writer, defaults 16,384 records and 32 MiB. When either is reached
	// Emit waits up to StallWait for the writer to take the queue, then
	// refuses the record with reason overloaded.
	MaxPending      int
	MaxPendingBytes int
	// StallWait is how long Emit may wait on a full queue, default 200ms.
	StallWait time.Duration
	// NoLive turns off the live copies: by default each stored record is
	// also published, after its segment is acknowledged, as a core NATS
	// message on Subject(prefix, tenant, type) for watchers.
	NoLive bool
	// Logger receives write failures. nil uses slog.Default().
	Logger *slog.Logger
	// OnPublish is called once per record, from the writer goroutine,
	// when the record's segment was acked or failed, with the latency
	// from Emit; for metrics. May be nil. It must not block.
	OnPublish func(latency time.Duration, err error)
	// Tracer, if set, records a span per commit, "sharedos.audit.commit"
	// (trace.go). nil: none.
	Tracer trace.Tracer
}

// JetStreamSink is a Sink that writes records to a JetStream stream by
// group commit: one writer goroutine takes every record queued since its
// last commit and stores them as one segment per tenant (see segment.go
// and docs/audit.md), one stream message each — one fsync for the whole
// group instead of one per record. In acked mode a record's receipt
// completes when the segment holding it is acknowledged.
//
// Order: records are queued in the order Emit is called, commits are
// published in that order (up to MaxInFlight at once, on one connection,
// which the stream stores in order), and segments are resolved strictly
// in publish order: a receipt completes only after the outcome of every
// earlier segment is known, and succeeds only if its segment was stored
// after every earlier segment that was — its stream sequence is above
// theirs. A segment the stream did not acknowledge is published again,
// with the same segment id, until RetryWindow after its oldest record's
// Emit, and no new commit is published meanwhile; a segment that was
// stored while an earlier one was being retried, and so lies before it in
// the stream, fails (errReordered) rather than be reported stored out of
// chain order. A failed receipt means "not known to be stored in order".
// Each segment carries a unique segment id as Nats-Msg-Id, so a segment
// stored twice within DuplicateWindow is kept once (the stream
// acknowledges the copy it kept); readers drop a record repeated with the
// same event id and bytes (a record re-emitted after a failed receipt may
// be stored in two segments).
//
// Bounded: at most MaxPending records (MaxPendingBytes) wait for the
// writer, plus the MaxInFlight commits in flight; beyond that Emit waits
// at most StallWait, then refuses with reason overloaded. Every receipt
// completes within RetryWindow + AckTimeout of its Emit.
type JetStreamSink struct {
	nc          *nats.Conn
	js          jetstream.JetStream
	stream      string
	prefix      string
	acked       bool
	failOpen    bool
	live        bool
	maxSeg      int
	maxWait     time.Duration
	maxInFlight int
	maxRecs     int
	maxBytes    int
	stallWait   time.Duration
	log         *slog.Logger
	onPublish   func(time.Duration, error)
	tracer      trace.Tracer
	segID       string // "<random incarnation>-": segment ids are segID + a counter
	// retryWindow bounds a commit's retries; retries counts them.
	retryWindow time.Duration
	ackTimeout  time.Duration
	retries     atomic.Uint64
	pubOpts     [2]jetstream.PublishOpt

	mu        sync.Mutex
	queue     *group // records emitted since the writer last took the queue
	n         uint64 // records accepted so far
	resolved  uint64 // records whose outcome is known (their receipts are completing)
	committed uint64 // records whose commit finished: receipts, OnPublish and live copies done
	progress  chan struct{}
	closed    bool

	wake  chan struct{} // the queue became non-empty
	full  chan struct{} // MaxSegmentBytes queued (only with MaxWait)
	quit  chan struct{} // Close was called
	abort chan struct{} // Close's context ended: fail what is left
	done  chan struct{} // the writer returned

	closeOnce, abortOnce sync.Once
	segSeq               uint64 // writer only

	logLast       atomic.Int64 // unix nanos of the last failure logged
	logSuppressed atomic.Int64
}

// group is what one commit writes: the queued records, by tenant.
type group struct {
	segs     []*segment
	byTenant map[string]*segment // each tenant's segment still taking records
	records  int
	bytes    int
}

// segment is one tenant's records of one commit. It is also the Receipt
// of each of them in acked mode.
type segment struct {
	tenant string
	recs   []*audit.Record
	starts []time.Time
	size   int           // encoded size
	done   chan struct{} // nil in async mode
	err    error
}

func (g *segment) Done() <-chan struct{} { return g.done }
func (g *segment) Err() error            { return g.err }

// NewJetStreamSink creates the audit stream when it is missing, or checks
// that the existing one can serve (never changing it but for the one-time
// move of a stream made before segments; see StreamNeeds), starts the
// writer and returns a sink writing to the stream over nc. ctx bounds the
// stream's creation or check only. Close stops the writer.
func NewJetStreamSink(ctx context.Context, nc *nats.Conn, opts JetStreamOptions) (*JetStreamSink, error) {
	if nc == nil {
		return nil, errors.New("audit: NewJetStreamSink: nil connection")
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.Stream == "" {
		opts.Stream = DefaultStream
	}
	if opts.MaxAge == 0 {
		opts.MaxAge = DefaultMaxAge
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.DuplicateWindow == 0 {
		opts.DuplicateWindow = DuplicateWindow
	}
	if opts.Durability == "" {
		opts.Durability = DurabilityAcked
	}
	if opts.RetryWindow == 0 {
		opts.RetryWindow = DefaultRetryWindow
	}
	if opts.AckTimeout == 0 {
		opts.AckTimeout = DefaultAckTimeout
	}
	if opts.MaxSegmentBytes == 0 {
		opts.MaxSegmentBytes = DefaultMaxSegmentBytes
	}
	if opts.MaxPending == 0 {
		opts.MaxPending = DefaultMaxPending
	}
	if opts.MaxInFlight == 0 {
		opts.MaxInFlight = DefaultMaxInFlight
	}
	if opts.MaxPendingBytes == 0 {
		opts.MaxPendingBytes = DefaultMaxPendingBytes
	}
	if opts.StallWait == 0 {
		opts.StallWait = DefaultStallWait
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	switch {
	case !audit.PlainSubject(opts.Prefix):
		return nil, fmt.Errorf("audit: invalid subject prefix %q: want dot-separated tokens of [A-Za-z0-9_-]", opts.Prefix)
	case opts.Durability != DurabilityAcked && opts.Durability != DurabilityAsync:
		return nil, fmt.Errorf("audit: invalid durability %q: want %q or %q", opts.Durability, DurabilityAcked, DurabilityAsync)
	case opts.MaxAge < 0, opts.MaxBytes < 0, opts.Replicas < 0, opts.DuplicateWindow < 0, opts.AckTimeout < 0, opts.RetryWindow < 0,
		opts.MaxPending < 0, opts.MaxPendingBytes < 0, opts.StallWait < 0, opts.MaxSegmentBytes < 0, opts.MaxWait < 0:
		return nil, errors.New("audit: negative MaxAge, MaxBytes, Replicas, DuplicateWindow, AckTimeout, RetryWindow, MaxPending, MaxPendingBytes, StallWait, MaxSegmentBytes or MaxWait")
	case opts.MaxInFlight < 0 || opts.MaxInFlight > MaxMaxInFlight:
		return nil, fmt.Errorf("audit: MaxInFlight %d must be between 1 and %d", opts.MaxInFlight, MaxMaxInFlight)
	case opts.MaxSegmentBytes < MinSegmentBytes || opts.MaxSegmentBytes > audit.MaxSegmentSize:
		return nil, fmt.Errorf("audit: MaxSegmentBytes %d must be between %d and %d", opts.MaxSegmentBytes, MinSegmentBytes, audit.MaxSegmentSize)
	}

	var inc [8]byte
	if _, err := rand.Read(inc[:]); err != nil {
		return nil, fmt.Errorf("audit: segment ids: %w", err)
	}
	s := &JetStreamSink{
		retryWindow: opts.RetryWindow,
		ackTimeout:  opts.AckTimeout,
		nc:          nc,
		stream:      opts.Stream,
		prefix:      opts.Prefix,
		acked:       opts.Durability == DurabilityAcked,
		failOpen:    opts.FailOpen,
		live:        !opts.NoLive,
		maxSeg:      opts.MaxSegmentBytes,
		maxWait:     opts.MaxWait,
		maxInFlight: opts.MaxInFlight,
		maxRecs:     opts.MaxPending,
		maxBytes:    opts.MaxPendingBytes,
		stallWait:   opts.StallWait,
		log:         opts.Logger.With(slog.String("component", "audit"), slog.String("stream", opts.Stream)),
		onPublish:   opts.OnPublish,
		tracer:      opts.Tracer,
		segID:       hex.EncodeToString(inc[:]) + "-",
		queue:       newGroup(),
		progress:    make(chan struct{}),
		wake:        make(chan struct{}, 1),
		full:        make(chan struct{}, 1),
		quit:        make(chan struct{}),
		abort:       make(chan struct{}),
		done:        make(chan struct{}),
	}
	js, err := jetstream.New(nc,
		// jetstream fails a publish not acked within AckTimeout (also
		// after the connection closed, which its reconnect handling does
		// not cover). Its in-flight bound is never reached: the writer
		// has at most MaxInFlight commits in flight, and MaxPending
		// records queued.
		jetstream.WithPublishAsyncTimeout(opts.AckTimeout),
		jetstream.WithPublishAsyncMaxPending(1<<20),
	)
	if err != nil {
		return nil, fmt.Errorf("audit: jetstream: %w", err)
	}
	s.js = js
	s.pubOpts = [2]jetstream.PublishOpt{
		// No retry on "no responders": jetstream retries from a timer, so
		// a retried segment could be stored after the next commit's.
		jetstream.WithRetryAttempts(0),
		jetstream.WithStallWait(opts.StallWait),
	}

	// The sink creates the stream when it is missing and otherwise only
	// checks it (stream.go): an operator's edits stay.
	if err := ensureStream(ctx, js, StreamNeeds{
		Stream: opts.Stream, Prefix: opts.Prefix, Replicas: opts.Replicas, DuplicateWindow: opts.DuplicateWindow,
		MaxSegmentBytes: opts.MaxSegmentBytes, Live: !opts.NoLive, MaxAge: opts.MaxAge, MaxBytes: opts.MaxBytes,
	}, s.log); err != nil {
		return nil, err
	}
	go s.run()
	return s, nil
}

func newGroup() *group { return &group{byTenant: make(map[string]*segment, 1)} }

// Emit queues rec for the writer's next commit. It does not wait for the
// server; it blocks only when the queue is full (MaxPending or
// MaxPendingBytes), for at most StallWait, and then refuses the record
// with reason overloaded. rec (and rec.Data) must not be modified
// afterwards.
//
// In acked mode the receipt completes when the stream acknowledges the
// segment holding the record, or fails when the segment is still not
// acknowledged after RetryWindow (with FailOpen it completes nil either
// way). In async
// mode the receipt is complete at once. A closed sink refuses every record
// with a failed receipt (completed nil with FailOpen).
func (s *JetStreamSink) Emit(rec *audit.Record) audit.Receipt {
	start := time.Now()
	if rec == nil || rec.Event == nil {
		return s.refuse(start, rec, reason.New(reason.Internal, "audit: nil record"))
	}
	ev := rec.Event
	if !audit.PlainSubject(string(ev.Type)) {
		return s.refuse(start, rec, reason.New(reason.Internal, "audit: event type %q is not a valid subject suffix", ev.Type))
	}
	if len(rec.Data) == 0 {
		return s.refuse(start, rec, reason.New(reason.Internal, "audit: empty record"))
	}
	size := audit.SegmentRecordOverhead + len(rec.Data)
	var stall *time.Timer
	s.mu.Lock()
	for {
		if s.closed {
			s.mu.Unlock()
			return s.refuse(start, rec, reason.New(unavailableCode, "audit: sink is closed"))
		}
		q := s.queue
		if q.records == 0 || q.records < s.maxRecs && q.bytes+size <= s.maxBytes {
			break
		}
		// Full: wait for the writer to take the queue, at most StallWait.
		ch := s.progress
		s.mu.Unlock()
		if stall == nil {
			stall = time.NewTimer(s.stallWait)
			defer stall.Stop()
		}
		select {
		case <-ch:
		case <-stall.C:
			return s.refuse(start, rec, reason.New(reason.Overloaded, "audit: the writer is behind: %d records queued (limits %d records, %d bytes)", q.records, s.maxRecs, s.maxBytes))
		}
		s.mu.Lock()
	}
	q := s.queue
	seg := q.byTenant[ev.Tenant]
	if seg == nil || seg.size+size > s.maxSeg {
		seg = &segment{tenant: ev.Tenant, size: audit.SegmentHeaderSize}
		if s.acked {
			seg.done = make(chan struct{})
		}
		q.byTenant[ev.Tenant] = seg
		q.segs = append(q.segs, seg)
	}
	seg.recs = append(seg.recs, rec)
	seg.starts = append(seg.starts, start)
	seg.size += size
	q.records++
	q.bytes += size
	s.n++
	first := q.records == 1
	crossed := s.maxWait > 0 && q.bytes >= s.maxSeg && q.bytes-size < s.maxSeg
	s.mu.Unlock()
	if first {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	if crossed {
		select {
		case s.full <- struct{}{}:
		default:
		}
	}
	if !s.acked {
		return audit.Completed(nil)
	}
	return seg
}

// refuse reports a record that was never queued.
func (s *JetStreamSink) refuse(start time.Time, rec *audit.Record, err error) audit.Receipt {
	s.report(rec, time.Since(start), err)
	if s.failOpen {
		return audit.Completed(nil)
	}
	return audit.Completed(err)
}

// run is the writer. It takes the queue as a commit whenever the queue is
// not empty and fewer than MaxInFlight commits are unresolved, publishes
// the commit's segments without waiting, and resolves segments strictly in
// the order they were published (see settle), until Close.
func (s *JetStreamSink) run() {
	defer close(s.done)
	w := writer{s: s}
	defer w.stop()
	quit := s.quit
	for {
		if w.room() {
			if wait, ok := s.ready(quit == nil); ok {
				if g := s.take(); g != nil {
					w.lingerStop()
					w.publish(g)
					continue
				}
			} else if wait > 0 {
				w.lingerFor(wait)
			}
		}
		if w.idle() && quit == nil {
			return // closing, and nothing is queued or in flight
		}
		var wake <-chan struct{}
		if w.room() {
			wake = s.wake
		}
		var ok <-chan *jetstream.PubAck
		var failed <-chan error
		var retry <-chan time.Time
		head := w.head()
		if head != nil && head.fut == nil && head.retryAt.IsZero() {
			w.failed(head, head.err) // never published: its window had passed, or the publish failed
			continue
		}
		var limit <-chan time.Time
		switch {
		case head == nil:
		case head.fut != nil:
			ok, failed = head.fut.Ok(), head.fut.Err()
			if head.late {
				limit = w.retryAt(head.deadline.Add(s.ackTimeout))
			}
		default:
			retry = w.retryAt(head.retryAt)
		}
		select {
		case ack := <-ok:
			w.acked(head, ack)
		case err := <-failed:
			w.failed(head, err)
		case <-retry:
			w.republish(head)
		case <-limit:
			w.settle(head, errWindowPassed)
		case <-wake:
		case <-w.lingerC():
			w.lingerOn = false
		case <-s.full:
			w.lingerStop()
		case <-quit:
			quit = nil
		case <-s.abort:
			w.abandon()
			return
		}
	}
}

// ready reports whether the queue should be taken now: it holds records,
// and MaxWait is 0, MaxSegmentBytes are queued, the sink is closing, or
// the oldest queued record has waited MaxWait. Otherwise wait is how much
// longer to wait (0: the queue is empty).
func (s *JetStreamSink) ready(closing bool) (wait time.Duration, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue
	if q.records == 0 {
		return 0, false
	}
	if s.maxWait == 0 || closing || q.bytes >= s.maxSeg {
		return 0, true
	}
	wait = time.Until(q.segs[0].starts[0].Add(s.maxWait))
	return max(wait, time.Nanosecond), wait <= 0
}

// take swaps the queue for an empty one and returns it (nil when empty).
func (s *JetStreamSink) take() *group {
	s.mu.Lock()
	g := s.queue
	if g.records == 0 {
		s.mu.Unlock()
		return nil
	}
	s.queue = newGroup()
	ch := s.progress
	s.progress = make(chan struct{})
	s.mu.Unlock()
	close(ch) // stalled Emits find room
	select {
	case <-s.full:
	default:
	}
	return g
}

// writer is the state of the writer goroutine: the published segments not
// yet resolved, oldest first, and what orders them.
type writer struct {
	s *JetStreamSink
	// flights are the segments published and not yet resolved, in
	// publish order; flights[next] is the head, the only one resolved.
	flights []*flight
	next    int
	commits int // commits with a segment unresolved
	// published counts publishes. A segment published again (a retry)
	// may be stored after segments published before the retry: mark is
	// the last retried segment resolved stored — its stream sequence,
	// and the count at its last publish — and a segment published before
	// that count and stored at or below that sequence lies before it in
	// the stream, out of chain order (only a retry can reorder: one
	// connection's publishes are stored in the order made).
	published uint64
	markSeq   uint64
	markPub   uint64
	// stalled is set while the head waits to be published again: no new
	// commit is published meanwhile, so retries do not race fresh
	// segments (records queue, bounded by MaxPending).
	stalled  bool
	timer    *time.Timer // the head's retry
	linger   *time.Timer // MaxWait, for the queue's oldest record
	lingerOn bool
}

// flight is one published segment of a commit.
type flight struct {
	c        *commitFlight
	seg      *segment
	msg      *nats.Msg
	fut      jetstream.PubAckFuture // nil while it waits to be published again
	deadline time.Time              // RetryWindow after its oldest record's Emit: not published again after it
	retryAt  time.Time
	backoff  time.Duration
	pub      uint64 // writer.published at its last publish
	retried  bool
	// late: first published after its deadline (it queued behind a
	// failing segment); it is given until deadline + AckTimeout.
	late bool
	err  error // set before it was published: resolve with it
}

// commitFlight is one commit: a group's segments, and its span.
type commitFlight struct {
	g       *group
	span    trace.Span
	pending int // segments unresolved
	errs    []error
}

func (w *writer) room() bool {
	return !w.stalled && w.commits < w.s.maxInFlight
}

func (w *writer) idle() bool { return w.next == len(w.flights) }

func (w *writer) head() *flight {
	if w.idle() {
		return nil
	}
	return w.flights[w.next]
}

// publish makes g a commit: each segment encoded, given a segment id and
// published at once; no ack is awaited here. A segment whose oldest record
// is already past RetryWindow (it queued behind a failing commit) is not
// published: it fails when it is the head.
func (w *writer) publish(g *group) {
	s := w.s
	c := &commitFlight{g: g, pending: len(g.segs), errs: make([]error, len(g.segs))}
	c.span = s.startCommit(g)
	now := time.Now()
	for _, seg := range g.segs {
		b := audit.AppendSegmentHeader(make([]byte, 0, seg.size), len(seg.recs))
		for _, r := range seg.recs {
			b = audit.AppendSegmentRecord(b, r.Data)
		}
		s.segSeq++
		f := &flight{c: c, seg: seg, deadline: seg.starts[0].Add(s.retryWindow), backoff: retryBackoff, msg: &nats.Msg{
			Subject: audit.SegmentSubject(s.prefix, seg.tenant),
			Data:    b,
			Header: nats.Header{
				jetstream.MsgIDHeader: []string{s.segID + strconv.FormatUint(s.segSeq, 10)},
				HeaderSegment:         []string{segmentHeaderValue},
			},
		}}
		if now.After(f.deadline.Add(s.ackTimeout)) {
			f.err = errWindowPassed
		} else {
			w.published++
			f.pub, f.late = w.published, now.After(f.deadline)
			f.fut, f.err = s.js.PublishMsgAsync(f.msg, s.pubOpts[:]...)
		}
		w.flights = append(w.flights, f)
	}
	w.commits++
}

// acked settles the head with the stream's ack: stored, unless stored in
// another stream or out of order.
func (w *writer) acked(f *flight, ack *jetstream.PubAck) {
	var err error
	switch {
	case ack.Stream != w.s.stream:
		err = fmt.Errorf("audit: segment stored in stream %q, not %q", ack.Stream, w.s.stream)
	case f.pub < w.markPub && ack.Sequence <= w.markSeq:
		err = fmt.Errorf("%w (stream sequence %d, the retried segment before it %d)", errReordered, ack.Sequence, w.markSeq)
	case f.retried:
		w.markSeq, w.markPub = ack.Sequence, f.pub
	}
	w.settle(f, err)
}

// failed handles a head the stream did not acknowledge (a timeout, a lost
// leader, a refusal, or a publish that could not be made): it is published
// again, with the same segment id, after a backoff, while that is before
// its deadline; then it fails. The stream keeps one copy of a segment
// stored twice within DuplicateWindow, and acknowledges the copy it kept.
func (w *writer) failed(f *flight, err error) {
	if err == nil {
		err = errWindowPassed
	}
	if errors.Is(err, errWindowPassed) || errors.Is(err, errSinkClosed) || !time.Now().Add(f.backoff).Before(f.deadline) {
		w.settle(f, err)
		return
	}
	f.fut, f.err = nil, err
	f.retryAt = time.Now().Add(f.backoff)
	f.backoff = min(2*f.backoff, maxRetryBackoff)
	w.stalled = true
}

// republish publishes the head again, once its backoff has passed.
func (w *writer) republish(f *flight) {
	if time.Now().After(f.deadline) {
		w.settle(f, fmt.Errorf("%w: %w", errWindowPassed, f.err))
		return
	}
	w.s.retries.Add(1)
	w.published++
	f.pub, f.retried = w.published, true
	fut, err := w.s.js.PublishMsgAsync(f.msg, w.s.pubOpts[:]...)
	if err != nil {
		w.failed(f, err)
		return
	}
	f.fut, f.retryAt = fut, time.Time{}
}

// settle resolves the head: its receipts complete, its live copies go out
// when it was stored, and its commit ends with its last segment.
func (w *writer) settle(f *flight, err error) {
	s := w.s
	w.flights[w.next] = nil
	w.next++
	if w.idle() {
		w.flights, w.next = w.flights[:0], 0
	}
	w.stalled = false
	c := f.c
	c.pending--
	c.errs[len(c.g.segs)-c.pending-1] = err
	s.mu.Lock()
	s.resolved += uint64(len(f.seg.recs))
	s.mu.Unlock()
	s.resolve(f.seg, err)
	if s.live && err == nil {
		pfx := audit.Subject(s.prefix, f.seg.tenant, "") // the tenant's live prefix
		for _, r := range f.seg.recs {
			// A core publish only buffers; a failure here (closed
			// connection) loses a live copy, never a stored record.
			_ = s.nc.Publish(pfx+string(r.Event.Type), r.Data)
		}
	}
	if c.pending > 0 {
		return
	}
	w.commits--
	endCommit(c.span, c.errs)
	// Flush returns after the receipts and the live copies.
	s.mu.Lock()
	s.committed += uint64(c.g.records)
	ch := s.progress
	s.progress = make(chan struct{})
	s.mu.Unlock()
	close(ch)
}

// abandon fails everything in flight and everything queued: Close's
// context ended.
func (w *writer) abandon() {
	for h := w.head(); h != nil; h = w.head() {
		w.settle(h, errSinkClosed)
	}
	for g := w.s.take(); g != nil; g = w.s.take() {
		c := &commitFlight{g: g, pending: len(g.segs), errs: make([]error, len(g.segs)), span: w.s.startCommit(g)}
		w.commits++
		for _, seg := range g.segs {
			w.flights = append(w.flights, &flight{c: c, seg: seg})
		}
		for h := w.head(); h != nil; h = w.head() {
			w.settle(h, errSinkClosed)
		}
	}
}

func (w *writer) retryAt(at time.Time) <-chan time.Time {
	if w.timer == nil {
		w.timer = time.NewTimer(time.Until(at))
	} else {
		w.timer.Reset(time.Until(at))
	}
	return w.timer.C
}

func (w *writer) lingerFor(d time.Duration) {
	if w.lingerOn {
		return
	}
	if w.linger == nil {
		w.linger = time.NewTimer(d)
	} else {
		w.linger.Reset(d)
	}
	w.lingerOn = true
}

func (w *writer) lingerC() <-chan time.Time {
	if !w.lingerOn {
		return nil
	}
	return w.linger.C
}

func (w *writer) lingerStop() {
	if w.lingerOn {
		w.linger.Stop()
		w.lingerOn = false
	}
}

func (w *writer) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.linger != nil {
		w.linger.Stop()
	}
}

// The pause before a segment is published again, doubling to at most
// maxRetryBackoff.
const (
	retryBackoff    = 50 * time.Millisecond
	maxRetryBackoff = time.Second
)

var (
	errSinkClosed   = errors.New("audit: sink closed before the stream acknowledged the segment")
	errWindowPassed = fmt.Errorf("audit: the stream did not acknowledge the segment within the retry window of its oldest record: %w", jetstream.ErrAsyncPublishTimeout)
	errReordered    = errors.New("audit: the segment was stored after a later segment (a retry of an earlier one landed first), out of chain order")
)

// Retries is how many times the sink published a segment again because
// the stream had not acknowledged it.
func (s *JetStreamSink) Retries() uint64 { return s.retries.Load() }

// segmentHeaderValue is HeaderSegment's value: the format version.
var segmentHeaderValue = strconv.Itoa(audit.SegmentVersion)

func (s *JetStreamSink) resolve(seg *segment, err error) {
	if err != nil {
		err = fmt.Errorf("%w: %w", reason.New(unavailableCode, "audit: segment of %d records (first: event %s, turn %s seq %d) not stored",
			len(seg.recs), seg.recs[0].Event.ID, seg.recs[0].Event.TurnID, seg.recs[0].Event.Seq), err)
		s.logFailure(seg.recs[0], len(seg.recs), err)
	}
	if s.onPublish != nil {
		now := time.Now()
		for _, st := range seg.starts {
			s.onPublish(now.Sub(st), err)
		}
	}
	if seg.done != nil {
		if !s.failOpen {
			seg.err = err
		}
		close(seg.done)
	}
}

// report logs a failure (rate-limited) and calls OnPublish.
func (s *JetStreamSink) report(rec *audit.Record, latency time.Duration, err error) {
	if err != nil {
		s.logFailure(rec, 1, err)
	}
	if s.onPublish != nil {
		s.onPublish(latency, err)
	}
}

// logFailure logs at most one failure per second, counting the rest. A
// failure the caller sees (acked, fail-closed) is a warning; one nobody
// sees (FailOpen or async) is an error: audit records are lost.
func (s *JetStreamSink) logFailure(rec *audit.Record, records int, err error) {
	now := time.Now().UnixNano()
	last := s.logLast.Load()
	if now-last < int64(time.Second) || !s.logLast.CompareAndSwap(last, now) {
		s.logSuppressed.Add(1)
		return
	}
	level, msg := slog.LevelWarn, "audit records not stored; their receipts fail"
	if s.failOpen || !s.acked {
		level, msg = slog.LevelError, "audit records not stored; continuing (fail-open or async durability)"
	}
	attrs := []slog.Attr{slog.String("error", err.Error()), slog.Int("records", records)}
	if rec != nil && rec.Event != nil {
		attrs = append(attrs, slog.String("event_id", rec.Event.ID), slog.String("turn_id", rec.Event.TurnID),
			slog.Uint64("seq", rec.Event.Seq), slog.String("type", string(rec.Event.Type)))
	}
	if n := s.logSuppressed.Swap(0); n > 0 {
		attrs = append(attrs, slog.Int64("suppressed_failures", n))
	}
	s.log.LogAttrs(context.Background(), level, msg, attrs...)
}

// Pending returns the number of records emitted and not yet acked or
// failed (queued, or in the commit in flight).
func (s *JetStreamSink) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.n - s.resolved)
}

// Flush waits until every record emitted before the call is acked or
// failed (records emitted concurrently, later, are not waited for), or
// ctx ends.
func (s *JetStreamSink) Flush(ctx context.Context) error {
	s.mu.Lock()
	upTo := s.n
	for s.committed < upTo {
		ch := s.progress
		s.mu.Unlock()
		select {
		case <-ch:
		case <-s.done:
			// The writer is gone (closed and aborted); nothing more
			// completes.
			return errors.New("audit: flush: the sink's writer has stopped")
		case <-ctx.Done():
			return fmt.Errorf("audit: flush: %w", ctx.Err())
		}
		s.mu.Lock()
	}
	s.mu.Unlock()
	return nil
}

// Close refuses further records, lets the writer commit what is queued
// and waits for it to stop. If ctx ends first, what is still queued or
// awaiting its ack is failed (receipts complete with an error) and Close
// returns the context's error. Close is idempotent; it does not close the
// connection.
func (s *JetStreamSink) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.closeOnce.Do(func() { close(s.quit) })
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	abandoned := s.n - s.committed
	s.mu.Unlock()
	s.abortOnce.Do(func() { close(s.abort) })
	<-s.done
	return fmt.Errorf("audit: close: %d records abandoned: %w", abandoned, ctx.Err())
}
