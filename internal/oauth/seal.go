package oauth

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sharedos/sharedos/internal/fsutil"
)

// KeyFileName is the current sealing key's file in a node's credentials
// directory. Retired keys, which open records but seal none, are the
// files beside it named KeyFileName+".*" (oauth-token.key.old, …).
const KeyFileName = "oauth-token.key"

// keyIDLen is the length of a key id: the first bytes of the SHA-256 of
// a domain tag and the key. It names a key without revealing it.
const keyIDLen = 8

// sealMagic starts every sealed record, followed by the sealing key's id,
// the nonce and the ciphertext. A record without it (sealed before keys
// had ids) is tried under every key held.
var sealMagic = []byte("SK1\x00")

// Sealer encrypts stored records with AES-256-GCM under its current key
// and opens records sealed by any key it holds (the current one and the
// retired ones). Each record names the id of the key that sealed it.
// Safe for concurrent use.
type Sealer struct {
	cur  *sealKey
	keys []*sealKey // cur first
}

type sealKey struct {
	id   [keyIDLen]byte
	aead cipher.AEAD
}

// KeyID is the id of a 32-byte key (16 hex digits): what a sealed record
// and a report name it by.
func KeyID(key []byte) string {
	id := keyID(key)
	return hex.EncodeToString(id[:])
}

func keyID(key []byte) [keyIDLen]byte {
	h := sha256.Sum256(append([]byte("sharedos oauth sealing key id\x00"), key...))
	return [keyIDLen]byte(h[:keyIDLen])
}

func newSealKey(key []byte) (*sealKey, error) {
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
	return &sealKey{id: keyID(key), aead: aead}, nil
}

// NewSealer returns a sealer that seals with current (32 bytes) and opens
// what current or any of retired sealed.
func NewSealer(current []byte, retired ...[]byte) (*Sealer, error) {
	c, err := newSealKey(current)
	if err != nil {
		return nil, err
	}
	s := &Sealer{cur: c, keys: []*sealKey{c}}
	for _, r := range retired {
		k, err := newSealKey(r)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(s.keys, func(h *sealKey) bool { return h.id == k.id }) {
			s.keys = append(s.keys, k)
		}
	}
	return s, nil
}

// KeyID is the id of the key s seals with.
func (s *Sealer) KeyID() string { return hex.EncodeToString(s.cur.id[:]) }

// KeyIDs are the ids of every key s opens with, the current one first.
func (s *Sealer) KeyIDs() []string {
	out := make([]string, len(s.keys))
	for i, k := range s.keys {
		out[i] = hex.EncodeToString(k.id[:])
	}
	return out
}

// LoadOrCreateKey returns the sealer of the keys in dir: the current key
// (KeyFileName, created once — 32 random bytes, hex, mode 0600 — when
// there is none) and the retired ones (KeyFileName+".*"). A key file
// group or others may read is refused.
func LoadOrCreateKey(dir string) (*Sealer, error) {
	path := filepath.Join(dir, KeyFileName)
	cur, err := loadKey(path)
	if errors.Is(err, fs.ErrNotExist) {
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("oauth: sealing key: %w", err)
		}
		err = fsutil.CreateOnce(path, []byte(hex.EncodeToString(b[:])+"\n"))
		if errors.Is(err, fs.ErrExist) {
			cur, err = loadKey(path) // another node made it first
		} else if err == nil {
			cur = b[:]
		}
	}
	if err != nil {
		return nil, fmt.Errorf("oauth: %w", err)
	}
	retired, err := filepath.Glob(filepath.Join(dir, KeyFileName+".*"))
	if err != nil {
		return nil, fmt.Errorf("oauth: %w", err)
	}
	slices.Sort(retired)
	var old [][]byte
	for _, p := range retired {
		if strings.HasSuffix(p, ".tmp") || strings.Contains(filepath.Base(p), ".tmp-") {
			continue // a key being written (fsutil's temporary files)
		}
		k, err := loadKey(p)
		if err != nil {
			return nil, fmt.Errorf("oauth: %w", err)
		}
		old = append(old, k)
	}
	return NewSealer(cur, old...)
}

func loadKey(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("sealing key %s has mode %s: group and others must not read it (chmod 600)", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != 32 {
		return nil, fmt.Errorf("sealing key %s must be 64 hex digits", path)
	}
	return key, nil
}

// Seal encrypts plain under the current key, bound to aad (the record's
// store key): the magic, the key id, the nonce, the ciphertext.
func (s *Sealer) Seal(plain, aad []byte) []byte {
	k := s.cur
	n := k.aead.NonceSize()
	head := len(sealMagic) + keyIDLen
	out := make([]byte, head+n, head+n+len(plain)+k.aead.Overhead())
	copy(out, sealMagic)
	copy(out[len(sealMagic):], k.id[:])
	if _, err := rand.Read(out[head:]); err != nil {
		panic("oauth: no randomness: " + err.Error()) // crypto/rand does not fail on supported platforms
	}
	return k.aead.Seal(out, out[head:], plain, aad)
}

// errUnsealed: a record that does not open under the key that sealed it
// and its store key (moved to another key, or altered).
var errUnsealed = errors.New("oauth: a stored record does not open (moved from another store key, or altered)")

// KeyNotHeldError is a record sealed by a key the node does not hold (it
// was retired and removed before the record was resealed, or another
// cluster's key). Its KeyID names that key.
type KeyNotHeldError struct{ KeyID string }

func (e *KeyNotHeldError) Error() string {
	if e.KeyID == "" {
		return "oauth: a stored record opens under none of this node's sealing keys"
	}
	return "oauth: a stored record is sealed by key " + e.KeyID + ", which this node does not hold"
}

// Open decrypts what Seal returned for the same aad, with the key the
// record names.
func (s *Sealer) Open(sealed, aad []byte) ([]byte, error) {
	plain, _, err := s.open(sealed, aad)
	return plain, err
}

// open is Open, also saying whether the record is sealed by the current
// key (and so needs no resealing).
func (s *Sealer) open(sealed, aad []byte) ([]byte, bool, error) {
	head := len(sealMagic) + keyIDLen
	if len(sealed) >= head && bytes.Equal(sealed[:len(sealMagic)], sealMagic) {
		id := [keyIDLen]byte(sealed[len(sealMagic):head])
		for _, k := range s.keys {
			if k.id == id {
				plain, err := k.open(sealed[head:], aad)
				return plain, k == s.cur, err
			}
		}
		if plain, err := s.openLegacy(sealed, aad); err == nil {
			return plain, false, nil // a legacy record that happens to start with the magic
		}
		return nil, false, &KeyNotHeldError{KeyID: hex.EncodeToString(id[:])}
	}
	plain, err := s.openLegacy(sealed, aad)
	return plain, false, err
}

// openLegacy opens a record without a key id (nonce then ciphertext)
// under whichever held key it opens with.
func (s *Sealer) openLegacy(sealed, aad []byte) ([]byte, error) {
	for _, k := range s.keys {
		if plain, err := k.open(sealed, aad); err == nil {
			return plain, nil
		}
	}
	return nil, &KeyNotHeldError{}
}

func (k *sealKey) open(sealed, aad []byte) ([]byte, error) {
	n := k.aead.NonceSize()
	if len(sealed) < n+k.aead.Overhead() {
		return nil, errUnsealed
	}
	plain, err := k.aead.Open(nil, sealed[:n], sealed[n:], aad)
	if err != nil {
		return nil, errUnsealed
	}
	return plain, nil
}
