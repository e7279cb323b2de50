package oauth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Ref names one grant: whose credential for which server. Principal is
// empty for a shared (service) profile. None of it is secret.
type Ref struct {
	Server    string
	Tenant    string
	Profile   string
	Principal string
}

func (r Ref) String() string {
	s := r.Server + ":" + r.Tenant + "/" + r.Profile
	if r.Principal != "" {
		s += "#" + r.Principal
	}
	return s
}

// key is the grant's store key: each part base64url-encoded ("_" for an
// empty one, which no encoding yields), so any tenant, profile or
// principal name makes a valid, unambiguous key.
func (r Ref) key() string {
	return "grant." + seg(r.Server) + "." + seg(r.Tenant) + "." + seg(r.Profile) + "." + seg(r.Principal)
}

func seg(s string) string {
	if s == "" {
		return "_"
	}
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

// grant is one stored authorization, sealed in the bucket. It holds the
// tokens: never logged, put in an error or a status.
type grant struct {
	Access   string    `json:"access_token,omitempty"`
	Refresh  string    `json:"refresh_token,omitempty"`
	Expiry   time.Time `json:"expiry,omitzero"`
	Scopes   []string  `json:"scopes,omitempty"`
	Issuer   string    `json:"issuer,omitempty"`
	Resource string    `json:"resource,omitempty"`
	Flow     string    `json:"flow,omitempty"`
	Epoch    uint64    `json:"epoch"` // bumped by every authorization (a login, a first client-credentials grant)
	// Authz is random, drawn by each authorization and kept by its
	// refreshes: an authorization after the grant was forgotten (its
	// epoch counting from 1 again) is still another identity.
	Authz     string    `json:"authz,omitempty"`
	Obtained  time.Time `json:"obtained,omitzero"`
	Refreshes uint64    `json:"refreshes,omitempty"`
	// Lease: a node is refreshing (until Until); others wait for its record.
	Lease *lease `json:"lease,omitempty"`
	// Failed: the authorization server refused the grant (a revoked or
	// expired refresh token): the reason, and no tokens are kept.
	Failed string `json:"failed,omitempty"`
}

type lease struct {
	Holder string    `json:"holder"`
	Until  time.Time `json:"until"`
}

// usable reports whether g's access token may be sent at now: held, not
// failed and not within early of its expiry (a zero expiry never expires).
func (g *grant) usable(now time.Time, early time.Duration) bool {
	return g.Failed == "" && g.Access != "" && (g.Expiry.IsZero() || now.Add(early).Before(g.Expiry))
}

// identity is the grant's non-secret identity: its issuer, epoch,
// authorization and scopes. A re-authorization (also after a logout) or a
// refresh that changes the granted scopes changes it; a refresh that
// rotates tokens alone does not.
func (g *grant) identity() string {
	sc := slices.Clone(g.Scopes)
	slices.Sort(sc)
	h := sha256.Sum256([]byte(g.Issuer + "\n" + strconv.FormatUint(g.Epoch, 10) + "\n" + strings.Join(sc, " ") + "\n" + g.Authz))
	return hex.EncodeToString(h[:8])
}

// store is the grants' bucket and the pending logins' bucket, sealed.
type store struct {
	kv     jetstream.KeyValue
	logins jetstream.KeyValue
	sealer *Sealer
}

// Bucket options. Logins expire after LoginTTL: a link not followed by
// then must be asked for again.
const (
	DefaultBucket = "sharedos_oauth"
	LoginTTL      = 10 * time.Minute
	maxRecord     = 64 << 10
)

func openStore(ctx context.Context, js jetstream.JetStream, bucket string, replicas int, sealer *Sealer) (*store, error) {
	if bucket == "" {
		bucket = DefaultBucket
	}
	if replicas <= 0 {
		replicas = 1
	}
	open := func(cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
		kv, err := js.KeyValue(ctx, cfg.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = js.CreateKeyValue(ctx, cfg)
			if errors.Is(err, jetstream.ErrBucketExists) {
				kv, err = js.KeyValue(ctx, cfg.Bucket)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("oauth: bucket %s: %w", cfg.Bucket, err)
		}
		return kv, nil
	}
	kv, err := open(jetstream.KeyValueConfig{Bucket: bucket, Description: "SharedOS OAuth grants (sealed)",
		History: 1, Replicas: replicas, Storage: jetstream.FileStorage, MaxValueSize: maxRecord})
	if err != nil {
		return nil, err
	}
	logins, err := open(jetstream.KeyValueConfig{Bucket: bucket + "_login", Description: "SharedOS OAuth logins under way (sealed)",
		History: 1, Replicas: replicas, Storage: jetstream.FileStorage, MaxValueSize: maxRecord, TTL: LoginTTL})
	if err != nil {
		return nil, err
	}
	return &store{kv: kv, logins: logins, sealer: sealer}, nil
}

// get reads ref's grant and its revision; (nil, 0, nil) when there is
// none. A record sealed by a key this node does not hold is (nil, its
// revision, an error wrapping *KeyNotHeldError).
func (s *store) get(ctx context.Context, ref Ref) (*grant, uint64, error) {
	e, err := s.kv.Get(ctx, ref.key())
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("oauth: reading the grant of %s: %w", ref, err)
	}
	var g grant
	if err := s.open(e.Value(), ref.key(), &g); err != nil {
		var kn *KeyNotHeldError
		if errors.As(err, &kn) {
			return nil, e.Revision(), fmt.Errorf("oauth: the grant of %s: %w", ref, err)
		}
		return nil, 0, fmt.Errorf("oauth: the grant of %s: %w", ref, err)
	}
	return &g, e.Revision(), nil
}

// put writes g at ref when its revision is still rev (0: when it holds
// nothing) and returns the new revision; errConflict when it is not.
func (s *store) put(ctx context.Context, ref Ref, g *grant, rev uint64) (uint64, error) {
	v, err := s.seal(g, ref.key())
	if err != nil {
		return 0, err
	}
	var n uint64
	if rev == 0 {
		n, err = s.kv.Create(ctx, ref.key(), v)
	} else {
		n, err = s.kv.Update(ctx, ref.key(), v, rev)
	}
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.Is(err, jetstream.ErrKeyExists) || (errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence) {
			return 0, errConflict
		}
		return 0, fmt.Errorf("oauth: writing the grant of %s: %w", ref, err)
	}
	return n, nil
}

// replace writes g at ref whatever it held (a completed login).
func (s *store) replace(ctx context.Context, ref Ref, g *grant) error {
	v, err := s.seal(g, ref.key())
	if err != nil {
		return err
	}
	if _, err := s.kv.Put(ctx, ref.key(), v); err != nil {
		return fmt.Errorf("oauth: writing the grant of %s: %w", ref, err)
	}
	return nil
}

var errConflict = errors.New("oauth: the grant changed meanwhile")

func (s *store) seal(v any, key string) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := s.sealer.Seal(b, []byte(key))
	if len(out) > maxRecord {
		return nil, fmt.Errorf("oauth: a record of %d bytes is over the %d-byte bound", len(out), maxRecord)
	}
	return out, nil
}

func (s *store) open(sealed []byte, key string, v any) error {
	if len(sealed) > maxRecord {
		return fmt.Errorf("oauth: a record of %d bytes is over the %d-byte bound", len(sealed), maxRecord)
	}
	b, err := s.sealer.Open(sealed, []byte(key))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
