package auditstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"time"

	"github.com/sharedos/sharedos/audit"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ackConfirmTimeout bounds the wait for the server to confirm an ack.
const ackConfirmTimeout = 5 * time.Second

// TailFilter selects records. Zero fields select everything.
type TailFilter struct {
	// Tenant selects one tenant: the reader's consumer is filtered on the
	// tenant's segment subject, and records inside whose tenant is
	// another are skipped.
	Tenant string
	// TurnID selects one turn. The turn is not in the subject: segments
	// holding other turns' records are still delivered to the client and
	// their records skipped there.
	TurnID string
	// Types selects event types. Segments hold every type, so the types
	// are selected in the client.
	Types []audit.Type
}

// TailOptions configures Tail and ReadAll.
type TailOptions struct {
	// Prefix and Stream default to DefaultPrefix and DefaultStream; they
	// must match the sink's.
	Prefix, Stream string
	Filter         TailFilter
	// FromStart makes Tail deliver the stored records first; otherwise it
	// delivers only records stored after it started. ReadAll always reads
	// from the start.
	FromStart bool
	// Durable names a durable consumer; see Tail. ReadAll refuses it.
	Durable string
	// Push reads one tenant (Filter.Tenant) through an ephemeral push
	// consumer delivered to the connection's inbox, using nothing of the
	// JetStream API but creating that consumer: how an audit reader bound
	// to some tenants reads (docs/security.md). Without flow control
	// replies or with a client too slow to keep up, a push read fails
	// rather than skip records; read again.
	Push bool
}

// Tail delivers records — the raw Data bytes as stored, and the decoded
// Event — in stream order to fn, until ctx ends (Tail returns ctx.Err())
// or fn returns an error (Tail returns that error unchanged). The
// records of each segment are delivered in the segment's order; a
// checkpoint is delivered as one record; a message stored before segments
// existed (one record per message) is delivered as it is.
//
// ev is nil when data does not decode as an Event (a damaged or foreign
// record, or a whole message that is not a well-formed segment): the
// bytes are still delivered so a verifier can report them — also to a
// reader with a TurnID or Types filter, since whose they are cannot be
// told.
//
// A record repeated with the same event id and the same bytes (a record
// re-emitted after a failed receipt can be stored twice) is delivered
// once, among the last 65,536 records a call delivered.
//
// Without Durable, Tail reads through an ephemeral ordered consumer: no
// state is kept on the server beyond the session (the consumer is deleted
// when Tail returns, or by the server after 5 minutes of inactivity).
//
// With Durable set, Tail is how an external subscriber consumes the
// stream: it creates (or updates the filter of) a durable pull consumer of
// that name with explicit acks, and acks each stream message after fn
// returned nil for every record in it, waiting for the server to confirm
// the ack — messages whose records the filter skips are acked unseen. A
// message in which fn fails a record is negatively acked and Tail returns;
// the next Tail with the same Durable resumes with that message, so the
// records of it that fn already took are delivered again. Delivery is at
// least once: a message whose ack was lost, or whose fn ran longer than
// the consumer's AckWait (30s), is delivered again (the event id
// identifies a repeated record). The consumer is created with
// MaxAckPending 1, so messages arrive strictly in stream order even across
// redeliveries and restarts, at the cost of one round trip per message.
// FromStart applies when the consumer is created; an existing consumer
// keeps its deliver policy and resumes after its last acked message.
func Tail(ctx context.Context, nc *nats.Conn, opts TailOptions, fn func(data []byte, ev *audit.Event) error) error {
	return tail(ctx, nc, opts, fn, false)
}

// ReadAll reads every stored record matching opts.Filter once, in stream
// order, and returns nil when it has delivered the records stored when it
// was called (records stored meanwhile may or may not be included). It is
// what `node audit verify` and export read with. fn and ev are as in Tail.
func ReadAll(ctx context.Context, nc *nats.Conn, opts TailOptions, fn func(data []byte, ev *audit.Event) error) error {
	if opts.Durable != "" {
		return errors.New("audit: ReadAll reads the whole stream through an ephemeral consumer; Durable is not supported")
	}
	return tail(ctx, nc, opts, fn, true)
}

// FilterSubjects returns the consumer's subject filters for f: nil when f
// selects every tenant and type (the whole stream, checkpoints included);
// exactly SegmentSubject(prefix, f.Tenant) for one tenant; and
// AllSegmentsSubject(prefix) for types of every tenant. It fails for a
// type that is not a literal subject suffix.
func (f TailFilter) FilterSubjects(prefix string) ([]string, error) {
	for _, t := range f.Types {
		if !audit.PlainSubject(string(t)) {
			return nil, fmt.Errorf("audit: invalid event type filter %q", t)
		}
	}
	switch {
	case f.Tenant != "":
		return []string{audit.SegmentSubject(prefix, f.Tenant)}, nil
	case len(f.Types) > 0:
		return []string{audit.AllSegmentsSubject(prefix)}, nil
	}
	return nil, nil
}

func tail(ctx context.Context, nc *nats.Conn, opts TailOptions, fn func([]byte, *audit.Event) error, readAll bool) error {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.Stream == "" {
		opts.Stream = DefaultStream
	}
	if !audit.PlainSubject(opts.Prefix) {
		return fmt.Errorf("audit: invalid subject prefix %q", opts.Prefix)
	}
	filters, err := opts.Filter.FilterSubjects(opts.Prefix)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("audit: jetstream: %w", err)
	}
	rd := newReader(opts.Prefix, opts.Filter, fn)
	if opts.Push {
		return tailPush(ctx, nc, js, opts, filters, rd, readAll)
	}
	if opts.Durable != "" {
		return tailDurable(ctx, js, opts, filters, rd)
	}

	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters, DeliverPolicy: jetstream.DeliverNewPolicy}
	if opts.FromStart || readAll {
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	cons, err := js.OrderedConsumer(ctx, opts.Stream, cfg)
	if err != nil {
		return fmt.Errorf("audit: consumer on stream %s: %w", opts.Stream, err)
	}
	defer func() {
		// The ordered consumer's current server-side consumer; the server
		// would remove it after its inactivity threshold anyway.
		if info := cons.CachedInfo(); info != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = js.DeleteConsumer(dctx, opts.Stream, info.Name)
			cancel()
		}
	}()

	end, err := newReadEnd(readAll, cons.CachedInfo())
	if err != nil || end.empty() {
		return err
	}

	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("audit: consume stream %s: %w", opts.Stream, err)
	}
	defer it.Stop()
	for {
		msg, err := nextRecord(ctx, it, opts.Stream)
		if err != nil {
			return err
		}
		if err := rd.message(msg.Subject(), msg.Data()); err != nil {
			return err
		}
		if readAll {
			md, err := msg.Metadata()
			if err != nil {
				return fmt.Errorf("audit: message metadata: %w", err)
			}
			if end.delivered(md.NumPending) {
				return nil
			}
		}
	}
}

// readEnd is where a ReadAll stops: once it has delivered the records that
// matched when its consumer was created, or once the consumer has nothing
// pending (records removed by retention meanwhile). A tail never stops.
type readEnd struct {
	readAll   bool
	remaining uint64
}

// newReadEnd starts counting a read from its consumer's info at creation
// (needed only for a ReadAll).
func newReadEnd(readAll bool, info *jetstream.ConsumerInfo) (readEnd, error) {
	if !readAll {
		return readEnd{}, nil
	}
	if info == nil {
		return readEnd{}, errors.New("audit: consumer info unavailable")
	}
	return readEnd{readAll: true, remaining: info.NumPending}, nil
}

// empty reports a ReadAll with nothing to read.
func (e readEnd) empty() bool { return e.readAll && e.remaining == 0 }

// delivered counts one record delivered, numPending being the consumer's
// pending count after it, and reports whether a ReadAll is over.
func (e *readEnd) delivered(numPending uint64) bool {
	if !e.readAll {
		return false
	}
	e.remaining--
	return e.remaining == 0 || numPending == 0
}

func tailDurable(ctx context.Context, js jetstream.JetStream, opts TailOptions, filters []string, rd *reader) error {
	cfg := jetstream.ConsumerConfig{
		Durable:       opts.Durable,
		Description:   "SharedOS audit subscriber",
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		MaxAckPending: 1,
	}
	if opts.FromStart {
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	if len(filters) == 1 {
		cfg.FilterSubject = filters[0]
	} else {
		cfg.FilterSubjects = filters
	}
	// The deliver policy of an existing consumer cannot be changed; keep it.
	existing, err := js.Consumer(ctx, opts.Stream, opts.Durable)
	switch {
	case err == nil:
		if info := existing.CachedInfo(); info != nil {
			cfg.DeliverPolicy = info.Config.DeliverPolicy
			cfg.OptStartSeq = info.Config.OptStartSeq
			cfg.OptStartTime = info.Config.OptStartTime
		}
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return fmt.Errorf("audit: consumer %s on stream %s: %w", opts.Durable, opts.Stream, err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, opts.Stream, cfg)
	if err != nil {
		return fmt.Errorf("audit: create consumer %s on stream %s: %w", opts.Durable, opts.Stream, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("audit: consume stream %s: %w", opts.Stream, err)
	}
	// On the way out, give back what this session holds but did not
	// process, so the next session gets it at once instead of after
	// AckWait: drain the iterator (it unsubscribes first, so the pull
	// request still waiting on the server loses its interest and takes no
	// redelivery), nak what was buffered, then nak the record fn failed.
	var failed jetstream.Msg
	defer func() {
		it.Drain()
		for {
			m, err := it.Next(jetstream.NextMaxWait(2 * time.Second))
			if err != nil {
				break
			}
			_ = m.Nak()
		}
		if failed != nil {
			_ = failed.Nak()
		}
	}()
	for {
		msg, err := nextRecord(ctx, it, opts.Stream)
		if err != nil {
			return err
		}
		if err := rd.message(msg.Subject(), msg.Data()); err != nil {
			failed = msg
			return err
		}
		// Confirmed ack: once Tail moves on, the server has the ack (the
		// round trip costs little, since MaxAckPending 1 waits for it).
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackConfirmTimeout)
		err = msg.DoubleAck(actx)
		cancel()
		if err != nil {
			return fmt.Errorf("audit: ack: %w", err)
		}
	}
}

// reader turns stream messages into records for fn: it unpacks
// segments, applies the filter and drops repeated records.
type reader struct {
	segPrefix string // "<prefix>.audit.seg."
	f         TailFilter
	fn        func([]byte, *audit.Event) error
	seen      recentRecords
}

func newReader(prefix string, f TailFilter, fn func([]byte, *audit.Event) error) *reader {
	return &reader{segPrefix: prefix + ".audit.seg.", f: f, fn: fn}
}

// message delivers the records of one stream message.
func (r *reader) message(subject string, data []byte) error {
	if !strings.HasPrefix(subject, r.segPrefix) {
		// A checkpoint, or a record stored before segments.
		return r.record(data)
	}
	if _, err := audit.SegmentCount(data); err != nil {
		// Not a segment this reader can read: the whole message is
		// delivered as one undecodable record, for a verifier to report.
		return r.fn(data, nil)
	}
	return audit.DecodeSegment(data, r.record)
}

// record applies the filter to one record and delivers it.
func (r *reader) record(data []byte) error {
	var e audit.Event
	if json.Unmarshal(data, &e) != nil {
		return r.fn(data, nil)
	}
	switch {
	case r.f.Tenant != "" && e.Tenant != r.f.Tenant,
		r.f.TurnID != "" && e.TurnID != r.f.TurnID,
		len(r.f.Types) > 0 && !slices.Contains(r.f.Types, e.Type),
		r.seen.repeated(e.ID, data):
		return nil
	}
	return r.fn(data, &e)
}

// recentRecordsMax bounds the records a reader remembers to drop repeats.
const recentRecordsMax = 1 << 16

// recentRecords remembers the event ids of the last recentRecordsMax
// records delivered, each with a hash of its bytes (seeded per reader, so
// it cannot be aimed at).
type recentRecords struct {
	seed maphash.Seed
	ids  map[string]uint64
	ring []string
	next int
}

// repeated reports whether a record with event id and these bytes was
// delivered recently, and remembers it otherwise. A record with the same
// id and other bytes is not a repeat: it is delivered, for a verifier to
// judge.
func (rr *recentRecords) repeated(id string, data []byte) bool {
	if id == "" {
		return false
	}
	if rr.ids == nil {
		rr.seed = maphash.MakeSeed()
		rr.ids = make(map[string]uint64)
	}
	h := maphash.Bytes(rr.seed, data)
	old, ok := rr.ids[id]
	if ok && old == h {
		return true
	}
	if !ok {
		if len(rr.ring) < recentRecordsMax {
			rr.ring = append(rr.ring, id)
		} else {
			delete(rr.ids, rr.ring[rr.next])
			rr.ring[rr.next] = id
			rr.next = (rr.next + 1) % recentRecordsMax
		}
	}
	rr.ids[id] = h
	return false
}

// nextRecord is the next record from it, or ctx's error once ctx ends
// (Next may return a buffered record even when ctx has ended).
func nextRecord(ctx context.Context, it jetstream.MessagesContext, stream string) (jetstream.Msg, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	msg, err := it.Next(jetstream.NextContext(ctx))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("audit: read stream %s: %w", stream, err)
	}
	return msg, nil
}
