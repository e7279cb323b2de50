package authority

import (
	"context"
	"fmt"
	"time"
)

// Grant lets a principal use the capabilities its capability pattern covers
// on the resources its resource pattern covers, within a validity window.
type Grant struct {
	ID         string
	Capability Pattern
	Resource   Pattern
	// NotBefore and ExpiresAt bound the window [NotBefore, ExpiresAt).
	// A zero value leaves that side open.
	NotBefore time.Time
	ExpiresAt time.Time
}

// GrantSpec is the textual form of a grant, as configured.
type GrantSpec struct {
	ID         string    `yaml:"id" json:"id"`
	Capability string    `yaml:"capability" json:"capability"`
	Resource   string    `yaml:"resource" json:"resource"`
	NotBefore  time.Time `yaml:"not_before,omitempty" json:"not_before,omitzero"`
	ExpiresAt  time.Time `yaml:"expires_at,omitempty" json:"expires_at,omitzero"`
}

// Compile parses the spec's patterns and checks its window.
func (s GrantSpec) Compile() (Grant, error) {
	c, err := ParseCapabilityPattern(s.Capability)
	if err != nil {
		return Grant{}, fmt.Errorf("grant %q: %w", s.ID, err)
	}
	r, err := ParseResourcePattern(s.Resource)
	if err != nil {
		return Grant{}, fmt.Errorf("grant %q: %w", s.ID, err)
	}
	if !s.NotBefore.IsZero() && !s.ExpiresAt.IsZero() && !s.ExpiresAt.After(s.NotBefore) {
		return Grant{}, fmt.Errorf("grant %q: expires_at %s is not after not_before %s", s.ID, s.ExpiresAt, s.NotBefore)
	}
	return Grant{ID: s.ID, Capability: c, Resource: r, NotBefore: s.NotBefore, ExpiresAt: s.ExpiresAt}, nil
}

// ValidAt reports whether the grant's window contains now.
func (g *Grant) ValidAt(now time.Time) bool {
	if !g.NotBefore.IsZero() && now.Before(g.NotBefore) {
		return false
	}
	return g.ExpiresAt.IsZero() || now.Before(g.ExpiresAt)
}

// Authority is a principal's grants, resolved once for a turn. It is
// immutable and safe for concurrent use; its methods take the operation's
// instant so validity is always judged live.
type Authority struct {
	grants []Grant
	// live, when set, judges at each decision whether a held grant is
	// still in force and whether the turn's credential profile is still
	// bound (Live); who and profile are the turn's.
	live    *Live
	who     [2]string
	profile string
}

// NewAuthority returns an Authority over grants (copied).
func NewAuthority(grants []Grant) Authority {
	return Authority{grants: append([]Grant(nil), grants...)}
}

// Grants returns the grants (do not modify).
func (a Authority) Grants() []Grant { return a.grants }

// Held returns a without live validity: the grants judged only on the
// windows they had at resolution (the conformance suite's proof of the
// row that depends on live validity).
func (a Authority) Held() Authority { return Authority{grants: a.grants} }

// IsLive reports whether a's grants are judged against live policy.
func (a Authority) IsLive() bool { return a.live != nil }

// Stale reports whether a's live policy has gone unconfirmed for longer
// than its staleness bound at now: a decision then cannot tell whether a
// held grant was revoked, and is refused policy_stale. Never true for an
// Authority without live policy.
func (a Authority) Stale(now time.Time) bool { return a.live != nil && a.live.Stale(now) }

// CredentialInForce reports whether the turn's credential profile is still
// bound to its principal under live policy (always true without it: the
// binding was checked when the turn opened).
func (a Authority) CredentialInForce() bool {
	return a.live == nil || a.live.PermitsCredential(a.who[0], a.who[1], a.profile)
}

func (a Authority) valid(g *Grant, now time.Time) bool {
	return g.ValidAt(now) && (a.live == nil || a.live.inForce(a.who, g, now))
}

// CanDiscover reports whether some grant valid at now covers capability.
// A tool is shown only if its capability is discoverable.
func (a Authority) CanDiscover(capability string, now time.Time) bool {
	for i := range a.grants {
		g := &a.grants[i]
		if g.Capability.Match(capability) && a.valid(g, now) {
			return true
		}
	}
	return false
}

// CanInvoke returns the id of a grant valid at now that covers both the
// capability and the resource, and whether one exists.
func (a Authority) CanInvoke(capability, resource string, now time.Time) (string, bool) {
	for i := range a.grants {
		g := &a.grants[i]
		if g.Capability.Match(capability) && g.Resource.Match(resource) && a.valid(g, now) {
			return g.ID, true
		}
	}
	return "", false
}

// Source resolves a principal's authority. Resolve is called once per turn,
// off the turn's mailbox, and may be called concurrently for different
// turns. It must honour ctx and return an error (not an empty Authority)
// when it cannot answer; an unknown principal is an empty Authority.
type Source interface {
	Resolve(ctx context.Context, access AccessContext) (Authority, error)
}

// StaticSource serves grants from configuration, keyed by tenant and principal.
type StaticSource struct {
	byPrincipal map[[2]string][]Grant
}

// NewStaticSource compiles the configured grants, keyed by (tenant, principal).
func NewStaticSource(grants map[[2]string][]GrantSpec) (*StaticSource, error) {
	s := &StaticSource{byPrincipal: make(map[[2]string][]Grant, len(grants))}
	for who, specs := range grants {
		for _, spec := range specs {
			g, err := spec.Compile()
			if err != nil {
				return nil, fmt.Errorf("tenant %q principal %q: %w", who[0], who[1], err)
			}
			s.byPrincipal[who] = append(s.byPrincipal[who], g)
		}
	}
	return s, nil
}

// Resolve returns the principal's grants. It never blocks.
func (s *StaticSource) Resolve(_ context.Context, access AccessContext) (Authority, error) {
	return Authority{grants: s.byPrincipal[[2]string{access.Tenant, access.Principal}]}, nil
}
