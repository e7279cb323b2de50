package auditstore

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Push reading is how an audit reader bound to some tenants reads
// (docs/security.md): the only JetStream request its permissions allow is
// creating a consumer whose filter — carried in the request's subject —
// is one of its tenants' segment subject, delivered by push to a subject
// of its own inbox. No stream info, no pull, no acks.

// pushBuffer bounds the messages a push read holds between the
// subscription and fn; with flow control on, the server sends no more
// than the client has taken.
const pushBuffer = 1024

// pushIdle is the push consumer's idle heartbeat (required by flow
// control); pushInactive is how long the server keeps a push consumer
// nobody listens to.
const (
	pushIdle     = 5 * time.Second
	pushInactive = time.Minute
)

// tailPush reads one tenant's segments through an ephemeral push
// consumer delivered to nc's inbox. With readAll it returns once it has
// delivered what was stored when it began.
func tailPush(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, opts TailOptions, filters []string, rd *reader, readAll bool) error {
	if len(filters) != 1 || opts.Filter.Tenant == "" {
		return errors.New("audit: a push read is one tenant's: set Filter.Tenant")
	}
	if opts.Durable != "" {
		return errors.New("audit: a push read uses an ephemeral consumer; Durable is not supported")
	}
	name, err := pushConsumerName()
	if err != nil {
		return err
	}
	msgs := make(chan *nats.Msg, pushBuffer)
	inbox := nc.NewInbox()
	sub, err := nc.ChanSubscribe(inbox, msgs)
	if err != nil {
		return fmt.Errorf("audit: subscribe to the push inbox: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	cfg := jetstream.ConsumerConfig{
		Name: name, Description: "SharedOS tenant audit reader",
		FilterSubject: filters[0], DeliverSubject: inbox,
		DeliverPolicy: jetstream.DeliverNewPolicy, AckPolicy: jetstream.AckNonePolicy,
		FlowControl: true, IdleHeartbeat: pushIdle, InactiveThreshold: pushInactive,
	}
	if opts.FromStart || readAll {
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	cons, err := js.CreatePushConsumer(ctx, opts.Stream, cfg)
	if err != nil {
		return fmt.Errorf("audit: push consumer on stream %s (filter %s): %w", opts.Stream, filters[0], err)
	}
	end, err := newReadEnd(readAll, cons.CachedInfo())
	if err != nil || end.empty() {
		return err
	}
	var next uint64 = 1 // the consumer sequence expected next
	for {
		var m *nats.Msg
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m = <-msgs:
		}
		if len(m.Data) == 0 && m.Header.Get("Status") == "100" {
			// Flow control asks for a reply; a heartbeat does not.
			if m.Reply != "" {
				if err := m.Respond(nil); err != nil {
					return fmt.Errorf("audit: flow control: %w", err)
				}
			}
			continue
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("audit: push delivery without metadata: %w", err)
		}
		if md.Stream != opts.Stream || md.Consumer != name {
			// Any consumer's creator names its deliver subject: a
			// delivery of another consumer to this inbox is not this
			// read's, and its records are not taken.
			return fmt.Errorf("audit: push read of stream %s got a delivery of consumer %s on stream %s; read again", opts.Stream, md.Consumer, md.Stream)
		}
		if md.Sequence.Consumer != next {
			// AckNone and a slow client can lose deliveries; a reader
			// that skipped records must say so, not carry on.
			return fmt.Errorf("audit: push read of stream %s missed deliveries (got consumer seq %d, want %d); read again", opts.Stream, md.Sequence.Consumer, next)
		}
		next++
		if err := rd.message(m.Subject, m.Data); err != nil {
			return err
		}
		if end.delivered(md.NumPending) {
			return nil
		}
	}
}

func pushConsumerName() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("audit: consumer name: %w", err)
	}
	return "sharedos-reader-" + base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]), nil
}
