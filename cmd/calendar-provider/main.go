// Command calendar-provider serves the example calendar provider over NATS
// as its own process:
//
//	go run ./cmd/calendar-provider --nats nats://127.0.0.1:4222
//
// A node whose cluster.yaml lists `{id: calendar, kind: nats}` reaches it.
// It runs only calls a trusted node signed, and connects as its bus
// identity provider-<id>; internal/providerproc says where the keys and
// credentials come from (on one machine, from the local node with no
// set-up).
package main

import (
	"flag"
	"log/slog"
	"os"
	"time"

	"github.com/sharedos/sharedos/examples/calendar"
	"github.com/sharedos/sharedos/internal/providerproc"
	"github.com/sharedos/sharedos/provider"
)

func main() {
	f := providerproc.Register(flag.CommandLine, "calendar", "provider id")
	ttl := flag.Duration("ttl", 5*time.Minute, "how long advertised revisions stay executable")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	os.Exit(providerproc.Run(f, calendar.Provider(nil), provider.Options{TTL: *ttl, Scope: "global"}, log))
}
