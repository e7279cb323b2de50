package natsfront_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/natsfront"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
	"github.com/sharedos/sharedos/messages"
)

// BenchmarkCallerIdentity is what identities on the bus cost a call: the
// same call through the front, once on an unauthenticated bus with access
// taken as sent ("anonymous"), once from a runtime account whose request
// crosses the service import and is checked against the identity the
// server stamped ("identities").
//
//	go test -run '^$' -bench CallerIdentity -benchmem -count 5 ./internal/natsfront
func BenchmarkCallerIdentity(b *testing.B) {
	for _, mode := range []string{"anonymous", "identities"} {
		b.Run(mode, func(b *testing.B) {
			f := conformance.NewFixture(b)
			kopts := f.Options()
			kopts.StepCeiling = 1 << 30
			k, err := actors.New(kopts)
			if err != nil {
				b.Fatal(err)
			}
			var node, caller *nats.Conn
			fopts := natsfront.Options{Logger: kopts.Logger}
			if mode == "anonymous" {
				_, node = natstest.Start(b, false)
				caller = node
			} else {
				bus := conformance.StartBus(b)
				node, caller = bus.Connect(b, "node"), bus.Connect(b, conformance.AcmeRuntime)
				fopts.Identities, fopts.TrustUnstamped = bus.Identities(), true
			}
			front, err := natsfront.Serve(node, k, fopts)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				_ = front.Stop(context.Background())
				_ = k.Shutdown(context.Background())
			})
			ctx := context.Background()
			turn, err := client.New(caller, nil).Open(ctx, messages.AccessOf(conformance.Ada))
			if err != nil {
				b.Fatal(err)
			}
			args := []byte(`{"workspace":"acme","query":"q"}`)
			if _, err := turn.Invoke(ctx, "notion_search", args); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := turn.Invoke(ctx, "notion_search", args); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
