package contract

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/sharedos/sharedos/catalog"
)

// Drift is what a provider's policy does with a tool whose contract
// differs from its accepted baseline.
type Drift string

// The drift policies.
const (
	// DriftAdopt: the turn holds the new revision and the baseline
	// advances to it (recorded).
	DriftAdopt Drift = "adopt"
	// DriftHold: the tool is left out of turns until an approver accepts
	// the new revision.
	DriftHold Drift = "hold"
)

// FirstUse is what a holding provider's policy does with a tool that has
// no baseline yet.
type FirstUse string

// The first-use policies.
const (
	// FirstUseTrust: a new tool's first revision is adopted.
	FirstUseTrust FirstUse = "trust"
	// FirstUseHold: a new tool waits for review like a changed one.
	FirstUseHold FirstUse = "hold"
)

// Policy is one provider's contract policy. The zero value is today's
// behaviour: adopt every change, trust first use, refuse nothing.
type Policy struct {
	Drift    Drift
	FirstUse FirstUse
	// RefuseHiddenText refuses (leaves out of every turn, whatever the
	// baseline) a tool whose model-facing text carries Hidden characters.
	RefuseHiddenText bool
}

func (p Policy) holds() bool { return p.Drift == DriftHold }

// Drifted is one tool of a resolution whose contract is not its accepted
// baseline, and what the gate did: Adopted (the turn holds it), or
// PendingReview, Rejected, RefusedHidden, Unavailable (left out).
type Drifted struct {
	Tool     string   `json:"tool"`
	Revision string   `json:"revision"`
	Decision Decision `json:"decision"`
	// Classes classify the change from the accepted revision (New when
	// there is none).
	Classes []Class `json:"classes,omitempty"`
	// Accepted is the accepted revision it differs from ("" for none).
	Accepted string `json:"accepted,omitempty"`
	// Detail says more (the hidden characters, a store error).
	Detail string `json:"detail,omitempty"`
}

// Held reports whether the turn leaves the tool out.
func (d Drifted) Held() bool { return d.Decision != Adopted }

// Gate applies providers' contract policies at each catalogue resolution
// and carries out reviews. Safe for concurrent use.
type Gate struct {
	store  Store
	policy func(provider string) Policy
	clock  func() time.Time
	log    *slog.Logger
	record func(context.Context, Reviewed) error
}

// GateOptions configure a Gate.
type GateOptions struct {
	// Policy is each provider's policy (nil: the zero Policy for all).
	Policy func(provider string) Policy
	// Record, when set, records every review (the contract.reviewed audit
	// event); a review it fails to record is still stored, and reported.
	Record func(context.Context, Reviewed) error
	Clock  func() time.Time
	Logger *slog.Logger
}

// NewGate returns a gate over store.
func NewGate(store Store, opts GateOptions) *Gate {
	if opts.Policy == nil {
		opts.Policy = func(string) Policy { return Policy{} }
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Gate{store: store, policy: opts.Policy, clock: opts.Clock, log: opts.Logger, record: opts.Record}
}

// Store is the gate's store.
func (g *Gate) Store() Store { return g.store }

// maxParallelWrites bounds one Admit's concurrent baseline writes.
const maxParallelWrites = 8

// Admit decides which of provider's tools (as one resolution of a turn of
// tenant got them) the turn may hold, and returns them with every tool
// that is not at its baseline and what was done with it, in the tools'
// order. A tool at its accepted revision is kept without a write. It
// never fails: a store that cannot be read holds a holding provider's
// tools (Unavailable) and keeps an adopting one's; a write that fails
// (ctx done, store down) is retried by the next resolution.
func (g *Gate) Admit(ctx context.Context, tenant, provider string, tools []*catalog.Tool) ([]*catalog.Tool, []Drifted) {
	pol := g.policy(provider)
	kept := make([]*catalog.Tool, 0, len(tools))
	drift := make([]*Drifted, len(tools))
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxParallelWrites)
	for i, t := range tools {
		c := Of(t)
		if pol.RefuseHiddenText {
			if hs := FindHidden(c); len(hs) > 0 {
				drift[i] = &Drifted{Tool: t.Identity.Name, Revision: t.Revision, Decision: RefusedHidden, Detail: hiddenDetail(hs)}
				continue
			}
		}
		k := Key{Tenant: tenant, Provider: provider, Tool: t.Identity.Name}
		rec, _, err := g.store.Get(ctx, k)
		if err != nil {
			g.log.Warn("contract: baseline unreadable", "key", k.String(), "err", err)
			if pol.holds() {
				drift[i] = &Drifted{Tool: t.Identity.Name, Revision: t.Revision, Decision: Unavailable, Detail: err.Error()}
			}
			continue
		}
		if rec.Accepted != nil && rec.Accepted.Revision == t.Revision {
			continue
		}
		d := &Drifted{Tool: t.Identity.Name, Revision: t.Revision}
		drift[i] = d
		prev, err := rec.Accepted.Decode()
		if err != nil {
			d.Detail = "the accepted contract does not decode: " + err.Error()
			prev = nil
		}
		if rec.Accepted != nil {
			d.Accepted = rec.Accepted.Revision
		}
		d.Classes = Classify(prev, &c).Classes
		adopt := !pol.holds() || (rec.Accepted == nil && pol.FirstUse != FirstUseHold)
		switch {
		case adopt:
			d.Decision = Adopted
		case slices.Contains(rec.Rejected, t.Revision):
			d.Decision = Rejected
			continue // nothing to write: it stays out
		default:
			d.Decision = PendingReview
			if rec.Pending != nil && rec.Pending.Revision == t.Revision {
				continue // already up for review
			}
		}
		snap := &Snapshot{Revision: t.Revision, Contract: t.Contract, Seen: g.clock().UTC()}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := g.advance(ctx, k, snap, d.Decision); err != nil {
				g.log.Warn("contract: baseline not written; the next resolution tries again", "key", k.String(), "decision", d.Decision, "err", err)
			}
		}()
	}
	wg.Wait()
	var out []Drifted
	for i, t := range tools {
		d := drift[i]
		if d == nil || !d.Held() {
			kept = append(kept, t)
		}
		if d != nil {
			out = append(out, *d)
		}
	}
	return kept, out
}

func hiddenDetail(hs []HiddenText) string {
	s := ""
	for i, h := range hs {
		if i > 0 {
			s += "; "
		}
		s += h.String()
	}
	return s
}

// advance writes what Admit decided: an adopted revision becomes the
// baseline, a held one the pending revision. A concurrent writer's newer
// decision on the same revision is kept (nothing is written twice).
func (g *Gate) advance(ctx context.Context, k Key, snap *Snapshot, dec Decision) error {
	_, err := Update(ctx, g.store, k, func(r Record, _ bool) (Record, bool, error) {
		switch dec {
		case Adopted:
			if r.Accepted != nil && r.Accepted.Revision == snap.Revision {
				return r, false, nil
			}
			r.Accepted = snap
			if r.Pending != nil && r.Pending.Revision == snap.Revision {
				r.Pending = nil
			}
			r.Last = &Review{Decision: Adopted, Revision: snap.Revision, By: "policy", At: snap.Seen}
		case PendingReview:
			if r.Accepted != nil && r.Accepted.Revision == snap.Revision ||
				r.Pending != nil && r.Pending.Revision == snap.Revision || slices.Contains(r.Rejected, snap.Revision) {
				return r, false, nil
			}
			r.Pending = snap
		}
		return r, true, nil
	})
	return err
}

// Reviewed is one review as recorded: who decided what on which revision,
// and the revision it replaced.
type Reviewed struct {
	Key      Key      `json:"key"`
	Decision Decision `json:"decision"` // Accepted or Rejected
	Revision string   `json:"revision"`
	// Previous is the accepted revision before the review ("" for none).
	Previous string    `json:"previous,omitempty"`
	Classes  []Class   `json:"classes,omitempty"`
	By       string    `json:"by"`
	At       time.Time `json:"at"`
	Why      string    `json:"why,omitempty"`
}

// Accept makes key's pending revision (which must be revision) its
// baseline, as by's decision: turns resolved from then on hold it. It
// returns the review.
func (g *Gate) Accept(ctx context.Context, k Key, revision, by, why string) (Reviewed, error) {
	return g.review(ctx, k, revision, by, why, Accepted)
}

// Reject refuses key's pending revision (which must be revision): the
// baseline stays, and turns go on leaving the tool out while its provider
// offers that revision.
func (g *Gate) Reject(ctx context.Context, k Key, revision, by, why string) (Reviewed, error) {
	return g.review(ctx, k, revision, by, why, Rejected)
}

func (g *Gate) review(ctx context.Context, k Key, revision, by, why string, dec Decision) (Reviewed, error) {
	var rv Reviewed
	_, err := Update(ctx, g.store, k, func(r Record, exists bool) (Record, bool, error) {
		if !exists {
			return r, false, fmt.Errorf("%w: %s", ErrNotFound, k)
		}
		if r.Pending == nil || r.Pending.Revision != revision {
			cur := "none"
			if r.Pending != nil {
				cur = r.Pending.Revision
			}
			return r, false, fmt.Errorf("%w: %s: pending is %s, not %s", ErrNotPending, k, cur, revision)
		}
		prev, _ := r.Accepted.Decode()
		cur, _ := r.Pending.Decode()
		rv = Reviewed{Key: k, Decision: dec, Revision: revision, By: by, At: g.clock().UTC(), Why: why}
		if cur != nil {
			rv.Classes = Classify(prev, cur).Classes
		}
		if r.Accepted != nil {
			rv.Previous = r.Accepted.Revision
		}
		if dec == Accepted {
			r.Accepted = r.Pending
			r.Rejected = slices.DeleteFunc(slices.Clone(r.Rejected), func(s string) bool { return s == revision })
		} else {
			r.Rejected = append(slices.Clone(r.Rejected), revision)
			if n := len(r.Rejected); n > MaxRejected {
				r.Rejected = r.Rejected[n-MaxRejected:]
			}
		}
		r.Pending = nil
		r.Last = &Review{Decision: dec, Revision: revision, By: by, At: rv.At, Why: why}
		return r, true, nil
	})
	if err != nil {
		return Reviewed{}, err
	}
	if g.record != nil {
		if err := g.record(ctx, rv); err != nil {
			return rv, fmt.Errorf("contract: review stored but not recorded: %w", err)
		}
	}
	return rv, nil
}
