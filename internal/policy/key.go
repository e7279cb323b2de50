package policy

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// Kind is what a key holds.
type Kind string

// The kinds of policy, each one key per item.
const (
	// Grants: one principal's grants (config.Principal), key
	// grants.<tenant>.<principal>.
	Grants Kind = "grants"
	// Credentials: one credential profile's binding
	// (config.CredentialProfile), key credentials.<tenant>.<profile>.
	Credentials Kind = "credentials"
	// Providers: one provider (config.Provider), key providers.<id>.
	Providers Kind = "providers"
	// Identities: one bus identity (config.Identity), key
	// identities.<name>.
	Identities Kind = "identities"
	// Approvals: one approval rule (config.ApprovalRule), key
	// approvals.<tenant>.<name>.
	Approvals Kind = "approvals"
)

// Kinds lists the kinds in the order a document lists its sections.
func Kinds() []Kind { return []Kind{Grants, Credentials, Providers, Identities, Approvals} }

// tenanted reports whether keys of kind k name a tenant.
func (k Kind) tenanted() bool { return k == Grants || k == Credentials || k == Approvals }

// ErrInvalidKey is wrapped by ParseKey's errors.
var ErrInvalidKey = errors.New("policy: invalid key")

// Key names one item of policy. Tenant is set for Grants, Credentials
// and Approvals.
type Key struct {
	Kind   Kind
	Tenant string
	Name   string
}

// MaxKeyBytes bounds a key as written.
const MaxKeyBytes = 512

// String is the key as stored: its kind, then (for grants, credentials
// and approvals) the tenant, then the name, each one token. A token made of
// [A-Za-z0-9_-] is written as it is; any other is "=" and its unpadded
// base64url form, so every name has one key and every key one name.
func (k Key) String() string {
	if k.Kind.tenanted() {
		return string(k.Kind) + "." + token(k.Tenant) + "." + token(k.Name)
	}
	return string(k.Kind) + "." + token(k.Name)
}

// ParseKey reads a key as String writes it.
func ParseKey(s string) (Key, error) {
	if len(s) > MaxKeyBytes {
		return Key{}, fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidKey, len(s), MaxKeyBytes)
	}
	parts := strings.Split(s, ".")
	k := Key{Kind: Kind(parts[0])}
	want := 2
	if k.Kind.tenanted() {
		want = 3
	}
	switch k.Kind {
	case Grants, Credentials, Providers, Identities, Approvals:
	default:
		return Key{}, fmt.Errorf("%w: %q: the first token must be grants, credentials, providers, identities or approvals", ErrInvalidKey, s)
	}
	if len(parts) != want {
		return Key{}, fmt.Errorf("%w: %q: a %s key has %d tokens", ErrInvalidKey, s, k.Kind, want)
	}
	var err error
	if want == 3 {
		if k.Tenant, err = untoken(parts[1]); err != nil {
			return Key{}, fmt.Errorf("%w: %q: %v", ErrInvalidKey, s, err)
		}
	}
	if k.Name, err = untoken(parts[want-1]); err != nil {
		return Key{}, fmt.Errorf("%w: %q: %v", ErrInvalidKey, s, err)
	}
	if k.String() != s {
		return Key{}, fmt.Errorf("%w: %q is not in canonical form (%q)", ErrInvalidKey, s, k.String())
	}
	return k, nil
}

func plain(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func token(s string) string {
	if plain(s) {
		return s
	}
	return "=" + base64.RawURLEncoding.EncodeToString([]byte(s))
}

func untoken(t string) (string, error) {
	if enc, ok := strings.CutPrefix(t, "="); ok {
		b, err := base64.RawURLEncoding.DecodeString(enc)
		if err != nil || len(b) == 0 {
			return "", fmt.Errorf("token %q is not = and base64url", t)
		}
		return string(b), nil
	}
	if !plain(t) {
		return "", fmt.Errorf("token %q is empty or not [A-Za-z0-9_-]", t)
	}
	return t, nil
}
