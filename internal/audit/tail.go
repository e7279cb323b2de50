package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ackConfirmTimeout bounds the wait for the server to confirm an ack.
const ackConfirmTimeout = 5 * time.Second

// TailFilter selects records. Zero fields select everything.
type TailFilter struct {
	// Tenant selects one tenant (filtered by subject on the server).
	Tenant string
	// TurnID selects one turn. The turn is not in the subject: records of
	// other turns are still delivered to the client and skipped there, by
	// their Sharedos-Turn header without decoding them.
	TurnID string
	// Types selects event types (filtered by subject on the server).
	Types []Type
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
}

// Tail delivers records — the raw Data bytes as stored, and the decoded
// Event — in stream order to fn, until ctx ends (Tail returns ctx.Err())
// or fn returns an error (Tail returns that error unchanged).
//
// ev is nil when data does not decode as an Event (a damaged or foreign
// record): the bytes are still delivered so a verifier can report them.
// With Filter.TurnID set, such a record is delivered only if its
// Sharedos-Turn header names the turn.
//
// Without Durable, Tail reads through an ephemeral ordered consumer: no
// state is kept on the server beyond the session (the consumer is deleted
// when Tail returns, or by the server after 5 minutes of inactivity).
//
// With Durable set, Tail is how an external subscriber consumes the
// stream: it creates (or updates the filter of) a durable pull consumer of
// that name with explicit acks, and acks each record after fn returned nil
// for it, waiting for the server to confirm the ack — records skipped by
// the turn filter are acked unseen. A record
// fn fails is negatively acked and Tail returns; the next Tail with the
// same Durable resumes with that record. Delivery is at least once: a
// record whose ack was lost, or whose fn ran longer than the consumer's
// AckWait (30s), is delivered again. The consumer is created with
// MaxAckPending 1, so records arrive strictly in stream order even across
// redeliveries and restarts, at the cost of one round trip per record.
// FromStart applies when the consumer is created; an existing consumer
// keeps its deliver policy and resumes after its last acked record.
func Tail(ctx context.Context, nc *nats.Conn, opts TailOptions, fn func(data []byte, ev *Event) error) error {
	return tail(ctx, nc, opts, fn, false)
}

// ReadAll reads every stored record matching opts.Filter once, in stream
// order, and returns nil when it has delivered the records stored when it
// was called (records stored meanwhile may or may not be included). It is
// what `node audit verify` and export read with. fn and ev are as in Tail.
func ReadAll(ctx context.Context, nc *nats.Conn, opts TailOptions, fn func(data []byte, ev *Event) error) error {
	if opts.Durable != "" {
		return errors.New("audit: ReadAll reads the whole stream through an ephemeral consumer; Durable is not supported")
	}
	return tail(ctx, nc, opts, fn, true)
}

// FilterSubjects returns the subject filters for f: nil when f selects
// every tenant and type. It fails for a type that is not a literal
// subject suffix.
func (f TailFilter) FilterSubjects(prefix string) ([]string, error) {
	tenant := "*"
	if f.Tenant != "" {
		tenant = TenantToken(f.Tenant)
	}
	if len(f.Types) == 0 {
		if f.Tenant == "" {
			return nil, nil
		}
		return []string{prefix + ".audit." + tenant + ".>"}, nil
	}
	out := make([]string, 0, len(f.Types))
	for _, t := range f.Types {
		if !validSubjectTokens(string(t)) {
			return nil, fmt.Errorf("audit: invalid event type filter %q", t)
		}
		s := prefix + ".audit." + tenant + "." + string(t)
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

func tail(ctx context.Context, nc *nats.Conn, opts TailOptions, fn func([]byte, *Event) error, readAll bool) error {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.Stream == "" {
		opts.Stream = DefaultStream
	}
	if !validSubjectTokens(opts.Prefix) {
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
	if opts.Durable != "" {
		return tailDurable(ctx, js, opts, filters, fn)
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

	// ReadAll's end: the records matching at consumer creation. Records
	// removed by retention meanwhile are caught by NumPending reaching 0.
	var remaining uint64
	if readAll {
		info := cons.CachedInfo()
		if info == nil {
			return errors.New("audit: consumer info unavailable")
		}
		if remaining = info.NumPending; remaining == 0 {
			return nil
		}
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
		if data, ev, ok := match(msg, opts.Filter.TurnID); ok {
			if err := fn(data, ev); err != nil {
				return err
			}
		}
		if readAll {
			remaining--
			md, err := msg.Metadata()
			if err != nil {
				return fmt.Errorf("audit: message metadata: %w", err)
			}
			if remaining == 0 || md.NumPending == 0 {
				return nil
			}
		}
	}
}

func tailDurable(ctx context.Context, js jetstream.JetStream, opts TailOptions, filters []string, fn func([]byte, *Event) error) error {
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
		if data, ev, ok := match(msg, opts.Filter.TurnID); ok {
			if err := fn(data, ev); err != nil {
				failed = msg
				return err
			}
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

// match applies the turn filter and decodes the record.
func match(msg jetstream.Msg, turn string) (data []byte, ev *Event, ok bool) {
	var hdrTurn []string
	if turn != "" {
		if h := msg.Headers(); h != nil {
			hdrTurn = h[HeaderTurn]
		}
		if len(hdrTurn) > 0 && hdrTurn[0] != turn {
			return nil, nil, false
		}
	}
	data = msg.Data()
	var e Event
	if err := json.Unmarshal(data, &e); err == nil {
		ev = &e
	}
	if turn != "" {
		if ev != nil {
			return data, ev, ev.TurnID == turn
		}
		return data, nil, len(hdrTurn) > 0 // header named the turn
	}
	return data, ev, true
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
