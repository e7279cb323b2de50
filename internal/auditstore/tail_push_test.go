package auditstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sharedos/sharedos/audit"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/internal/natsserver/natstest"
)

// A push read takes only its own consumer's deliveries: another consumer
// delivering to the read's inbox (any consumer's creator names its deliver
// subject) ends the read with an error, and none of its records reaches
// fn — here, a consumer that replays the tenant's stored records to a
// read that asked for new records only.
func TestPushReadRefusesAnotherConsumersDeliveries(t *testing.T) {
	_, nc := natstest.Start(t, true)
	sink := newSink(t, nc, JetStreamOptions{})
	emitAll(t, sink, buildTurn(t, "acme", "n1.a1", 6))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	var got int
	go func() {
		done <- Tail(ctx, nc, TailOptions{Filter: TailFilter{Tenant: "acme"}, Push: true}, func([]byte, *audit.Event) error {
			got++
			return nil
		})
	}()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctxT(t, 5*time.Second), DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	// The read's consumer, once it exists, and where it delivers.
	var inbox string
	wait := ctxT(t, 10*time.Second)
	for inbox == "" {
		for c := range st.ListConsumers(wait).Info() {
			if strings.HasPrefix(c.Name, "sharedos-reader-") {
				inbox = c.Config.DeliverSubject
			}
		}
		select {
		case <-wait.Done():
			t.Fatal("the push read made no consumer")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, err := js.CreatePushConsumer(ctxT(t, 5*time.Second), DefaultStream, jetstream.ConsumerConfig{
		Name: "replayer", FilterSubject: audit.SegmentSubject(DefaultPrefix, "acme"), DeliverSubject: inbox,
		DeliverPolicy: jetstream.DeliverAllPolicy, AckPolicy: jetstream.AckNonePolicy,
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "delivery of consumer replayer") {
			t.Fatalf("the read ended with %v", err)
		}
	case <-wait.Done():
		t.Fatal("the read took the replayer's deliveries")
	}
	if got != 0 {
		t.Fatalf("fn got %d records of another consumer", got)
	}
}
