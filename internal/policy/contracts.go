package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/contract"
)

// ContractsBucket is the contract baselines' bucket beside a policy
// bucket: "<policy bucket>_CONTRACTS".
func ContractsBucket(policyBucket string) string { return policyBucket + "_CONTRACTS" }

// MaxRecordBytes bounds one stored baseline record (its accepted and
// pending contracts, each bounded by contract.MaxContractBytes).
const MaxRecordBytes = 2*contract.MaxContractBytes + 16<<10

// ContractsOptions configure a ContractStore.
type ContractsOptions struct {
	// Bucket names the bucket. Required (ContractsBucket of the policy's).
	Bucket string
	// Replicas is the bucket's replica count when the store creates it.
	Replicas int
	Logger   *slog.Logger
}

// ContractStore keeps the contract baselines (contract.Store) in a
// JetStream key-value bucket beside the policy's: one key per (tenant,
// provider, tool), "<tenant>.<provider>.<tool>", each name one token as
// policy keys write them, the value a contract.Record as JSON. A watch
// keeps a copy of every record, so a resolution reads its baselines
// without a round trip (Get); every write is a compare-and-set on the
// key's revision, so two nodes writing from their copies cannot lose each
// other's updates (the second is refused, reads the bucket and retries:
// contract.Update). Safe for concurrent use.
type ContractStore struct {
	kv  jetstream.KeyValue
	log *slog.Logger
	w   jetstream.KeyWatcher

	mu   sync.RWMutex
	recs map[contract.Key]contract.Entry

	cancel context.CancelFunc
	done   chan struct{}
}

// OpenContracts binds (creating it if needed) the baselines' bucket and
// returns once its copy holds everything the bucket held.
func OpenContracts(ctx context.Context, js jetstream.JetStream, opts ContractsOptions) (*ContractStore, error) {
	if opts.Bucket == "" {
		return nil, errors.New("policy: ContractsOptions.Bucket is required")
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	kv, err := js.KeyValue(ctx, opts.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: opts.Bucket, Description: "SharedOS contract baselines: the accepted and pending contract of each (tenant, provider, tool)",
			History: DefaultHistory, Replicas: opts.Replicas, Storage: jetstream.FileStorage, MaxValueSize: MaxRecordBytes,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, opts.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("policy: bucket %s: %w", opts.Bucket, err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	w, err := kv.WatchAll(wctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("policy: watch %s: %w", opts.Bucket, err)
	}
	s := &ContractStore{kv: kv, log: opts.Logger, w: w, recs: map[contract.Key]contract.Entry{}, cancel: cancel, done: make(chan struct{})}
	ready := make(chan struct{})
	go s.run(wctx, ready)
	select {
	case <-ready:
		return s, nil
	case <-ctx.Done():
		s.Close()
		return nil, fmt.Errorf("policy: %s: the initial values did not arrive: %w", opts.Bucket, ctx.Err())
	}
}

// Close stops the watch; idempotent.
func (s *ContractStore) Close() {
	s.cancel()
	<-s.done
}

func (s *ContractStore) run(ctx context.Context, ready chan struct{}) {
	defer close(s.done)
	defer func() { _ = s.w.Stop() }()
	initial := true
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-s.w.Updates():
			if !ok {
				s.log.Error("policy: the contract baselines' watch ended; reads answer from the bucket")
				return
			}
			if e == nil {
				if initial {
					initial = false
					close(ready)
				}
				continue
			}
			s.take(e)
		}
	}
}

// take applies one update to the copy, unless the copy already holds a
// later revision of the key (a write of this node's, applied at once).
func (s *ContractStore) take(e jetstream.KeyValueEntry) {
	k, err := parseContractKey(e.Key())
	if err != nil {
		s.log.Warn("policy: a key the contract store does not read; ignored", "key", e.Key(), "err", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.recs[k]; ok && cur.Revision >= e.Revision() {
		return
	}
	if e.Operation() != jetstream.KeyValuePut {
		delete(s.recs, k)
		return
	}
	r, err := decodeRecord(e.Value())
	if err != nil {
		// Unreadable: the key holds nothing the copy trusts; a holding
		// provider's tool stays out (nothing accepted), a write
		// replaces it (its revision is still compared).
		s.log.Error("policy: an unreadable contract baseline", "key", k.String(), "revision", e.Revision(), "err", err)
		s.recs[k] = contract.Entry{Key: k, Revision: e.Revision()}
		return
	}
	s.recs[k] = contract.Entry{Key: k, Record: r, Revision: e.Revision()}
}

// ContractKey is the bucket key of k.
func ContractKey(k contract.Key) string {
	return token(k.Tenant) + "." + token(k.Provider) + "." + token(k.Tool)
}

func parseContractKey(s string) (contract.Key, error) {
	parts := strings.Split(s, ".")
	if len(s) > MaxKeyBytes || len(parts) != 3 {
		return contract.Key{}, fmt.Errorf("%w: %q: a baseline key is <tenant>.<provider>.<tool>", ErrInvalidKey, s)
	}
	var k contract.Key
	var err error
	for i, dst := range []*string{&k.Tenant, &k.Provider, &k.Tool} {
		if *dst, err = untoken(parts[i]); err != nil {
			return contract.Key{}, fmt.Errorf("%w: %q: %v", ErrInvalidKey, s, err)
		}
	}
	if ContractKey(k) != s {
		return contract.Key{}, fmt.Errorf("%w: %q is not in canonical form", ErrInvalidKey, s)
	}
	return k, nil
}

func decodeRecord(b []byte) (contract.Record, error) {
	var r contract.Record
	if len(b) > MaxRecordBytes {
		return r, fmt.Errorf("%w: a baseline of %d bytes", ErrTooLarge, len(b))
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, err
	}
	if len(r.Rejected) > contract.MaxRejected {
		return r, fmt.Errorf("%d rejected revisions, more than %d", len(r.Rejected), contract.MaxRejected)
	}
	return r, nil
}

// Get returns k's record from the copy.
func (s *ContractStore) Get(_ context.Context, k contract.Key) (contract.Record, uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e := s.recs[k]
	return e.Record, e.Revision, nil
}

// Latest returns k's record as the bucket holds it now.
func (s *ContractStore) Latest(ctx context.Context, k contract.Key) (contract.Record, uint64, error) {
	e, err := s.kv.Get(ctx, ContractKey(k))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return contract.Record{}, 0, nil
	case err != nil:
		return contract.Record{}, 0, fmt.Errorf("policy: baseline %s: %w", k, err)
	}
	r, err := decodeRecord(e.Value())
	if err != nil {
		return contract.Record{}, e.Revision(), fmt.Errorf("policy: baseline %s: %w", k, err)
	}
	s.mu.Lock()
	if cur, ok := s.recs[k]; !ok || cur.Revision < e.Revision() {
		s.recs[k] = contract.Entry{Key: k, Record: r, Revision: e.Revision()}
	}
	s.mu.Unlock()
	return r, e.Revision(), nil
}

// Put writes r under k if k is at revision rev (0: holds nothing).
func (s *ContractStore) Put(ctx context.Context, k contract.Key, r contract.Record, rev uint64) (uint64, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return 0, err
	}
	if len(b) > MaxRecordBytes {
		return 0, fmt.Errorf("%w: a baseline of %d bytes", ErrTooLarge, len(b))
	}
	var n uint64
	if rev == 0 {
		n, err = s.kv.Create(ctx, ContractKey(k), b)
	} else {
		n, err = s.kv.Update(ctx, ContractKey(k), b, rev)
	}
	if err != nil {
		var api *jetstream.APIError
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
			errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return 0, fmt.Errorf("%w: %s is no longer at revision %d", contract.ErrConflict, k, rev)
		}
		return 0, fmt.Errorf("policy: write baseline %s: %w", k, err)
	}
	s.mu.Lock()
	if cur, ok := s.recs[k]; !ok || cur.Revision < n {
		s.recs[k] = contract.Entry{Key: k, Record: r, Revision: n}
	}
	s.mu.Unlock()
	return n, nil
}

// List returns tenant's records ("" for every tenant's) from the copy.
func (s *ContractStore) List(_ context.Context, tenant string) ([]contract.Entry, error) {
	s.mu.RLock()
	out := make([]contract.Entry, 0, len(s.recs))
	for k, e := range s.recs {
		if tenant == "" || k.Tenant == tenant {
			out = append(out, e)
		}
	}
	s.mu.RUnlock()
	contract.SortEntries(out)
	return out, nil
}
