package mcpfront

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sharedos/sharedos/reason"
)

// Bounds are what the front holds for the turns it has minted tokens for:
// turns (each with its entry and mcp.Server) and their tokens, in all, per
// tenant and per principal (a tenant's principal), and tokens per turn. A
// mint beyond a bound is refused overloaded. A turn's entry leaves when the
// turn closes or its last token expires, so what the front holds is what
// its open turns hold. A tenant's share is below the total: one tenant
// alone never fills the front, so its flood never refuses another tenant.
// Zero fields take the defaults (WithDefaults).
type Bounds struct {
	Turns              int
	TurnsPerTenant     int
	TurnsPerPrincipal  int
	Tokens             int
	TokensPerTenant    int
	TokensPerPrincipal int
	TokensPerTurn      int
}

// WithDefaults is b with its zero fields set to the defaults: 65536 turns
// and 262144 tokens in all; a quarter of those per tenant; per principal
// 1024 turns (the kernel's default bound on a principal's open turns) and
// 8192 tokens, or the tenant's share if smaller; 1024 tokens per turn, or
// the principal's share if smaller.
func (b Bounds) WithDefaults() Bounds {
	set := func(v *int, d int) {
		if *v == 0 {
			*v = max(d, 1)
		}
	}
	set(&b.Turns, 1<<16)
	set(&b.TurnsPerTenant, b.Turns/4)
	set(&b.TurnsPerPrincipal, min(1<<10, b.TurnsPerTenant))
	set(&b.Tokens, 1<<18)
	set(&b.TokensPerTenant, b.Tokens/4)
	set(&b.TokensPerPrincipal, min(1<<13, b.TokensPerTenant))
	set(&b.TokensPerTurn, min(1<<10, b.TokensPerPrincipal))
	return b
}

// DefaultBounds are the bounds a front takes when none are set.
func DefaultBounds() Bounds { return Bounds{}.WithDefaults() }

// ErrBounds is a Bounds that Validate refuses.
var ErrBounds = errors.New("mcpfront: bounds")

// Validate checks b with its defaults: every bound positive, a principal's
// share no larger than its tenant's, and a tenant's smaller than the
// total (so one tenant cannot fill the front).
func (b Bounds) Validate() error {
	d := b.WithDefaults()
	for _, v := range []int{d.Turns, d.TurnsPerTenant, d.TurnsPerPrincipal, d.Tokens, d.TokensPerTenant, d.TokensPerPrincipal, d.TokensPerTurn} {
		if v < 0 {
			return fmt.Errorf("%w must not be negative", ErrBounds)
		}
	}
	switch {
	case d.TurnsPerTenant >= d.Turns:
		return fmt.Errorf("%w: turns per tenant (%d) must be below the total (%d): one tenant must not fill the front", ErrBounds, d.TurnsPerTenant, d.Turns)
	case d.TokensPerTenant >= d.Tokens:
		return fmt.Errorf("%w: tokens per tenant (%d) must be below the total (%d): one tenant must not fill the front", ErrBounds, d.TokensPerTenant, d.Tokens)
	case d.TurnsPerPrincipal > d.TurnsPerTenant:
		return fmt.Errorf("%w: turns per principal (%d) must not exceed turns per tenant (%d)", ErrBounds, d.TurnsPerPrincipal, d.TurnsPerTenant)
	case d.TokensPerPrincipal > d.TokensPerTenant:
		return fmt.Errorf("%w: tokens per principal (%d) must not exceed tokens per tenant (%d)", ErrBounds, d.TokensPerPrincipal, d.TokensPerTenant)
	case d.TokensPerTurn > d.TokensPerPrincipal:
		return fmt.Errorf("%w: tokens per turn (%d) must not exceed tokens per principal (%d)", ErrBounds, d.TokensPerTurn, d.TokensPerPrincipal)
	}
	return nil
}

// usage is what one scope (the front, a tenant, a principal) holds.
type usage struct{ turns, tokens int }

// table is the front's turn entries and what each scope holds. It does no
// I/O and takes time as an input; the front guards it with its mutex.
// Invariants: every scope's usage is the sum over the entries in the
// table (tokens counted until pruned, expired or not); a scope with
// nothing held has no map entry, so the table's size is what its entries
// hold; no token held expires before nextSweep.
type table struct {
	b          Bounds
	turns      map[string]*turnEntry
	total      usage
	tenants    map[string]*usage
	principals map[string]*usage
	nextSweep  time.Time
	// forget is told of every token the table lets go (the front's
	// memory of verified tokens forgets it).
	forget func(tok string)
}

func newTable(b Bounds, forget func(tok string)) *table {
	return &table{b: b.WithDefaults(), turns: map[string]*turnEntry{}, tenants: map[string]*usage{}, principals: map[string]*usage{}, forget: forget}
}

// scopeKeys are the tenant's and the principal's keys (length-prefixed,
// so no two tenant/principal pairs share one).
func scopeKeys(tenant, principal string) (string, string) {
	return tenant, strconv.Itoa(len(tenant)) + ":" + tenant + principal
}

func (t *table) scope(m map[string]*usage, k string) *usage {
	u := m[k]
	if u == nil {
		u = &usage{}
		m[k] = u
	}
	return u
}

// account adds d to e's scopes (d negative: takes it away).
func (t *table) account(e *turnEntry, d usage) {
	for _, s := range []struct {
		m map[string]*usage
		k string
	}{{t.tenants, e.tenantKey}, {t.principals, e.principalKey}} {
		u := t.scope(s.m, s.k)
		u.turns += d.turns
		u.tokens += d.tokens
		if u.turns <= 0 && u.tokens <= 0 {
			delete(s.m, s.k)
		}
	}
	t.total.turns += d.turns
	t.total.tokens += d.tokens
}

// add puts a new entry e (no tokens yet) in the table, or refuses it
// overloaded when a turn bound of its scopes is reached even once expired
// tokens are let go. The caller gives e its first token (addToken), or
// drops it, before it lets go of the front's lock: a sweep takes out
// every entry with no token.
func (t *table) add(e *turnEntry, node string, now time.Time) error {
	over := func() error {
		switch {
		case t.total.turns >= t.b.Turns:
			return reason.New(reason.Overloaded, "the MCP front of node %s holds %d turns (mcp.max_turns)", node, t.total.turns)
		case t.usage(t.tenants, e.tenantKey).turns >= t.b.TurnsPerTenant:
			return reason.New(reason.Overloaded, "the MCP front of node %s holds %d turns of tenant %q (mcp.max_turns_per_tenant)", node, t.b.TurnsPerTenant, e.auth.Tenant)
		case t.usage(t.principals, e.principalKey).turns >= t.b.TurnsPerPrincipal:
			return reason.New(reason.Overloaded, "the MCP front of node %s holds %d turns of %s/%s (mcp.max_turns_per_principal)", node, t.b.TurnsPerPrincipal, e.auth.Tenant, e.auth.Principal)
		}
		return nil
	}
	if over() != nil {
		t.sweep(now, nil)
	}
	if err := over(); err != nil {
		return err
	}
	t.turns[e.id] = e
	t.account(e, usage{turns: 1})
	return nil
}

// usage is k's usage in m (zero when it holds nothing), without adding k.
func (t *table) usage(m map[string]*usage, k string) usage {
	if u := m[k]; u != nil {
		return *u
	}
	return usage{}
}

// addToken gives e, an entry in the table, the token m (id), or refuses
// it overloaded when a token bound of e's scopes is reached even once
// expired tokens are let go.
func (t *table) addToken(e *turnEntry, id string, m minted, node string, now time.Time) error {
	if len(e.tokens) >= t.b.TokensPerTurn {
		t.prune(e, now)
	}
	over := func() error {
		switch {
		case len(e.tokens) >= t.b.TokensPerTurn:
			return reason.New(reason.Overloaded, "turn %s has %d unexpired tokens (mcp.max_tokens_per_turn)", e.id, len(e.tokens))
		case t.total.tokens >= t.b.Tokens:
			return reason.New(reason.Overloaded, "the MCP front of node %s holds %d tokens (mcp.max_tokens)", node, t.total.tokens)
		case t.usage(t.tenants, e.tenantKey).tokens >= t.b.TokensPerTenant:
			return reason.New(reason.Overloaded, "the MCP front of node %s holds %d tokens of tenant %q (mcp.max_tokens_per_tenant)", node, t.b.TokensPerTenant, e.auth.Tenant)
		case t.usage(t.principals, e.principalKey).tokens >= t.b.TokensPerPrincipal:
			return reason.New(reason.Overloaded, "the MCP front of node %s holds %d tokens of %s/%s (mcp.max_tokens_per_principal)", node, t.b.TokensPerPrincipal, e.auth.Tenant, e.auth.Principal)
		}
		return nil
	}
	if over() != nil {
		t.sweep(now, e)
	}
	if err := over(); err != nil {
		return err
	}
	e.tokens[id] = m
	t.account(e, usage{tokens: 1})
	if t.nextSweep.IsZero() || m.expires.Before(t.nextSweep) {
		t.nextSweep = m.expires
	}
	return nil
}

// prune lets e's expired tokens go.
func (t *table) prune(e *turnEntry, now time.Time) {
	n := 0
	for id, m := range e.tokens {
		if !now.Before(m.expires) {
			delete(e.tokens, id)
			t.forget(m.tok)
			n++
		}
	}
	if n > 0 {
		t.account(e, usage{tokens: -n})
	}
}

// drop takes e out of the table (when e is the entry of its turn) and
// lets its tokens go. It reports whether e was there.
func (t *table) drop(e *turnEntry) bool {
	if t.turns[e.id] != e {
		return false
	}
	delete(t.turns, e.id)
	for _, m := range e.tokens {
		t.forget(m.tok)
	}
	t.account(e, usage{turns: -1, tokens: -len(e.tokens)})
	return true
}

// sweep lets every expired token go, and every entry left with none but
// keep (about to be given one), once a token may have expired
// (nextSweep); it sets nextSweep to the earliest expiry of those left.
func (t *table) sweep(now time.Time, keep *turnEntry) {
	if now.Before(t.nextSweep) {
		return
	}
	t.nextSweep = time.Time{}
	for _, e := range t.turns {
		t.prune(e, now)
		if len(e.tokens) == 0 && e != keep {
			t.drop(e)
			continue
		}
		for _, m := range e.tokens {
			if t.nextSweep.IsZero() || m.expires.Before(t.nextSweep) {
				t.nextSweep = m.expires
			}
		}
	}
}
