package mcpfront

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// Execution tokens (docs/protocol.md, "Execution tokens").
//
// A token is "sos1." + base64url(claims JSON) + "." + base64url(Ed25519
// signature of everything before the second dot), signed with the node's
// key. It names one turn and the catalogue the turn held when it was
// minted; the MCP front admits it only while that turn is open and holds
// that catalogue. The claims are readable by whoever holds the token:
// they carry no secret (the turn's lease stays on the node).

// TokenVersion is the claims' version ("v").
const TokenVersion = 1

const tokenPrefix = "sos1."

// Token lifetimes.
const (
	DefaultTokenLifetime = 10 * time.Minute
	MaxTokenLifetime     = time.Hour
	// maxTokenBytes bounds a token a verifier reads.
	maxTokenBytes = 8 << 10
)

// Claims are what a token says.
type Claims struct {
	V           int               `json:"v"`
	ID          string            `json:"jti"`
	Turn        string            `json:"turn"`
	Node        string            `json:"node"`
	CatalogHash string            `json:"catalog_hash"`
	Tenant      string            `json:"tenant"`
	Principal   string            `json:"principal"`
	Credential  string            `json:"credential,omitempty"`
	Attributes  map[string]string `json:"attributes,omitempty"`
	// Audience is the URL of the MCP endpoint the token is for.
	Audience string `json:"aud"`
	// IssuedAt and Expires are Unix milliseconds.
	IssuedAt int64 `json:"iat"`
	Expires  int64 `json:"exp"`
}

// ExpiresAt is the claims' expiry.
func (c *Claims) ExpiresAt() time.Time { return time.UnixMilli(c.Expires) }

// sameAuthority reports whether the claims name the same tenant,
// principal, credential profile and attributes as c2.
func (c *Claims) sameAuthority(tenant, principal, credential string, attrs map[string]string) bool {
	return c.Tenant == tenant && c.Principal == principal && c.Credential == credential && maps.Equal(c.Attributes, attrs)
}

// Token verification failures. Each is an auth.ErrInvalidToken (errors.Is),
// which auth.RequireBearerToken answers 401 with its message.
var (
	ErrTokenMalformed = fmt.Errorf("%w: malformed execution token", auth.ErrInvalidToken)
	ErrTokenSignature = fmt.Errorf("%w: execution token signature does not verify", auth.ErrInvalidToken)
	ErrTokenExpired   = fmt.Errorf("%w: execution token expired", auth.ErrInvalidToken)
	ErrTokenAudience  = fmt.Errorf("%w: execution token is for another endpoint", auth.ErrInvalidToken)
)

// Sign signs c with key: what Mint does after it built the claims. For
// tools and tests that need a token Mint would not give (an expired one,
// one for another catalogue).
func Sign(key ed25519.PrivateKey, c *Claims) (string, error) {
	body, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	signed := tokenPrefix + base64.RawURLEncoding.EncodeToString(body)
	return signed + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(key, []byte(signed))), nil
}

// parseToken checks tok's signature against keys and decodes its claims;
// it checks neither expiry nor audience (see Front.verify).
func parseToken(tok string, keys []ed25519.PublicKey) (*Claims, error) {
	if len(tok) > maxTokenBytes || !strings.HasPrefix(tok, tokenPrefix) {
		return nil, ErrTokenMalformed
	}
	dot := strings.LastIndexByte(tok, '.')
	if dot <= len(tokenPrefix) {
		return nil, ErrTokenMalformed
	}
	sig, err := base64.RawURLEncoding.DecodeString(tok[dot+1:])
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, ErrTokenMalformed
	}
	ok := false
	for _, k := range keys {
		if ed25519.Verify(k, []byte(tok[:dot]), sig) {
			ok = true
			break
		}
	}
	if !ok {
		return nil, ErrTokenSignature
	}
	body, err := base64.RawURLEncoding.DecodeString(tok[len(tokenPrefix):dot])
	if err != nil {
		return nil, ErrTokenMalformed
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var c Claims
	if err := dec.Decode(&c); err != nil || c.V != TokenVersion || c.Turn == "" || c.ID == "" {
		return nil, fmt.Errorf("%w: bad claims", ErrTokenMalformed)
	}
	return &c, nil
}

// ReadClaims decodes a token's claims without verifying it: for a client
// that needs to know where the token is for (node mcp). Never use the
// result to admit anything.
func ReadClaims(tok string) (*Claims, error) {
	dot := strings.LastIndexByte(tok, '.')
	if !strings.HasPrefix(tok, tokenPrefix) || dot <= len(tokenPrefix) {
		return nil, ErrTokenMalformed
	}
	body, err := base64.RawURLEncoding.DecodeString(tok[len(tokenPrefix):dot])
	if err != nil {
		return nil, ErrTokenMalformed
	}
	var c Claims
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, ErrTokenMalformed
	}
	return &c, nil
}

// checkClaims checks expiry (at now) and audience.
func checkClaims(c *Claims, audience string, now time.Time) error {
	if !now.Before(c.ExpiresAt()) {
		return fmt.Errorf("%w at %s", ErrTokenExpired, c.ExpiresAt().UTC().Format(time.RFC3339))
	}
	if c.Audience != audience {
		return fmt.Errorf("%w: it names %q, this endpoint is %q", ErrTokenAudience, c.Audience, audience)
	}
	return nil
}

var b32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// tokenID is 130 random bits in lower-case base32.
func tokenID() string {
	b := make([]byte, 17)
	_, _ = rand.Read(b)
	return b32.EncodeToString(b)[:26]
}

var errNoKey = errors.New("mcpfront: Options.Key is required (an Ed25519 private key)")
