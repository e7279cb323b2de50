package providers

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

// Execution grants (docs/protocol.md, "Execution grants"; docs/security.md).
//
// Every invoke the node sends carries a grant: the node's decision, signed
// with its Ed25519 key. A provider runs a call only under a grant that a
// node it trusts signed, for exactly this provider, tool, revision,
// arguments and resource, not yet expired and not seen before.

// GrantVersion is the version of the grant object ("v").
const GrantVersion = 1

// Bounds on a grant's times, shared by signer and verifier.
const (
	// MaxGrantLifetime bounds exp − iat. A node signs at most this far
	// ahead; a verifier refuses a longer grant (so its replay memory only
	// ever holds a grant for this long plus the skew).
	MaxGrantLifetime = 5 * time.Minute
	// DefaultGrantLifetime is a grant's lifetime when the call has no
	// deadline (the SDK host gives such a call 30 s).
	DefaultGrantLifetime = 30 * time.Second
	// GrantSkew is the clock difference between node and provider a
	// verifier tolerates on iat and exp.
	GrantSkew = 5 * time.Second
	// MaxSeenGrants bounds a verifier's replay memory; a grant arriving
	// while it is full of unexpired grants is refused overloaded.
	MaxSeenGrants = 1 << 20
)

// Grant is the object a node signs for one call. Times are Unix
// milliseconds. Its signed form is the RFC 8785 canonical JSON of this
// object (keys sorted, no insignificant whitespace).
type Grant struct {
	V          int               `json:"v"`
	Call       string            `json:"call"`
	Turn       string            `json:"turn"`
	Node       string            `json:"node"`
	Tenant     string            `json:"tenant"`
	Principal  string            `json:"principal"`
	Credential string            `json:"credential"`
	Attributes map[string]string `json:"attributes,omitempty"`
	Provider   string            `json:"provider"`
	Tool       string            `json:"tool"`
	// Revision is the node's revision of the pinned contract; Token is the
	// provider's own revision token for it, exactly the request's
	// "revision" field (the node's revision when the provider gave none).
	Revision    string `json:"revision"`
	Token       string `json:"token"`
	CatalogHash string `json:"catalog_hash"`
	// ArgsSHA256 is the lowercase hex SHA-256 of the request's "args"
	// bytes, exactly as sent (empty args hash the empty string).
	ArgsSHA256 string `json:"args_sha256"`
	Resource   string `json:"resource"`
	IssuedAt   int64  `json:"iat"`
	Expires    int64  `json:"exp"`
}

// Access is the access context the grant was decided for, at now.
func (g *Grant) Access(now time.Time) authority.AccessContext {
	return authority.AccessContext{Tenant: g.Tenant, Principal: g.Principal, CredentialProfile: g.Credential,
		TurnID: g.Turn, Now: now, Attributes: g.Attributes}
}

// GrantKeyID names a public key in grant_key: the lowercase hex of the
// first 16 bytes of its SHA-256 (the same id audit checkpoints use).
func GrantKeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:16])
}

// ArgsHash is the args_sha256 of argument bytes.
func ArgsHash(args []byte) string {
	sum := sha256.Sum256(args)
	return hex.EncodeToString(sum[:])
}

// GrantSigner signs grants with a node's key.
type GrantSigner struct {
	key   ed25519.PrivateKey
	keyID string
}

// NewGrantSigner returns a signer for key.
func NewGrantSigner(key ed25519.PrivateKey) (*GrantSigner, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("providers: grant key of %d bytes, want an Ed25519 private key", len(key))
	}
	return &GrantSigner{key: key, keyID: GrantKeyID(key.Public().(ed25519.PublicKey))}, nil
}

// Sign puts g on req: its canonical bytes, their signature and the key id.
func (s *GrantSigner) Sign(req *messages.ProviderInvokeRequest, g *Grant) error {
	canon := g.Canonical()
	req.Grant, req.GrantSig, req.GrantKey = canon, ed25519.Sign(s.key, canon), s.keyID
	return nil
}

// Canonical is g's RFC 8785 form: the bytes jcs.Transform(json.Marshal(g))
// gives, written directly (members in code-unit order, strings with
// JSON.stringify's escapes, integers in decimal).
func (g *Grant) Canonical() []byte {
	b := make([]byte, 0, 512+len(g.Call)+len(g.Turn)+len(g.Resource))
	str := func(key, v string) {
		b = append(b, ',', '"')
		b = append(b, key...)
		b = append(b, '"', ':')
		b = appendJCSString(b, v)
	}
	num := func(key string, v int64) {
		b = append(b, ',', '"')
		b = append(b, key...)
		b = append(b, '"', ':')
		b = strconv.AppendInt(b, v, 10)
	}
	b = append(b, `{"args_sha256":`...)
	b = appendJCSString(b, g.ArgsSHA256)
	if len(g.Attributes) > 0 {
		keys := make([]string, 0, len(g.Attributes))
		for k := range g.Attributes {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, compareUTF16)
		b = append(b, `,"attributes":{`...)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJCSString(b, k)
			b = append(b, ':')
			b = appendJCSString(b, g.Attributes[k])
		}
		b = append(b, '}')
	}
	str("call", g.Call)
	str("catalog_hash", g.CatalogHash)
	str("credential", g.Credential)
	num("exp", g.Expires)
	num("iat", g.IssuedAt)
	str("node", g.Node)
	str("principal", g.Principal)
	str("provider", g.Provider)
	str("resource", g.Resource)
	str("revision", g.Revision)
	str("tenant", g.Tenant)
	str("token", g.Token)
	str("tool", g.Tool)
	str("turn", g.Turn)
	num("v", int64(g.V))
	return append(b, '}')
}

// appendJCSString writes s as RFC 8785 does: '"' and '\\' escaped,
// control characters as \b \t \n \f \r or \u00xx, everything else
// literal UTF-8 (invalid bytes become U+FFFD, as encoding/json makes them).
func appendJCSString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\b':
				b = append(b, '\\', 'b')
			case c == '\t':
				b = append(b, '\\', 't')
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\f':
				b = append(b, '\\', 'f')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = utf8.AppendRune(b, utf8.RuneError)
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// compareUTF16 orders strings by their UTF-16 code units (RFC 8785's
// member order), which differs from byte order only around surrogates.
func compareUTF16(a, b string) int {
	ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	return slices.Compare(ua, ub)
}

// GrantVerifier checks the grants on invoke requests for one provider
// against trusted node keys, and remembers the grants it accepted until
// they expire, refusing them a second time. Safe for concurrent use.
type GrantVerifier struct {
	provider string
	keys     map[string]ed25519.PublicKey
	maxSeen  int

	mu        sync.Mutex
	seen      map[seenGrant]time.Time // until when to remember
	nextSweep time.Time
}

type seenGrant struct{ node, turn, call string }

// NewGrantVerifier returns the verifier of provider's grants signed by
// any of keys.
func NewGrantVerifier(provider string, keys []ed25519.PublicKey) (*GrantVerifier, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("providers: provider %s: no trusted node keys", provider)
	}
	v := &GrantVerifier{provider: provider, keys: map[string]ed25519.PublicKey{}, maxSeen: MaxSeenGrants, seen: map[seenGrant]time.Time{}}
	for _, k := range keys {
		if len(k) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("providers: provider %s: trusted key of %d bytes, want an Ed25519 public key", provider, len(k))
		}
		v.keys[GrantKeyID(k)] = k
	}
	return v, nil
}

// SetMaxSeen lowers the replay memory's bound (tests).
func (v *GrantVerifier) SetMaxSeen(n int) { v.maxSeen = n }

func (v *GrantVerifier) refuse(format string, args ...any) error {
	return reason.New(reason.InvalidRequest, "provider %s: execution grant refused: %s", v.provider, fmt.Sprintf(format, args...))
}

// Verify checks req's grant at now, in the order docs/protocol.md gives,
// and returns it. A refusal is invalid_request ("execution grant
// refused: …"), or overloaded when the replay memory is full.
func (v *GrantVerifier) Verify(req *messages.ProviderInvokeRequest, now time.Time) (*Grant, error) {
	// 1. Signed by a trusted key, over exactly the grant bytes.
	if len(req.Grant) == 0 || len(req.GrantSig) == 0 || req.GrantKey == "" {
		return nil, v.refuse("the call carries no signed grant")
	}
	pub, ok := v.keys[req.GrantKey]
	if !ok {
		return nil, v.refuse("signed by key %.32q, not a trusted node key", req.GrantKey)
	}
	if len(req.GrantSig) != ed25519.SignatureSize || !ed25519.Verify(pub, req.Grant, req.GrantSig) {
		return nil, v.refuse("bad signature")
	}
	// 2. Parse (a signed grant is the node's; still, strictly).
	var g Grant
	dec := json.NewDecoder(bytes.NewReader(req.Grant))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&g); err != nil || dec.More() {
		return nil, v.refuse("malformed grant")
	}
	if g.V != GrantVersion {
		return nil, v.refuse("grant version %d, want %d", g.V, GrantVersion)
	}
	// 3. For this request.
	switch {
	case g.Provider != v.provider:
		return nil, v.refuse("grant for provider %.64q", g.Provider)
	case g.Tool != req.Tool:
		return nil, v.refuse("grant for tool %.64q, call of %.64q", g.Tool, req.Tool)
	case g.Token != req.Revision:
		return nil, v.refuse("grant for another revision")
	case g.Call != req.CallID:
		return nil, v.refuse("grant for another call")
	case g.Resource != req.Resource:
		return nil, v.refuse("grant for another resource")
	case g.ArgsSHA256 != ArgsHash(req.Args):
		return nil, v.refuse("the arguments are not those the node decided on")
	case g.Call == "" || g.Turn == "" || g.Node == "" || g.Tenant == "" || g.Principal == "":
		return nil, v.refuse("grant without call, turn, node, tenant or principal")
	case g.Tenant != req.Access.Tenant || g.Principal != req.Access.Principal || g.Credential != req.Access.Credential ||
		(req.Access.TurnID != "" && g.Turn != req.Access.TurnID):
		return nil, v.refuse("grant for another access context")
	}
	// 4. In time.
	iat, exp := time.UnixMilli(g.IssuedAt), time.UnixMilli(g.Expires)
	switch {
	case exp.Before(iat) || exp.Sub(iat) > MaxGrantLifetime:
		return nil, v.refuse("grant lifetime %v outside (0, %v]", exp.Sub(iat), MaxGrantLifetime)
	case iat.After(now.Add(GrantSkew)):
		return nil, v.refuse("grant issued in the future")
	case now.After(exp.Add(GrantSkew)):
		return nil, v.refuse("grant expired")
	}
	// 5. Not seen before.
	key := seenGrant{node: g.Node, turn: g.Turn, call: g.Call}
	v.mu.Lock()
	defer v.mu.Unlock()
	if until, ok := v.seen[key]; ok && !now.After(until) {
		return nil, v.refuse("grant already used (call %.64q of turn %.64q)", g.Call, g.Turn)
	}
	if len(v.seen) >= v.maxSeen || now.After(v.nextSweep) {
		for k, until := range v.seen {
			if now.After(until) {
				delete(v.seen, k)
			}
		}
		v.nextSweep = now.Add(MaxGrantLifetime)
		if len(v.seen) >= v.maxSeen {
			return nil, reason.New(reason.Overloaded, "provider %s: too many unexpired grants remembered", v.provider)
		}
	}
	v.seen[key] = exp.Add(GrantSkew)
	return &g, nil
}
