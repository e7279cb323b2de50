package identity

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/sharedos/sharedos/internal/fsutil"
)

// SeedFile is where identity name's nkey seed lives under dir.
func SeedFile(dir, name string) string { return filepath.Join(dir, name+".nk") }

// DefaultDir is the credentials directory of a node's data directory.
func DefaultDir(dataDir string) string { return filepath.Join(dataDir, "creds") }

// LoadOrCreateSeed reads the user nkey seed in path, creating a new one
// (mode 0600, in a directory of mode 0700) if the file does not exist. It
// refuses a seed file that group or others may read.
func LoadOrCreateSeed(path string) (nkeys.KeyPair, error) {
	kp, err := LoadSeed(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return kp, err
	}
	kp, err = nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("identity: creating a user nkey: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	if err := fsutil.CreateOnce(path, append(seed, '\n')); errors.Is(err, fs.ErrExist) {
		return LoadSeed(path) // another process made it first
	} else if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	return kp, nil
}

// LoadSeed reads a user nkey seed file (the bare seed, or a decorated
// .creds/.nk file).
func LoadSeed(path string) (nkeys.KeyPair, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("identity: seed file %s has mode %s: group and others must not read it (chmod 600)", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	kp, err := nkeys.ParseDecoratedUserNKey(bytes.TrimSpace(b))
	if err != nil {
		return nil, fmt.Errorf("identity: %s holds no user nkey seed: %w", path, err)
	}
	return kp, nil
}

// PublicKey is kp's public key ("U…").
func PublicKey(kp nkeys.KeyPair) (string, error) {
	pub, err := kp.PublicKey()
	if err != nil {
		return "", fmt.Errorf("identity: %w", err)
	}
	return pub, nil
}

// InboxPrefix is the inbox prefix of identity name. An audit reader may
// subscribe only under it (its replies and push deliveries arrive there),
// so a reader's client must use it; a runtime may also use the default
// _INBOX (its account is its own); a provider subscribes to no inbox.
// ConnectOptions sets it for every identity.
func InboxPrefix(name string) string { return "_INBOX_" + name }

// NameOfSeedFile is the identity name a seed file is for: its base name
// without the ".nk" extension.
func NameOfSeedFile(path string) string {
	return strings.TrimSuffix(filepath.Base(path), ".nk")
}

// ConnectOptions are the nats.Options to connect as the identity whose
// seed is in path: nkey authentication and the identity's private inbox
// prefix.
func ConnectOptions(path string) ([]nats.Option, error) {
	kp, err := LoadSeed(path)
	if err != nil {
		return nil, err
	}
	return KeyOptions(NameOfSeedFile(path), kp)
}

// KeyOptions are the nats.Options to connect as identity name with kp.
func KeyOptions(name string, kp nkeys.KeyPair) ([]nats.Option, error) {
	pub, err := PublicKey(kp)
	if err != nil {
		return nil, err
	}
	return []nats.Option{
		nats.Nkey(pub, func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) }),
		nats.CustomInboxPrefix(InboxPrefix(name)),
	}, nil
}

// CredentialOptions are the nats.Options to authenticate with file: a
// decentralized-auth .creds file (JWT and seed) for an operator-managed
// cluster, else a user nkey seed file (ConnectOptions).
func CredentialOptions(file string) ([]nats.Option, error) {
	if strings.HasSuffix(file, ".creds") {
		if _, err := os.Stat(file); err != nil {
			return nil, fmt.Errorf("identity: %w", err)
		}
		return []nats.Option{nats.UserCredentials(file)}, nil
	}
	return ConnectOptions(file)
}

// Credentials are the options to connect with: those of file when it is
// given, else of the seed generated (by a local node) if it is there,
// else none — a bus without authentication.
func Credentials(file, generated string) ([]nats.Option, error) {
	if file == "" {
		if _, err := os.Stat(generated); err != nil {
			return nil, nil
		}
		file = generated
	}
	return CredentialOptions(file)
}

// RouteSecretFile is where the cluster's route secret lives under dir.
func RouteSecretFile(dir string) string { return filepath.Join(dir, "route.secret") }

// RouteUser is the user name routes authenticate as.
const RouteUser = "sharedos-route"

// LoadOrCreateRouteSecret reads the secret the cluster's servers
// authenticate their routes with (RouteSecretFile), creating it — 32
// random bytes, hex, mode 0600 — if it does not exist. Every node of a
// cluster shares the credentials directory, so every node reads the same
// secret: a server that does not know it cannot join the cluster, on
// loopback or across machines. It refuses a file group or others may
// read, and one too short to be a secret.
func LoadOrCreateRouteSecret(dir string) (string, error) {
	path := RouteSecretFile(dir)
	secret, err := loadRouteSecret(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return secret, err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("identity: route secret: %w", err)
	}
	if err := fsutil.CreateOnce(path, []byte(hex.EncodeToString(b[:])+"\n")); errors.Is(err, fs.ErrExist) {
		return loadRouteSecret(path) // another node made it first
	} else if err != nil {
		return "", fmt.Errorf("identity: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// minRouteSecret is the shortest route secret taken (16 bytes, hex).
const minRouteSecret = 32

func loadRouteSecret(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("identity: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("identity: route secret %s has mode %s: group and others must not read it (chmod 600)", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("identity: %w", err)
	}
	secret := strings.TrimSpace(string(b))
	if len(secret) < minRouteSecret || strings.ContainsAny(secret, " \t\r\n@:/") {
		return "", fmt.Errorf("identity: route secret %s must be one word of at least %d characters without '@', ':' or '/'", path, minRouteSecret)
	}
	return secret, nil
}
