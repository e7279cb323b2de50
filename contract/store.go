package contract

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Key names one baseline: a tool of a provider, for one tenant.
type Key struct {
	Tenant   string `json:"tenant"`
	Provider string `json:"provider"`
	Tool     string `json:"tool"`
}

func (k Key) String() string { return k.Tenant + "/" + k.Provider + "/" + k.Tool }

// Snapshot is one revision of a tool's contract as a resolution saw it.
type Snapshot struct {
	// Revision is the catalogue's revision of the contract (catalog.Tool.Revision).
	Revision string `json:"revision"`
	// Contract is the canonical contract (catalog.Tool.Contract).
	Contract json.RawMessage `json:"contract"`
	// Seen is when a resolution first saw it.
	Seen time.Time `json:"seen"`
}

// Decode is the snapshot's contract.
func (s *Snapshot) Decode() (*Contract, error) {
	if s == nil {
		return nil, nil
	}
	c, err := Decode(s.Contract)
	if err != nil {
		return nil, err
	}
	return &c, nil
}

// Decision is what happened to a revision.
type Decision string

// The decisions a Record names.
const (
	// Adopted: accepted by the provider's policy (drift: adopt, or a new
	// tool whose first use is trusted), not by a person.
	Adopted Decision = "adopted"
	// Accepted, Rejected: by an approver.
	Accepted Decision = "accepted"
	Rejected Decision = "rejected"
	// PendingReview: held out of turns until an approver decides. The
	// decisions that leave a tool out and have a reason code are spelled
	// as it (reason.PendingReview, reason.HiddenText).
	PendingReview Decision = "pending_review"
	// RefusedHidden: refused because its model-facing text carries
	// hidden characters and the provider's policy refuses them.
	RefusedHidden Decision = "hidden_text"
	// Unavailable: held because its baseline could not be read.
	Unavailable Decision = "baseline_unavailable"
)

// Review is the last decision on a record.
type Review struct {
	Decision Decision  `json:"decision"`
	Revision string    `json:"revision"`
	By       string    `json:"by"`
	At       time.Time `json:"at"`
	Why      string    `json:"why,omitempty"`
}

// MaxRejected bounds the rejected revisions a record remembers.
const MaxRejected = 16

// Record is what a Store keeps for one Key.
type Record struct {
	// Accepted is the baseline: the revision turns may hold. Nil when
	// none was accepted yet.
	Accepted *Snapshot `json:"accepted,omitempty"`
	// Pending is a revision the provider offers that is not accepted and
	// waits for review; nil when none.
	Pending *Snapshot `json:"pending,omitempty"`
	// Rejected are revisions an approver refused (newest last): they stay
	// out of turns and are not put up for review again.
	Rejected []string `json:"rejected,omitempty"`
	// Last is the last decision taken on the record.
	Last *Review `json:"last,omitempty"`
}

// Entry is a record with its key and store revision.
type Entry struct {
	Key      Key
	Record   Record
	Revision uint64
}

// Errors callers branch on.
var (
	// ErrConflict: the record is no longer at the revision a write named.
	ErrConflict = errors.New("contract: baseline changed meanwhile")
	// ErrNotPending: a review named a revision that is not the record's
	// pending one (decided already, or superseded by a newer one).
	ErrNotPending = errors.New("contract: not the pending revision")
	// ErrNotFound: no baseline record for the key.
	ErrNotFound = errors.New("contract: no such baseline")
)

// Store keeps the baselines. Get may answer from a copy that lags the
// store's writes from other nodes (a watched cache); Put is a
// compare-and-set on the record's revision, so a writer working from a
// stale copy is refused ErrConflict rather than overwriting. Safe for
// concurrent use.
type Store interface {
	// Get returns k's record and its revision (0, and no error, when k
	// holds nothing).
	Get(ctx context.Context, k Key) (Record, uint64, error)
	// Latest is Get read from the store itself, not a copy.
	Latest(ctx context.Context, k Key) (Record, uint64, error)
	// Put writes r under k if k is at revision rev (0: holds nothing) and
	// returns the new revision; ErrConflict otherwise.
	Put(ctx context.Context, k Key, r Record, rev uint64) (uint64, error)
	// List returns every record of tenant ("" for all), in key order.
	List(ctx context.Context, tenant string) ([]Entry, error)
}

// maxAttempts bounds Update's compare-and-set retries.
const maxAttempts = 8

// Update applies f to k's record with compare-and-set, reading the
// store's latest value again after each conflict: concurrent updates on
// several nodes are applied one after another, none lost. f returns false
// to write nothing. It returns the record as written (or as read, when f
// wrote nothing).
func Update(ctx context.Context, s Store, k Key, f func(r Record, exists bool) (Record, bool, error)) (Record, error) {
	r, rev, err := s.Get(ctx, k)
	for attempt := 0; ; attempt++ {
		if err != nil {
			return Record{}, err
		}
		next, write, ferr := f(r, rev > 0)
		if ferr != nil || !write {
			return r, ferr
		}
		_, err = s.Put(ctx, k, next, rev)
		if err == nil {
			return next, nil
		}
		if !errors.Is(err, ErrConflict) || attempt+1 >= maxAttempts {
			return Record{}, err
		}
		r, rev, err = s.Latest(ctx, k)
	}
}

// Memory is a Store in memory, for tests and in-process kernels.
type Memory struct {
	mu   sync.Mutex
	rev  uint64
	recs map[Key]Entry
}

// NewMemory returns an empty store.
func NewMemory() *Memory { return &Memory{recs: map[Key]Entry{}} }

// Get returns k's record.
func (m *Memory) Get(_ context.Context, k Key) (Record, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.recs[k]
	return cloneRecord(e.Record), e.Revision, nil
}

// Latest is Get.
func (m *Memory) Latest(ctx context.Context, k Key) (Record, uint64, error) { return m.Get(ctx, k) }

// Put writes r if k is at rev.
func (m *Memory) Put(_ context.Context, k Key, r Record, rev uint64) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur := m.recs[k].Revision; cur != rev {
		return 0, fmt.Errorf("%w: %s is at revision %d, not %d", ErrConflict, k, cur, rev)
	}
	m.rev++
	m.recs[k] = Entry{Key: k, Record: cloneRecord(r), Revision: m.rev}
	return m.rev, nil
}

// List returns tenant's records.
func (m *Memory) List(_ context.Context, tenant string) ([]Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Entry
	for k, e := range m.recs {
		if tenant == "" || k.Tenant == tenant {
			e.Record = cloneRecord(e.Record)
			out = append(out, e)
		}
	}
	SortEntries(out)
	return out, nil
}

// SortEntries orders entries by tenant, provider, tool.
func SortEntries(es []Entry) {
	slices.SortFunc(es, func(a, b Entry) int {
		if c := strings.Compare(a.Key.Tenant, b.Key.Tenant); c != 0 {
			return c
		}
		if c := strings.Compare(a.Key.Provider, b.Key.Provider); c != 0 {
			return c
		}
		return strings.Compare(a.Key.Tool, b.Key.Tool)
	})
}

func cloneRecord(r Record) Record {
	r.Rejected = slices.Clone(r.Rejected)
	return r
}
