package approval

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sharedos/sharedos/reason"
)

// Bucket is where requests are kept, by tenant and id, each with a
// revision that changes at every write. Implementations are safe for
// concurrent use: the JetStream key-value bucket in a node
// (internal/approvals), Memory in tests.
type Bucket interface {
	// Create stores st under its tenant and id if nothing is (ErrExists).
	Create(ctx context.Context, st State) (uint64, error)
	// Load returns the state and its revision (ErrNotFound).
	Load(ctx context.Context, tenant, id string) (State, uint64, error)
	// Update replaces the state if it is still at rev (ErrConflict).
	Update(ctx context.Context, st State, rev uint64) (uint64, error)
	// List returns the states of tenant ("" for every tenant).
	List(ctx context.Context, tenant string) ([]State, error)
}

// Requests is the approvals of a cluster on a Bucket: the kernel's Store,
// and the approvers' decisions.
type Requests struct {
	B Bucket
	// Announce, when set, tells the tenant's approvers of a new request
	// (best effort: approvers can always list).
	Announce func(ctx context.Context, st State)
	// Record, when set, records a decision (the approval.decided audit
	// event) before it is in force: an approval whose record failed is not
	// usable, and the approver may decide again to record it.
	Record func(ctx context.Context, st State) error
	// Clock stamps decisions; default time.Now.
	Clock func() time.Time
}

var _ Store = (*Requests)(nil)

// Put stores r as pending and announces it.
func (q *Requests) Put(ctx context.Context, r Request) error {
	st := State{Request: r, Status: Pending}
	if _, err := q.B.Create(ctx, st); err != nil {
		return err
	}
	if q.Announce != nil {
		q.Announce(ctx, st)
	}
	return nil
}

// Get returns a request's state and revision.
func (q *Requests) Get(ctx context.Context, tenant, id string) (State, uint64, error) {
	return q.B.Load(ctx, tenant, id)
}

// Use marks the approval used by callID, if it is approved and still at rev.
func (q *Requests) Use(ctx context.Context, tenant, id string, rev uint64, callID string, at time.Time) error {
	st, cur, err := q.B.Load(ctx, tenant, id)
	if err != nil {
		return err
	}
	if cur != rev || st.Status != Approved || !st.Recorded {
		return fmt.Errorf("%w: %s is at revision %d (%s), not %d", ErrConflict, id, cur, st.Status, rev)
	}
	st.Status, st.UsedBy, st.UsedAt = Used, callID, at.UTC()
	_, err = q.B.Update(ctx, st, rev)
	return err
}

// List returns the requests of tenant ("" for all), pending first, each
// group newest first.
func (q *Requests) List(ctx context.Context, tenant string) ([]State, error) {
	sts, err := q.B.List(ctx, tenant)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(sts, func(a, b State) int {
		if (a.Status == Pending) != (b.Status == Pending) {
			if a.Status == Pending {
				return -1
			}
			return 1
		}
		if c := b.RequestedAt.Compare(a.RequestedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return sts, nil
}

// Decide applies an approver's decision to request id of tenant: written
// at the revision it was read at, then recorded, then marked recorded —
// only then is an approval in force. A decision that lost a race to
// another approver's is refused approval_invalid; one whose record failed
// is refused audit_unavailable and may be repeated.
func (q *Requests) Decide(ctx context.Context, tenant, id string, d Decision) (State, error) {
	if d.At.IsZero() {
		d.At = q.now()
	}
	st, rev, err := q.B.Load(ctx, tenant, id)
	if err != nil {
		return State{}, err
	}
	next, rerr := Decide(st, d)
	if rerr != nil {
		return st, rerr
	}
	if next.Status != st.Status || next.DecidedBy != st.DecidedBy {
		if rev, err = q.B.Update(ctx, next, rev); err != nil {
			if errors.Is(err, ErrConflict) {
				return st, reason.New(reason.ApprovalInvalid, "approval %s was decided or used meanwhile", id)
			}
			return st, err
		}
	}
	if q.Record != nil {
		if err := q.Record(ctx, next); err != nil {
			return next, reason.New(reason.AuditUnavailable, "the decision on %s is stored but its approval.decided was not recorded, so it is not in force; decide again: %v", id, err)
		}
	}
	next.Recorded = true
	if _, err := q.B.Update(ctx, next, rev); err != nil {
		if errors.Is(err, ErrConflict) {
			return st, reason.New(reason.ApprovalInvalid, "approval %s changed while its decision was recorded", id)
		}
		return next, err
	}
	return next, nil
}

func (q *Requests) now() time.Time {
	if q.Clock != nil {
		return q.Clock()
	}
	return time.Now()
}

// Memory is a Bucket in memory, for tests and a single process. Safe for
// concurrent use.
type Memory struct {
	mu   sync.Mutex
	rev  uint64
	byID map[[2]string]memEntry
}

type memEntry struct {
	st  State
	rev uint64
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory { return &Memory{byID: map[[2]string]memEntry{}} }

// Create implements Bucket.
func (m *Memory) Create(_ context.Context, st State) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]string{st.Tenant, st.ID}
	if _, ok := m.byID[k]; ok {
		return 0, fmt.Errorf("%w: %s", ErrExists, st.ID)
	}
	m.rev++
	m.byID[k] = memEntry{st: clone(st), rev: m.rev}
	return m.rev, nil
}

// Load implements Bucket.
func (m *Memory) Load(_ context.Context, tenant, id string) (State, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byID[[2]string{tenant, id}]
	if !ok {
		return State{}, 0, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return clone(e.st), e.rev, nil
}

// Update implements Bucket.
func (m *Memory) Update(_ context.Context, st State, rev uint64) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]string{st.Tenant, st.ID}
	e, ok := m.byID[k]
	if !ok {
		return 0, fmt.Errorf("%w: %s", ErrNotFound, st.ID)
	}
	if e.rev != rev {
		return 0, fmt.Errorf("%w: %s is at revision %d, not %d", ErrConflict, st.ID, e.rev, rev)
	}
	m.rev++
	m.byID[k] = memEntry{st: clone(st), rev: m.rev}
	return m.rev, nil
}

// List implements Bucket.
func (m *Memory) List(_ context.Context, tenant string) ([]State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []State
	for k, e := range m.byID {
		if tenant == "" || k[0] == tenant {
			out = append(out, clone(e.st))
		}
	}
	return out, nil
}

func clone(st State) State {
	st.Arguments = slices.Clone(st.Arguments)
	return st
}
