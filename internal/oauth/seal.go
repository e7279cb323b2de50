package oauth

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sharedos/sharedos/internal/fsutil"
)

// KeyFileName is the sealing key's file in a node's credentials directory.
const KeyFileName = "oauth-token.key"

// Sealer encrypts stored grants with AES-256-GCM. Safe for concurrent use.
type Sealer struct{ aead cipher.AEAD }

// NewSealer returns a sealer for a 32-byte key.
func NewSealer(key []byte) (*Sealer, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("oauth: a sealing key is 32 bytes, not %d", len(key))
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(b)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

// LoadOrCreateKey returns the sealer of the key in dir, creating the key
// file (32 random bytes, hex, mode 0600) when there is none. A key file
// group or others may read is refused.
func LoadOrCreateKey(dir string) (*Sealer, error) {
	path := filepath.Join(dir, KeyFileName)
	s, err := loadKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return s, err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("oauth: sealing key: %w", err)
	}
	if err := fsutil.CreateOnce(path, []byte(hex.EncodeToString(b[:])+"\n")); errors.Is(err, fs.ErrExist) {
		return loadKey(path) // another node made it first
	} else if err != nil {
		return nil, fmt.Errorf("oauth: %w", err)
	}
	return NewSealer(b[:])
}

func loadKey(path string) (*Sealer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("oauth: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("oauth: sealing key %s has mode %s: group and others must not read it (chmod 600)", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("oauth: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != 32 {
		return nil, fmt.Errorf("oauth: sealing key %s must be 64 hex digits", path)
	}
	return NewSealer(key)
}

// Seal encrypts plain, bound to aad (the record's store key): nonce then
// ciphertext.
func (s *Sealer) Seal(plain, aad []byte) []byte {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		panic("oauth: no randomness: " + err.Error()) // crypto/rand does not fail on supported platforms
	}
	return s.aead.Seal(nonce, nonce, plain, aad)
}

// errUnsealed: a record that does not open under this key and store key
// (another cluster's key, a record moved from another key, tampering).
var errUnsealed = errors.New("oauth: a stored record does not open with this node's key (another key, or moved or altered)")

// Open decrypts what Seal returned for the same aad.
func (s *Sealer) Open(sealed, aad []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n+s.aead.Overhead() {
		return nil, errUnsealed
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], aad)
	if err != nil {
		return nil, errUnsealed
	}
	return plain, nil
}
