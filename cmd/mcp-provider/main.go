// Command mcp-provider serves one MCP server's tools to SharedOS nodes
// over NATS, as its own process, so the server's failures stay out of the
// node:
//
//	go run ./cmd/mcp-provider --id scratchpad -- go run ./cmd/mcp-example-server    # stdio
//	go run ./cmd/mcp-provider --id scratchpad --url http://127.0.0.1:8400/mcp        # streamable HTTP
//	go run ./cmd/mcp-provider --id github --config github.yaml                       # credentials, limits, ttl
//
// --config is a YAML file with the fields of providers[].mcp in
// cluster.yaml (docs/discovery.md). A node whose cluster.yaml lists
// `{id: scratchpad, kind: nats}` reaches it.
//
// It runs only calls a trusted node signed (docs/security.md): the keys
// come from --trust, else $SHAREDOS_NODE_KEYS, else the node key in
// --data-dir, as for cmd/calendar-provider; with none it refuses to start
// unless --insecure-unsigned.
package main

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/internal/audit"
	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/provider"
)

func main() {
	url := flag.String("nats", nats.DefaultURL, "NATS URL")
	prefix := flag.String("prefix", "sharedos", "subject prefix")
	id := flag.String("id", "", "provider id: the MCP server's configured id (names its tools' namespace)")
	config := flag.String("config", "", "YAML file with the server's settings (the fields of providers[].mcp)")
	mcpURL := flag.String("url", "", "the MCP server's streamable HTTP URL (instead of --config or a command)")
	trust := flag.String("trust", "", "file of trusted node public keys (hex lines, PEM, or the JSON of `node audit keys --local`); default $SHAREDOS_NODE_KEYS, else the node key in --data-dir")
	dataDir := flag.String("data-dir", "./data", "the local node's data directory, whose key is trusted when --trust and $SHAREDOS_NODE_KEYS are unset")
	creds := flag.String("creds", "", "NATS credentials file (a user nkey seed or a .creds file); default $SHAREDOS_CREDS, else the seed the local node generated for provider-<id> in --data-dir")
	insecure := flag.Bool("insecure-unsigned", false, "run calls without verifying the node's signature (anyone on the bus can run any tool as anyone)")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	cfg, err := serverConfig(*config, *mcpURL, flag.Args())
	if err == nil {
		err = cfg.Validate(*id)
	}
	if err != nil {
		log.Error("configuration", "err", err)
		os.Exit(2)
	}
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
	p, err := mcpprovider.New(*id, cfg, &mcpprovider.Options{Logger: log})
	if err != nil {
		log.Error("mcp server", "err", err)
		os.Exit(2)
	}
	defer p.Close()
	auth, err := credentials(*creds, os.Getenv("SHAREDOS_CREDS"), identity.SeedFile(identity.DefaultDir(*dataDir), "provider-"+*id))
	if err != nil {
		log.Error("credentials", "err", err)
		os.Exit(2)
	}
	nc, err := nats.Connect(*url, append([]nats.Option{nats.Name("sharedos-mcp-provider-" + *id), nats.MaxReconnects(-1)}, auth...)...)
	if err != nil {
		log.Error("connect", "err", err)
		os.Exit(1)
	}
	defer nc.Close()
	h, err := provider.Serve(nc, *id, p.SDK(), &provider.Options{Prefix: *prefix, Logger: log,
		TrustedKeys: keys, InsecureUnsigned: *insecure && len(keys) == 0})
	if err != nil {
		log.Error("serve", "err", err)
		os.Exit(1)
	}
	log.Info("mcp provider serving", "id", *id, "transport", cfg.Transport, "nats", *url)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Stop(sctx); err != nil {
		log.Error("stop", "err", err)
	}
}

// serverConfig reads the server's settings: a file, a URL, or a command.
func serverConfig(file, url string, command []string) (mcpprovider.Config, error) {
	var c mcpprovider.Config
	switch n := btoi(file != "") + btoi(url != "") + btoi(len(command) > 0); {
	case n != 1:
		return c, fmt.Errorf("give exactly one of --config FILE, --url URL, or a command after --")
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return c, err
		}
		if err := yaml.UnmarshalWithOptions(b, &c, yaml.Strict()); err != nil {
			return c, fmt.Errorf("%s: %w", file, err)
		}
	case url != "":
		c.Transport, c.URL = "http", url
	default:
		c.Transport, c.Command, c.Args = "stdio", command[0], command[1:]
	}
	return c, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
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
