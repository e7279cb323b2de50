package audit

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/reason"
)

// unavailableCode is the reason code of every receipt that fails because
// the audit stream did not take an event (and of Emit on a closed sink).
// It is the one place to change when a dedicated code exists.
var unavailableCode = reason.Internal

// Defaults for JetStreamOptions.
const (
	DefaultPrefix     = "sharedos"
	DefaultStream     = "SHAREDOS_AUDIT"
	DefaultMaxAge     = 30 * 24 * time.Hour
	DefaultAckTimeout = 5 * time.Second
	DefaultMaxPending = 4096
	DefaultStallWait  = 200 * time.Millisecond
	// DuplicateWindow is the stream's deduplication window: a record
	// re-published (same event id, hence same Nats-Msg-Id) within it is
	// stored once.
	DuplicateWindow = 2 * time.Minute
)

// Durability modes.
const (
	// DurabilityAcked: a receipt completes when the stream acknowledged
	// the record (or the publish failed).
	DurabilityAcked = "acked"
	// DurabilityAsync: Emit returns a completed receipt at once; the
	// record is still published and failures are logged and reported.
	DurabilityAsync = "async"
)

// Headers set on every published record. Nats-Msg-Id (the event id) is
// set too, for deduplication.
const (
	HeaderTurn = "Sharedos-Turn"
	HeaderSeq  = "Sharedos-Seq"
	HeaderHash = "Sharedos-Hash"
)

// JetStreamOptions configures a JetStreamSink. The zero value is usable.
type JetStreamOptions struct {
	// Prefix is the subject prefix, default "sharedos". One or more
	// dot-separated tokens of [A-Za-z0-9_-].
	Prefix string
	// Stream is the stream name, default "SHAREDOS_AUDIT".
	Stream string
	// MaxAge is the retention, default 30 days.
	MaxAge time.Duration
	// Replicas is the stream's replica count, default 1.
	Replicas int
	// Durability is "acked" (default) or "async"; see DurabilityAcked and
	// DurabilityAsync.
	Durability string
	// FailOpen makes receipts complete nil even when the publish failed
	// (the failure is logged at Error and reported to OnPublish): the
	// node keeps serving when the audit stream is down.
	FailOpen bool
	// AckTimeout bounds how long a publish may wait for its ack, default
	// 5s; a publish not acked by then fails its receipt. It is counted
	// from the moment Emit hands the record to the connection, so a
	// receipt resolves at most StallWait+AckTimeout after Emit was called.
	AckTimeout time.Duration
	// MaxPending bounds the publishes in flight (sent, not yet acked),
	// default 4096.
	MaxPending int
	// StallWait is how long Emit may block when MaxPending publishes are
	// in flight before it gives up and fails the record, default 200ms.
	StallWait time.Duration
	// Logger receives publish failures. nil uses slog.Default().
	Logger *slog.Logger
	// OnPublish is called (from any goroutine) after each ack or failure,
	// with the latency from Emit; for metrics. May be nil. It must not
	// block: it runs on the connection's ack-processing path.
	OnPublish func(latency time.Duration, err error)
}

// JetStreamSink is a Sink that publishes each record to a JetStream
// stream, asynchronously, and completes its receipt when the stream
// acknowledges it.
//
// Records are published with PublishMsgAsync from the goroutine that calls
// Emit, so the records one goroutine emits reach the server, and are
// stored, in the order they were emitted; a turn's chain stays in order.
// Publishes are never retried by the sink (a retry could store a record
// after its successor): a failed receipt means "not known to be stored",
// and re-emitting the same record later is safe, since the event id is
// the message id and the stream deduplicates within DuplicateWindow.
//
// The sink starts no goroutines of its own: receipts are completed by the
// jetstream publisher's ack and error callbacks. jetstream's async
// publisher keeps one reply subscription and one status goroutine per sink
// until the connection closes, so create one sink per connection, not one
// per unit of work.
type JetStreamSink struct {
	js        jetstream.JetStream
	stream    string
	prefix    string
	acked     bool
	failOpen  bool
	log       *slog.Logger
	onPublish func(time.Duration, error)
	stallWait jetstream.PublishOpt
	noRetry   jetstream.PublishOpt

	mu      sync.Mutex
	pending map[*nats.Msg]*jsPub
	head    *jsPub // oldest pending, in registration order
	tail    *jsPub
	n       uint64 // records registered so far
	waiters []flushWaiter
	closed  bool

	logLast       atomic.Int64 // unix nanos of the last failure logged
	logSuppressed atomic.Int64
}

type flushWaiter struct {
	upTo uint64
	ch   chan struct{}
}

// jsPub is one record in flight. It is also the Receipt in acked mode.
type jsPub struct {
	msg        nats.Msg
	hv         [3]string // header value storage: turn, seq, hash
	opts       [3]jetstream.PublishOpt
	rec        *Record
	start      time.Time
	n          uint64
	prev, next *jsPub
	done       chan struct{} // nil in async mode
	err        error
}

func (p *jsPub) Done() <-chan struct{} { return p.done }
func (p *jsPub) Err() error            { return p.err }

// NewJetStreamSink creates or updates the audit stream and returns a sink
// publishing to it over nc. ctx bounds the stream creation only.
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
	if opts.Durability == "" {
		opts.Durability = DurabilityAcked
	}
	if opts.AckTimeout == 0 {
		opts.AckTimeout = DefaultAckTimeout
	}
	if opts.MaxPending == 0 {
		opts.MaxPending = DefaultMaxPending
	}
	if opts.StallWait == 0 {
		opts.StallWait = DefaultStallWait
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	switch {
	case !validSubjectTokens(opts.Prefix):
		return nil, fmt.Errorf("audit: invalid subject prefix %q: want dot-separated tokens of [A-Za-z0-9_-]", opts.Prefix)
	case opts.Durability != DurabilityAcked && opts.Durability != DurabilityAsync:
		return nil, fmt.Errorf("audit: invalid durability %q: want %q or %q", opts.Durability, DurabilityAcked, DurabilityAsync)
	case opts.MaxAge < 0, opts.Replicas < 0, opts.AckTimeout < 0, opts.MaxPending < 0, opts.StallWait < 0:
		return nil, errors.New("audit: negative MaxAge, Replicas, AckTimeout, MaxPending or StallWait")
	}

	s := &JetStreamSink{
		stream:    opts.Stream,
		prefix:    opts.Prefix,
		acked:     opts.Durability == DurabilityAcked,
		failOpen:  opts.FailOpen,
		log:       opts.Logger.With(slog.String("component", "audit"), slog.String("stream", opts.Stream)),
		onPublish: opts.OnPublish,
		pending:   make(map[*nats.Msg]*jsPub),
		stallWait: jetstream.WithStallWait(opts.StallWait),
		// No retry on "no responders": jetstream retries from a timer, so
		// a retried record could be stored after its successor, breaking
		// the turn's order.
		noRetry: jetstream.WithRetryAttempts(0),
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(opts.MaxPending),
		// jetstream fails a publish not acked within AckTimeout (also
		// after the connection closed, which its reconnect handling does
		// not cover), which frees its MaxPending slot.
		jetstream.WithPublishAsyncTimeout(opts.AckTimeout),
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, ack *jetstream.PubAck) {
			if ack.Stream != s.stream {
				s.complete(m, fmt.Errorf("audit: record stored in stream %q, not %q", ack.Stream, s.stream))
				return
			}
			s.complete(m, nil)
		}),
		// Called for API errors, no responders (no stream captures the
		// subject), ack timeouts and disconnects. For timeouts it is
		// called with the publisher's lock held: complete must not call
		// back into js.
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
			s.complete(m, err)
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("audit: jetstream: %w", err)
	}
	s.js = js

	cfg := jetstream.StreamConfig{
		Name:        opts.Stream,
		Description: "SharedOS audit trail: hash-chained turn events",
		Subjects:    StreamSubjects(opts.Prefix),
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      opts.MaxAge,
		Replicas:    opts.Replicas,
		Duplicates:  DuplicateWindow,
		Discard:     jetstream.DiscardOld,
		// PersistMode is left at the default: the stream never opts into
		// asynchronous persistence, so an ack means the record was written
		// to the store. Surviving a machine crash (not just a process
		// crash) additionally needs the server to fsync every write:
		// sync_always, which the embedded server sets
		// (natsserver.Options.SyncAlways); for an external cluster it is
		// the operator's choice (or Replicas > 1).
		PersistMode: jetstream.DefaultPersistMode,
	}
	if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
		return nil, fmt.Errorf("audit: create or update stream %s: %w", opts.Stream, err)
	}
	return s, nil
}

// Subject is the subject a record of tenant and type t is published on:
// "<prefix>.audit.<tenant>.<type>". Types contain dots, so a tool.invoked
// record of tenant acme goes to "sharedos.audit.acme.tool.invoked";
// subscribers filter with "<prefix>.audit.<tenant>.>" or
// "<prefix>.audit.*.tool.invoked".
//
// The tenant must be one subject token: a tenant made only of
// [A-Za-z0-9_-] (and not empty) is used as it is; any other tenant is
// written as "~" followed by the lower-case hex of its bytes ("a.b" →
// "~612e62", "" → "~"). "~" never occurs in a plain tenant, so the mapping
// is one to one.
func Subject(prefix, tenant string, t Type) string {
	return prefix + ".audit." + TenantToken(tenant) + "." + string(t)
}

// TenantToken is the subject token for tenant; see Subject.
func TenantToken(tenant string) string {
	if tenant != "" && plainToken(tenant) {
		return tenant
	}
	return "~" + hex.EncodeToString([]byte(tenant))
}

// StreamSubjects are the subjects of the audit stream for prefix.
func StreamSubjects(prefix string) []string {
	return []string{prefix + ".audit.>"}
}

func plainToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validSubjectTokens reports whether s is one or more dot-separated
// non-empty plain tokens (no wildcards, no whitespace).
func validSubjectTokens(s string) bool {
	if s == "" {
		return false
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || !plainToken(tok) {
			return false
		}
	}
	return true
}

// headerSafe reports whether v survives a NATS header unchanged (nats.go
// trims values and replaces CR and LF).
func headerSafe(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] <= ' ' || v[i] >= 0x7f {
			return false
		}
	}
	return v != ""
}

// Emit publishes rec. It does not wait for the server; it blocks only when
// MaxPending publishes are in flight, for at most StallWait. rec (and
// rec.Data) must not be modified afterwards.
//
// In acked mode the receipt completes when the stream acknowledges the
// record, or fails when the publish fails or AckTimeout passes (with
// FailOpen it completes nil either way). In async mode the receipt is
// complete at once. A closed sink refuses every record with a failed
// receipt (completed nil with FailOpen).
func (s *JetStreamSink) Emit(rec *Record) Receipt {
	start := time.Now()
	if rec == nil || rec.Event == nil {
		return s.refuse(start, rec, reason.New(reason.Internal, "audit: nil record"))
	}
	ev := rec.Event
	if !validSubjectTokens(string(ev.Type)) {
		return s.refuse(start, rec, reason.New(reason.Internal, "audit: event type %q is not a valid subject suffix", ev.Type))
	}
	p := &jsPub{rec: rec, start: start}
	p.msg.Subject = Subject(s.prefix, ev.Tenant, ev.Type)
	p.msg.Data = rec.Data
	p.hv = [3]string{ev.TurnID, strconv.FormatUint(ev.Seq, 10), rec.Hash}
	h := make(nats.Header, 4) // + Nats-Msg-Id, set by WithMsgID
	if headerSafe(ev.TurnID) {
		h[HeaderTurn] = p.hv[0:1:1]
	}
	h[HeaderSeq] = p.hv[1:2:2]
	h[HeaderHash] = p.hv[2:3:3]
	p.msg.Header = h
	if s.acked {
		p.done = make(chan struct{})
	}

	// Register before publishing: the ack can arrive before
	// PublishMsgAsync returns.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return s.refuse(start, rec, reason.New(unavailableCode, "audit: sink is closed"))
	}
	s.n++
	p.n = s.n
	s.pending[&p.msg] = p
	if s.tail == nil {
		s.head, s.tail = p, p
	} else {
		p.prev, s.tail.next = s.tail, p
		s.tail = p
	}
	s.mu.Unlock()

	p.opts = [3]jetstream.PublishOpt{s.stallWait, s.noRetry, jetstream.WithMsgID(ev.ID)}
	if _, err := s.js.PublishMsgAsync(&p.msg, p.opts[:]...); err != nil {
		s.complete(&p.msg, err)
	}
	if !s.acked {
		return stored
	}
	return p
}

// refuse reports a record that was never handed to the connection.
func (s *JetStreamSink) refuse(start time.Time, rec *Record, err error) Receipt {
	s.report(rec, time.Since(start), err)
	if s.failOpen {
		return stored
	}
	return Completed(err)
}

// complete resolves the pending record m. Removing m from pending claims
// it: a record completes once even if jetstream reports it twice (a
// disconnect racing a failed write). It leaves the registration-order
// list only once resolved, so Flush returns after the receipts and
// OnPublish calls of the records it waited for.
func (s *JetStreamSink) complete(m *nats.Msg, err error) {
	s.mu.Lock()
	p := s.pending[m]
	if p == nil {
		s.mu.Unlock()
		return
	}
	delete(s.pending, m)
	s.mu.Unlock()
	s.resolve(p, err)
	s.mu.Lock()
	flushed := s.unlinkLocked(p, nil)
	s.mu.Unlock()
	for _, ch := range flushed {
		close(ch)
	}
}

// unlinkLocked removes p from the registration-order list and appends to
// flushed the channels of the Flush calls that no longer wait for
// anything, for the caller to close.
func (s *JetStreamSink) unlinkLocked(p *jsPub, flushed []chan struct{}) []chan struct{} {
	wasHead := p == s.head
	if p.prev != nil {
		p.prev.next = p.next
	} else {
		s.head = p.next
	}
	if p.next != nil {
		p.next.prev = p.prev
	} else {
		s.tail = p.prev
	}
	p.prev, p.next = nil, nil
	if !wasHead || len(s.waiters) == 0 {
		return flushed
	}
	floor := s.n + 1 // the lowest record number still pending
	if s.head != nil {
		floor = s.head.n
	}
	kept := s.waiters[:0]
	for _, w := range s.waiters {
		if w.upTo < floor {
			flushed = append(flushed, w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	clear(s.waiters[len(kept):])
	s.waiters = kept
	return flushed
}

func (s *JetStreamSink) resolve(p *jsPub, err error) {
	if err != nil {
		err = fmt.Errorf("%w: %w", reason.New(unavailableCode, "audit: event %s (turn %s seq %d) not stored", p.rec.Event.ID, p.rec.Event.TurnID, p.rec.Event.Seq), err)
	}
	s.report(p.rec, time.Since(p.start), err)
	if p.done != nil {
		if !s.failOpen {
			p.err = err
		}
		close(p.done)
	}
}

// report logs a failure (rate-limited) and calls OnPublish.
func (s *JetStreamSink) report(rec *Record, latency time.Duration, err error) {
	if err != nil {
		s.logFailure(rec, err)
	}
	if s.onPublish != nil {
		s.onPublish(latency, err)
	}
}

// logFailure logs at most one failure per second, counting the rest. A
// failure the caller sees (acked, fail-closed) is a warning; one nobody
// sees (FailOpen or async) is an error: an audit record is lost.
func (s *JetStreamSink) logFailure(rec *Record, err error) {
	now := time.Now().UnixNano()
	last := s.logLast.Load()
	if now-last < int64(time.Second) || !s.logLast.CompareAndSwap(last, now) {
		s.logSuppressed.Add(1)
		return
	}
	level, msg := slog.LevelWarn, "audit record not stored; the receipt fails"
	if s.failOpen || !s.acked {
		level, msg = slog.LevelError, "audit record not stored; continuing (fail-open or async durability)"
	}
	attrs := []slog.Attr{slog.String("error", err.Error())}
	if rec != nil && rec.Event != nil {
		attrs = append(attrs, slog.String("event_id", rec.Event.ID), slog.String("turn_id", rec.Event.TurnID),
			slog.Uint64("seq", rec.Event.Seq), slog.String("type", string(rec.Event.Type)))
	}
	if n := s.logSuppressed.Swap(0); n > 0 {
		attrs = append(attrs, slog.Int64("suppressed_failures", n))
	}
	s.log.LogAttrs(context.Background(), level, msg, attrs...)
}

// Pending returns the number of records emitted and not yet acked or failed.
func (s *JetStreamSink) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// Flush waits until every record emitted before the call is acked or
// failed (records emitted concurrently, later, are not waited for), or
// ctx ends.
func (s *JetStreamSink) Flush(ctx context.Context) error {
	s.mu.Lock()
	upTo := s.n
	if s.head == nil || s.head.n > upTo {
		s.mu.Unlock()
		return nil
	}
	w := flushWaiter{upTo: upTo, ch: make(chan struct{})}
	s.waiters = append(s.waiters, w)
	s.mu.Unlock()
	select {
	case <-w.ch:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for i, x := range s.waiters {
			if x.ch == w.ch {
				s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
				break
			}
		}
		s.mu.Unlock()
		return fmt.Errorf("audit: flush: %w", ctx.Err())
	}
}

// Close refuses further records, then waits for the pending ones like
// Flush. If ctx ends first, the records still pending are failed (their
// receipts complete with an error) and Close returns the context's error.
// Close is idempotent; it does not close the connection.
func (s *JetStreamSink) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	err := s.Flush(ctx)
	if err == nil {
		return nil
	}
	// Claim what is still pending; records already claimed by an ack or
	// error callback are being resolved there.
	s.mu.Lock()
	var abandoned []*jsPub
	for p := s.head; p != nil; p = p.next {
		if s.pending[&p.msg] == p {
			delete(s.pending, &p.msg)
			abandoned = append(abandoned, p)
		}
	}
	s.mu.Unlock()
	for _, p := range abandoned {
		s.resolve(p, errors.New("audit: sink closed before the stream acknowledged the record"))
	}
	var flushed []chan struct{}
	s.mu.Lock()
	for _, p := range abandoned {
		flushed = s.unlinkLocked(p, flushed)
	}
	s.mu.Unlock()
	for _, ch := range flushed {
		close(ch)
	}
	return fmt.Errorf("audit: close: %d records abandoned: %w", len(abandoned), err)
}
