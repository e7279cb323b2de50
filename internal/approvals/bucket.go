package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/approval"
)

// DefaultBucket names the bucket.
const DefaultBucket = "SHAREDOS_APPROVALS"

// MaxStateBytes bounds a stored request (arguments included).
const MaxStateBytes = 1 << 20

// Bucket is an approval.Bucket on a JetStream key-value bucket. Safe for
// concurrent use.
type Bucket struct {
	kv jetstream.KeyValue
}

var _ approval.Bucket = (*Bucket)(nil)

// OpenBucket binds the bucket, creating it (with replicas) when it does
// not exist. A request is dropped by the bucket once it is older than
// the longest expiry a rule may have, and a day.
func OpenBucket(ctx context.Context, js jetstream.JetStream, name string, replicas int) (*Bucket, error) {
	if name == "" {
		name = DefaultBucket
	}
	kv, err := js.KeyValue(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: name, Description: "SharedOS approval requests", History: 8, Replicas: max(replicas, 1),
			TTL: approval.MaxExpiry + 24*time.Hour, Storage: jetstream.FileStorage, MaxValueSize: MaxStateBytes,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("approvals: bucket %s: %w", name, err)
	}
	return &Bucket{kv: kv}, nil
}

func key(tenant, id string) string { return tenant + "." + id }

// validToken reports whether s is one subject token a key may hold.
func validToken(s string) bool {
	if s == "" || len(s) > 256 {
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

func encode(st approval.State) ([]byte, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxStateBytes {
		return nil, fmt.Errorf("approvals: request %s is %d bytes, more than %d", st.ID, len(b), MaxStateBytes)
	}
	return b, nil
}

func decode(e jetstream.KeyValueEntry) (approval.State, error) {
	var st approval.State
	if len(e.Value()) > MaxStateBytes {
		return st, fmt.Errorf("approvals: %s: a stored value of %d bytes", e.Key(), len(e.Value()))
	}
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return st, fmt.Errorf("approvals: %s revision %d: %w", e.Key(), e.Revision(), err)
	}
	if err := st.Validate(); err != nil {
		return st, err
	}
	if key(st.Tenant, st.ID) != e.Key() {
		return st, fmt.Errorf("approvals: %s holds request %s of %s", e.Key(), st.ID, st.Tenant)
	}
	return st, nil
}

// Create implements approval.Bucket.
func (b *Bucket) Create(ctx context.Context, st approval.State) (uint64, error) {
	if !validToken(st.Tenant) || !validToken(st.ID) {
		return 0, fmt.Errorf("approvals: tenant %q and id %q must be subject tokens", st.Tenant, st.ID)
	}
	v, err := encode(st)
	if err != nil {
		return 0, err
	}
	rev, err := b.kv.Create(ctx, key(st.Tenant, st.ID), v)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("%w: %s", approval.ErrExists, st.ID)
	}
	return rev, err
}

// Load implements approval.Bucket.
func (b *Bucket) Load(ctx context.Context, tenant, id string) (approval.State, uint64, error) {
	if !validToken(tenant) || !validToken(id) {
		return approval.State{}, 0, fmt.Errorf("%w: %q", approval.ErrNotFound, id)
	}
	e, err := b.kv.Get(ctx, key(tenant, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return approval.State{}, 0, fmt.Errorf("%w: %s", approval.ErrNotFound, id)
	}
	if err != nil {
		return approval.State{}, 0, err
	}
	st, err := decode(e)
	return st, e.Revision(), err
}

// Update implements approval.Bucket: a write at revision rev, refused
// (approval.ErrConflict) by the bucket's leader when the key has moved on.
func (b *Bucket) Update(ctx context.Context, st approval.State, rev uint64) (uint64, error) {
	v, err := encode(st)
	if err != nil {
		return 0, err
	}
	n, err := b.kv.Update(ctx, key(st.Tenant, st.ID), v, rev)
	var api *jetstream.APIError
	if errors.Is(err, jetstream.ErrKeyExists) || errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
		return 0, fmt.Errorf("%w: %s: %v", approval.ErrConflict, st.ID, err)
	}
	return n, err
}

// List implements approval.Bucket.
func (b *Bucket) List(ctx context.Context, tenant string) ([]approval.State, error) {
	filter := ">"
	if tenant != "" {
		if !validToken(tenant) {
			return nil, nil
		}
		filter = tenant + ".*"
	}
	w, err := b.kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	var out []approval.State
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("approvals: list: the watch ended")
			}
			if e == nil {
				return out, nil
			}
			st, err := decode(e)
			if err != nil {
				return nil, err
			}
			out = append(out, st)
		}
	}
}

// Find returns the tenant holding request id among tenants ("" in
// tenants: any), or ErrNotFound.
func (b *Bucket) Find(ctx context.Context, id string, tenants []string) (string, error) {
	if !validToken(id) {
		return "", fmt.Errorf("%w: %q", approval.ErrNotFound, id)
	}
	l, err := b.kv.ListKeysFiltered(ctx, "*."+id)
	if err != nil {
		return "", err
	}
	defer func() { _ = l.Stop() }()
	for k := range l.Keys() {
		t := k[:len(k)-len(id)-1]
		for _, want := range tenants {
			if want == "" || want == t {
				return t, nil
			}
		}
	}
	return "", fmt.Errorf("%w: %s", approval.ErrNotFound, id)
}
