package authority

import (
	"fmt"
	"regexp"
	"slices"
)

// ProfilePattern is what a credential profile's name matches: a stable,
// non-secret id.
var ProfilePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$`)

// CredentialPolicy says which credential profiles a principal may act
// with. A profile names secrets a provider holds for a tenant (an MCP
// server's bearer token, an OAuth grant), so naming one is asking for
// authority: the kernel refuses to open a turn, or run an operation of
// one, whose AccessContext.CredentialProfile the policy does not permit
// for its tenant and principal. The empty profile (no credential) is
// always permitted. Implementations must be safe for concurrent use and
// must not block.
type CredentialPolicy interface {
	PermitsCredential(tenant, principal, profile string) bool
}

// CredentialBinding binds one credential profile of a tenant to the
// principals that may use it: every principal of the tenant when
// Principals is empty.
type CredentialBinding struct {
	Tenant     string
	Profile    string
	Principals []string
}

// StaticCredentials is a CredentialPolicy from configuration. Profiles
// are the tenant's own: the same profile name in two tenants is two
// profiles, and a binding in one never permits the other.
type StaticCredentials struct {
	// byProfile maps (tenant, profile) to the principals bound to it; an
	// empty, non-nil slice means every principal of the tenant.
	byProfile map[[2]string][]string
}

// NewStaticCredentials indexes bindings; a (tenant, profile) bound twice
// is refused, so that no binding silently widens another.
func NewStaticCredentials(bindings []CredentialBinding) (*StaticCredentials, error) {
	s := &StaticCredentials{byProfile: make(map[[2]string][]string, len(bindings))}
	for _, b := range bindings {
		if b.Tenant == "" || !ProfilePattern.MatchString(b.Profile) {
			return nil, fmt.Errorf("authority: a credential binding needs a tenant and a profile matching %s", ProfilePattern)
		}
		k := [2]string{b.Tenant, b.Profile}
		if _, dup := s.byProfile[k]; dup {
			return nil, fmt.Errorf("authority: credential profile %s/%s is bound twice", b.Tenant, b.Profile)
		}
		s.byProfile[k] = append([]string{}, b.Principals...)
	}
	return s, nil
}

// PermitsCredential reports whether principal of tenant may act with
// profile. A nil *StaticCredentials permits only the empty profile.
func (s *StaticCredentials) PermitsCredential(tenant, principal, profile string) bool {
	if profile == "" {
		return true
	}
	if s == nil {
		return false
	}
	ps, ok := s.byProfile[[2]string{tenant, profile}]
	if !ok {
		return false
	}
	return len(ps) == 0 || slices.Contains(ps, principal)
}

// AnyCredential is the CredentialPolicy of an embedder that is its own
// authority over the contexts it builds (in-process use, tests): every
// profile is permitted. Never the policy of a node that serves callers
// it does not control.
type AnyCredential struct{}

// PermitsCredential permits every profile.
func (AnyCredential) PermitsCredential(string, string, string) bool { return true }
