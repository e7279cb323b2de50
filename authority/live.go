package authority

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Live is policy that changes while turns are open: every principal's
// grants and every credential-profile binding, replaced as the policy
// store reports changes. It is a Source and a CredentialPolicy, and the
// Authority it resolves for a turn keeps asking it, at each decision,
// whether the grants the turn holds are still in force.
//
// What a turn holds is fixed at its resolution: the ids of the grants its
// principal had then (ADR 0026: the catalogue and the grants are resolved
// once per turn). Whether each is still valid is judged live: a grant
// since removed is not valid, a grant whose window was shortened is valid
// only in the shorter window (the intersection of the held and the
// current window), and a grant whose capability or resource pattern
// changed is not valid for the turn (a changed pattern is a new grant;
// new turns get it). A grant added after the resolution is not the
// turn's: adding never widens an open turn. A credential binding
// withdrawn from the turn's principal refuses the turn's next decision.
//
// When the policy it mirrors has not been confirmed current for longer
// than the staleness bound (SetMaxStaleness, Confirm), every decision that
// needs live validity is refused policy_stale instead of being judged on
// a view that may be missing a revocation.
//
// All methods are safe for concurrent use and never block: readers load
// an immutable state; writers replace it.
type Live struct {
	mu    sync.Mutex // serializes writers
	state atomic.Pointer[liveState]

	maxStale  atomic.Int64 // nanoseconds; 0: never stale
	confirmed atomic.Int64 // unix nanoseconds of the last confirmation
}

type liveState struct {
	grants map[[2]string][]Grant
	creds  *StaticCredentials
}

// NewLive returns a Live holding grants (keyed by tenant and principal)
// and bindings, confirmed current at the zero instant and never stale
// until SetMaxStaleness sets a bound.
func NewLive(grants map[[2]string][]GrantSpec, bindings []CredentialBinding) (*Live, error) {
	l := &Live{}
	if err := l.Replace(grants, bindings); err != nil {
		return nil, err
	}
	return l, nil
}

// Replace swaps in a whole new policy; nothing changes when it is invalid.
func (l *Live) Replace(grants map[[2]string][]GrantSpec, bindings []CredentialBinding) error {
	compiled := make(map[[2]string][]Grant, len(grants))
	for who, specs := range grants {
		gs, err := compileGrants(who, specs)
		if err != nil {
			return err
		}
		compiled[who] = gs
	}
	creds, err := NewStaticCredentials(bindings)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.state.Store(&liveState{grants: compiled, creds: creds})
	l.mu.Unlock()
	return nil
}

func compileGrants(who [2]string, specs []GrantSpec) ([]Grant, error) {
	out := make([]Grant, 0, len(specs))
	seen := map[string]bool{}
	for _, spec := range specs {
		g, err := spec.Compile()
		if err != nil {
			return nil, fmt.Errorf("tenant %q principal %q: %w", who[0], who[1], err)
		}
		if seen[g.ID] {
			return nil, fmt.Errorf("tenant %q principal %q: grant %q listed twice", who[0], who[1], g.ID)
		}
		seen[g.ID] = true
		out = append(out, g)
	}
	return out, nil
}

// SetGrants replaces one principal's grants (none: specs empty).
func (l *Live) SetGrants(tenant, principal string, specs []GrantSpec) error {
	who := [2]string{tenant, principal}
	gs, err := compileGrants(who, specs)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.state.Load()
	next := &liveState{grants: make(map[[2]string][]Grant, len(old.grants)+1), creds: old.creds}
	for k, v := range old.grants {
		next.grants[k] = v
	}
	if len(gs) == 0 {
		delete(next.grants, who)
	} else {
		next.grants[who] = gs
	}
	l.state.Store(next)
	return nil
}

// SetMaxStaleness bounds how long the view may go unconfirmed (0: no bound).
func (l *Live) SetMaxStaleness(d time.Duration) { l.maxStale.Store(int64(d)) }

// Confirm records that at instant t the view held everything the policy
// store had stored: decisions up to t plus the staleness bound are judged
// on it. An earlier t than the last confirmation changes nothing.
func (l *Live) Confirm(t time.Time) {
	n := t.UnixNano()
	for {
		cur := l.confirmed.Load()
		if n <= cur || l.confirmed.CompareAndSwap(cur, n) {
			return
		}
	}
}

// Confirmed is the instant of the last confirmation.
func (l *Live) Confirmed() time.Time { return time.Unix(0, l.confirmed.Load()) }

// Stale reports whether, at now, the view has gone unconfirmed for longer
// than the staleness bound.
func (l *Live) Stale(now time.Time) bool {
	d := l.maxStale.Load()
	return d > 0 && now.UnixNano()-l.confirmed.Load() > d
}

// Resolve returns the principal's grants as they are now, bound to l for
// live validity. It never blocks.
func (l *Live) Resolve(_ context.Context, access AccessContext) (Authority, error) {
	who := [2]string{access.Tenant, access.Principal}
	return Authority{grants: l.state.Load().grants[who], live: l, who: who, profile: access.CredentialProfile}, nil
}

// PermitsCredential reports whether principal of tenant may act with
// profile under the current bindings.
func (l *Live) PermitsCredential(tenant, principal, profile string) bool {
	return l.state.Load().creds.PermitsCredential(tenant, principal, profile)
}

// current reports the grant of who with id as the policy has it now.
func (l *Live) current(who [2]string, id string) (Grant, bool) {
	gs := l.state.Load().grants[who]
	i := slices.IndexFunc(gs, func(g Grant) bool { return g.ID == id })
	if i < 0 {
		return Grant{}, false
	}
	return gs[i], true
}

// inForce reports whether held, a grant a turn of who holds, is in force
// at now under the current policy (see Live).
func (l *Live) inForce(who [2]string, held *Grant, now time.Time) bool {
	cur, ok := l.current(who, held.ID)
	if !ok || cur.Capability.String() != held.Capability.String() || cur.Resource.String() != held.Resource.String() {
		return false
	}
	return cur.ValidAt(now)
}
