// Command calendar-provider serves the example calendar provider over NATS
// as its own process:
//
//	go run ./cmd/calendar-provider --nats nats://127.0.0.1:4222
//
// A node whose cluster.yaml lists `{id: calendar, kind: nats}` reaches it.
//
// It runs only calls a trusted node signed (docs/security.md). The trusted
// node keys come from --trust (a file: hex lines, PEM, or the JSON of
// `node audit keys --local`), else $SHAREDOS_NODE_KEYS (the same), else
// the public half of the node key in --data-dir (default ./data, the
// node's own default: <data_dir>/keys/audit-ed25519.key), so on one
// machine it works with no set-up. With none of them it refuses to start,
// unless --insecure-unsigned.
package main

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/examples/calendar"
	"github.com/sharedos/sharedos/internal/audit"
	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/provider"
)

func main() {
	url := flag.String("nats", nats.DefaultURL, "NATS URL")
	prefix := flag.String("prefix", "sharedos", "subject prefix")
	id := flag.String("id", "calendar", "provider id")
	ttl := flag.Duration("ttl", 5*time.Minute, "how long advertised revisions stay executable")
	trust := flag.String("trust", "", "file of trusted node public keys (hex lines, PEM, or the JSON of `node audit keys --local`); default $SHAREDOS_NODE_KEYS, else the node key in --data-dir")
	dataDir := flag.String("data-dir", "./data", "the local node's data directory, whose key is trusted when --trust and $SHAREDOS_NODE_KEYS are unset")
	creds := flag.String("creds", "", "credentials file (a user nkey seed or a .creds file); default $SHAREDOS_CREDS, else the seed the local node generated for provider-<id> in --data-dir")
	insecure := flag.Bool("insecure-unsigned", false, "run calls without verifying the node's signature (anyone on the bus can run any tool as anyone)")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	keys, from, err := trustedKeys(*trust, os.Getenv("SHAREDOS_NODE_KEYS"), *dataDir)
	switch {
	case err != nil && !*insecure:
		log.Error("no trusted node keys; pass --trust FILE (node audit keys --local prints them), set SHAREDOS_NODE_KEYS, point --data-dir at the node's data directory, or --insecure-unsigned", "err", err)
		os.Exit(2)
	case err != nil:
		log.Warn("serving WITHOUT verifying execution grants (--insecure-unsigned): any bus client can run any tool as anyone", "err", err)
	default:
		log.Info("trusting node keys", "from", from, "keys", len(keys))
	}
	auth, err := credentials(*creds, os.Getenv("SHAREDOS_CREDS"), identity.SeedFile(identity.DefaultDir(*dataDir), "provider-"+*id))
	if err != nil {
		log.Error("credentials", "err", err)
		os.Exit(2)
	}
	nc, err := nats.Connect(*url, append([]nats.Option{nats.Name("sharedos-provider-" + *id), nats.MaxReconnects(-1)}, auth...)...)
	if err != nil {
		log.Error("connect", "err", err)
		os.Exit(1)
	}
	defer nc.Close()
	h, err := provider.Serve(nc, *id, calendar.Provider(nil), &provider.Options{Prefix: *prefix, TTL: *ttl, Scope: "global",
		TrustedKeys: keys, InsecureUnsigned: *insecure && len(keys) == 0})
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

// credentials are the options to connect as the provider's identity: the
// flag's file, else the environment's, else the seed the local node
// generated (if it is there; else none, for a bus without
// authentication).
func credentials(flagFile, envFile, generated string) ([]nats.Option, error) {
	file := cmp.Or(flagFile, envFile)
	if file == "" {
		if _, err := os.Stat(generated); err != nil {
			return nil, nil
		}
		file = generated
	}
	return identity.CredentialOptions(file)
}

// trustedKeys reads the trusted node keys: the --trust file, else the
// environment's file, else the public half of the node key in dataDir.
func trustedKeys(file, envFile, dataDir string) ([]ed25519.PublicKey, string, error) {
	for _, f := range []string{file, envFile} {
		if f == "" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, f, err
		}
		keys, err := audit.ParsePublicKeys(data)
		return keys, f, err
	}
	path := audit.DefaultKeyFile(dataDir)
	key, err := audit.ReadPrivateKey(path)
	if err != nil {
		return nil, path, err
	}
	return []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}, path, nil
}
