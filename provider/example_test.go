package provider_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/provider"
)

// A provider offering one tool to every principal. The node asks it for
// its catalogue once per turn and signs every call it decided; the host
// runs a call only with a valid grant from a trusted node key, for the
// revision the turn pinned.
func Example() {
	nc, err := nats.Connect(os.Getenv("NATS_URL"), nats.UserCredentials(os.Getenv("SHAREDOS_CREDS")))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	nodeKey := ed25519.PublicKey(nil) // the node's public key: `node audit keys --local`

	forecast := provider.Tool{
		Definition: provider.Definition{
			Name: "forecast", Namespace: "weather", Description: "Tomorrow's forecast for a city.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","maxLength":100}},"required":["city"],"additionalProperties":false}`),
			Capability:  "weather.read", Requirement: "weather/{city}",
		},
		Handler: func(ctx context.Context, call provider.Call) (provider.Result, error) {
			var in struct{ City string }
			if err := json.Unmarshal(call.Arguments, &in); err != nil {
				return provider.Result{}, err
			}
			return provider.Result{Text: "sunny in " + in.City}, nil
		},
	}
	host, err := provider.Serve(nc, "weather", provider.ProviderFunc(func(context.Context, provider.Access) ([]provider.Tool, error) {
		return []provider.Tool{forecast}, nil
	}), &provider.Options{TTL: time.Minute, Scope: "global", TrustedKeys: []ed25519.PublicKey{nodeKey}})
	if err != nil {
		log.Fatal(err)
	}
	defer host.Stop(context.Background())
}
