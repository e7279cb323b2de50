// Package providerproc is the process shell every provider binary shares
// (cmd/calendar-provider, cmd/mcp-provider): its flags, the node keys it
// trusts, its bus identity, and serving until SIGINT/SIGTERM.
//
// The trusted node keys come from --trust (a file: hex lines, PEM, or the
// JSON of `node audit keys --local`), else $SHAREDOS_NODE_KEYS (the
// same), else the public half of the node key in --data-dir (the node's
// default <data_dir>/keys/audit-ed25519.key), so on one machine a
// provider works with no set-up; with none it refuses to start unless
// --insecure-unsigned. It connects as the bus identity provider-<id>:
// --creds, else $SHAREDOS_CREDS, else the seed the local node generated
// (docs/security.md).
package providerproc

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

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/internal/auditstore"
	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/provider"
)

// Flags are the flags every provider process takes.
type Flags struct {
	NATS, Prefix, ID, Trust, DataDir, Creds string
	Insecure                                bool
}

// Register defines the flags on fs; defaultID and idUsage describe --id.
func Register(fs *flag.FlagSet, defaultID, idUsage string) *Flags {
	f := &Flags{}
	fs.StringVar(&f.NATS, "nats", nats.DefaultURL, "NATS URL")
	fs.StringVar(&f.Prefix, "prefix", "sharedos", "subject prefix")
	fs.StringVar(&f.ID, "id", defaultID, idUsage)
	fs.StringVar(&f.Trust, "trust", "", "file of trusted node public keys (hex lines, PEM, or the JSON of `node audit keys --local`); default $SHAREDOS_NODE_KEYS, else the node key in --data-dir")
	fs.StringVar(&f.DataDir, "data-dir", "./data", "the local node's data directory: its key is trusted when --trust and $SHAREDOS_NODE_KEYS are unset, its generated seed for provider-<id> used when --creds and $SHAREDOS_CREDS are")
	fs.StringVar(&f.Creds, "creds", "", "NATS credentials file (a user nkey seed or a .creds file); default $SHAREDOS_CREDS, else the seed the local node generated for provider-<id> in --data-dir")
	fs.BoolVar(&f.Insecure, "insecure-unsigned", false, "run calls without verifying the node's signature (anyone on the bus can run any tool as anyone)")
	return f
}

// Run serves p as provider f.ID with opts (Prefix, TrustedKeys and
// InsecureUnsigned are set here) until SIGINT or SIGTERM, and returns the
// process's exit code: 0 stopped, 1 failed, 2 set-up refused.
func Run(f *Flags, p provider.Provider, opts provider.Options, log *slog.Logger) int {
	keys, from, err := TrustedKeys(f.Trust, os.Getenv("SHAREDOS_NODE_KEYS"), f.DataDir)
	switch {
	case err != nil && !f.Insecure:
		log.Error("no trusted node keys; pass --trust FILE (node audit keys --local prints them), set SHAREDOS_NODE_KEYS, point --data-dir at the node's data directory, or --insecure-unsigned", "err", err)
		return 2
	case err != nil:
		log.Warn("serving WITHOUT verifying execution grants (--insecure-unsigned): any bus client can run any tool as anyone", "err", err)
	default:
		log.Info("trusting node keys", "from", from, "keys", len(keys))
	}
	auth, err := identity.Credentials(cmp.Or(f.Creds, os.Getenv("SHAREDOS_CREDS")), identity.SeedFile(identity.DefaultDir(f.DataDir), "provider-"+f.ID))
	if err != nil {
		log.Error("credentials", "err", err)
		return 2
	}
	nc, err := nats.Connect(f.NATS, append([]nats.Option{nats.Name("sharedos-provider-" + f.ID), nats.MaxReconnects(-1)}, auth...)...)
	if err != nil {
		log.Error("connect", "err", err)
		return 1
	}
	defer nc.Close()
	opts.Prefix, opts.TrustedKeys, opts.InsecureUnsigned = f.Prefix, keys, f.Insecure && len(keys) == 0
	if opts.Logger == nil {
		opts.Logger = log
	}
	h, err := provider.Serve(nc, f.ID, p, &opts)
	if err != nil {
		log.Error("serve", "err", err)
		return 1
	}
	log.Info("provider serving", "id", f.ID, "nats", f.NATS)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Stop(sctx); err != nil {
		log.Error("stop", "err", err)
		return 1
	}
	return 0
}

// TrustedKeys reads the trusted node keys: file, else envFile, else the
// public half of the node key in dataDir; it says where they came from.
func TrustedKeys(file, envFile, dataDir string) ([]ed25519.PublicKey, string, error) {
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
	path := auditstore.DefaultKeyFile(dataDir)
	key, err := audit.ReadPrivateKey(path)
	if err != nil {
		return nil, path, err
	}
	return []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}, path, nil
}
