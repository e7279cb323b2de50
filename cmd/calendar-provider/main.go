// Command calendar-provider serves the example calendar provider over NATS
// as its own process:
//
//	go run ./cmd/calendar-provider --nats nats://127.0.0.1:4222
//
// A node whose cluster.yaml lists `{id: calendar, kind: nats}` reaches it.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/examples/calendar"
	"github.com/sharedos/sharedos/provider"
)

func main() {
	url := flag.String("nats", nats.DefaultURL, "NATS URL")
	prefix := flag.String("prefix", "sharedos", "subject prefix")
	id := flag.String("id", "calendar", "provider id")
	ttl := flag.Duration("ttl", 5*time.Minute, "how long advertised revisions stay executable")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	nc, err := nats.Connect(*url, nats.Name("sharedos-provider-"+*id), nats.MaxReconnects(-1))
	if err != nil {
		log.Error("connect", "err", err)
		os.Exit(1)
	}
	defer nc.Close()
	h, err := provider.Serve(nc, *id, calendar.Provider(nil), &provider.Options{Prefix: *prefix, TTL: *ttl, Scope: "global"})
	if err != nil {
		log.Error("serve", "err", err)
		os.Exit(1)
	}
	log.Info("provider serving", "id", *id, "nats", *url)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Stop(sctx); err != nil {
		log.Error("stop", "err", err)
		os.Exit(1)
	}
}
