// Package identity is who may be on the bus, and as what.
//
// Every party connects to NATS as an authenticated identity with a role:
//
//   - node: runs the kernel, calls providers, writes the audit stream;
//   - runtime: an agent runtime; opens and drives turns for the tenants
//     (and optionally principals) it is bound to, and nothing else;
//   - provider: answers its own provider's subjects, nothing else;
//   - audit: reads the audit of the tenants it is bound to.
//
// The node never takes a caller's word for who it is. Runtimes live in
// NATS accounts of their own that import the node's turn subjects with
// a service import; the server stamps each request crossing that import with
// the caller's account in the Nats-Request-Info header, overwriting
// whatever the client put there, so the account a request arrives from is
// a fact the bus establishes (see docs/security.md for the choice and the
// alternatives). Audit readers live in accounts of their own too, which
// import only the JetStream subjects their role needs: a reply subject a
// reader names is replaced by the server on the import, so JetStream
// never answers onto a subject of the node's account, where the audit
// stream would store the answer. Nodes and providers are users of the
// node's account with subject permissions that confine them to their
// role.
//
// For the embedded server the package renders the accounts, users and
// permissions as nats-server configuration (ServerConfig) and keeps each
// identity's nkey seed in a file of its own (LoadOrCreateSeed). An external
// NATS cluster is configured by its operator to the same shape.
package identity

import (
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/sharedos/sharedos/audit"
)

// Role is what an identity may do.
type Role string

// The roles.
const (
	Node     Role = "node"
	Runtime  Role = "runtime"
	Provider Role = "provider"
	Audit    Role = "audit"
	// Admin changes policy (node policy): an account of its own whose
	// only subjects are the policy service's, which no other role has.
	// With no Tenants it is a cluster admin (every key); with Tenants a
	// tenant admin, confined to those tenants' grants, credentials and
	// approvals (docs/security.md, "Admins").
	Admin Role = "admin"
	// Approver decides the approval requests of its tenants (node
	// approvals): an account of its own whose only subjects are the
	// approvals service's and its tenants' request announcements, which
	// no other role has. Its Principals, if set, are the principals it is
	// itself ("tenant/principal"): where a rule separates duties, it
	// cannot decide their calls.
	Approver Role = "approver"
)

// AllTenants in Identity.Tenants binds an identity to every tenant.
const AllTenants = "*"

// Identity is one party on the bus.
type Identity struct {
	// Name identifies the identity: its seed file is <Name>.nk, a runtime's
	// NATS account is named after it, an audit reader's inbox prefix is
	// _INBOX_<Name>.
	Name string
	Role Role
	// Tenants a runtime may act for, an audit reader may read, or a
	// tenant admin may change the policy of; AllTenants for every tenant
	// (not for an admin: a cluster admin names none).
	Tenants []string
	// Principals, if set, narrows a runtime to these principals of its
	// tenants; each is "tenant/principal".
	Principals []string
	// Provider is a provider identity's provider id.
	Provider string
	// Credentials, if set, narrows a runtime to these credential profiles
	// of its tenants, each "tenant/profile"; a request naming another is
	// refused credential_forbidden even where the principal is bound to
	// it. (Which principal may use which profile is policy: the kernel's
	// authority.CredentialPolicy.)
	Credentials []string
	// SharesTurnsWith names the runtime identities that may attach to the
	// turns this one opens; nobody else may, whatever they know of a turn.
	SharesTurnsWith []string
}

// Errors.
var (
	// ErrInvalid is matched by every error Validate returns.
	ErrInvalid = errors.New("identity: invalid")
)

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// NodeAccount is the default name of the nodes' NATS account.
const NodeAccount = "SHAREDOS"

// Validate reports what is wrong with id.
func (id Identity) Validate() error {
	if !namePattern.MatchString(id.Name) {
		return fmt.Errorf("%w: name %q must match %s", ErrInvalid, id.Name, namePattern)
	}
	switch id.Role {
	case Node:
	case Runtime, Audit, Approver:
		if len(id.Tenants) == 0 {
			return fmt.Errorf("%w: %s %s: tenants are required (%q for all)", ErrInvalid, id.Role, id.Name, AllTenants)
		}
		for _, t := range id.Tenants {
			if t == AllTenants {
				continue
			}
			if err := audit.CheckTenant(t); err != nil {
				return fmt.Errorf("%w: %s: %w", ErrInvalid, id.Name, err)
			}
		}
	case Admin:
		// No tenants: a cluster admin (the whole policy); tenants: a
		// tenant admin (their grants, credentials and approvals only).
		for _, t := range id.Tenants {
			if t == AllTenants {
				return fmt.Errorf("%w: admin %s: a cluster admin is bound to no tenants (leave tenants out); a tenant admin names its tenants", ErrInvalid, id.Name)
			}
			if err := audit.CheckTenant(t); err != nil {
				return fmt.Errorf("%w: %s: %w", ErrInvalid, id.Name, err)
			}
		}
	case Provider:
		if !namePattern.MatchString(id.Provider) {
			return fmt.Errorf("%w: provider identity %s: provider %q is not a provider id", ErrInvalid, id.Name, id.Provider)
		}
	default:
		return fmt.Errorf("%w: %s: role %q must be node, runtime, provider, audit, admin or approver", ErrInvalid, id.Name, id.Role)
	}
	if id.Role != Provider && id.Provider != "" {
		return fmt.Errorf("%w: %s: provider is only for provider identities", ErrInvalid, id.Name)
	}
	if id.Role != Runtime && id.Role != Approver && len(id.Principals) > 0 {
		return fmt.Errorf("%w: %s: principals narrow only runtime identities (and name an approver's own)", ErrInvalid, id.Name)
	}
	if id.Role != Runtime && (len(id.Credentials) > 0 || len(id.SharesTurnsWith) > 0) {
		return fmt.Errorf("%w: %s: credentials and shares_turns_with are for runtime identities only", ErrInvalid, id.Name)
	}
	for _, c := range id.Credentials {
		t, _, ok := splitPrincipal(c)
		if !ok {
			return fmt.Errorf("%w: %s: credential %q must be tenant/profile", ErrInvalid, id.Name, c)
		}
		if err := audit.CheckTenant(t); err != nil {
			return fmt.Errorf("%w: %s: credential %q: %w", ErrInvalid, id.Name, c, err)
		}
		if !id.tenant(t) {
			return fmt.Errorf("%w: %s: credential %q is of a tenant the identity is not bound to", ErrInvalid, id.Name, c)
		}
	}
	for _, p := range id.Principals {
		t, _, ok := splitPrincipal(p)
		if !ok {
			return fmt.Errorf("%w: %s: principal %q must be tenant/principal", ErrInvalid, id.Name, p)
		}
		if err := audit.CheckTenant(t); err != nil {
			return fmt.Errorf("%w: %s: principal %q: %w", ErrInvalid, id.Name, p, err)
		}
		if !id.tenant(t) {
			return fmt.Errorf("%w: %s: principal %q is of a tenant the identity is not bound to", ErrInvalid, id.Name, p)
		}
	}
	return nil
}

func splitPrincipal(p string) (tenant, principal string, ok bool) {
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			return p[:i], p[i+1:], i > 0 && i < len(p)-1
		}
	}
	return "", "", false
}

// Approves reports whether id is an approver of tenant.
func (id Identity) Approves(tenant string) bool { return id.Role == Approver && id.tenant(tenant) }

// AllTenantsBound reports whether id is bound to every tenant.
func (id Identity) AllTenantsBound() bool { return slices.Contains(id.Tenants, AllTenants) }

// ClusterAdmin reports whether id is an admin of the whole policy (an
// admin bound to no tenants), not a tenant admin.
func (id Identity) ClusterAdmin() bool { return id.Role == Admin && len(id.Tenants) == 0 }

func (id Identity) tenant(t string) bool {
	return id.AllTenantsBound() || slices.Contains(id.Tenants, t)
}

// Permits reports whether id may act for principal of tenant. A node may
// act for anyone (it is the kernel); a runtime for the principals of its
// tenants (only those listed, if Principals is set); nobody else for
// anyone.
func (id Identity) Permits(tenant, principal string) bool {
	switch id.Role {
	case Node:
		return true
	case Runtime:
		if !id.tenant(tenant) {
			return false
		}
		if len(id.Principals) == 0 {
			return true
		}
		return slices.Contains(id.Principals, tenant+"/"+principal)
	}
	return false
}

// PermitsCredential reports whether id may name credential profile of
// tenant: the empty profile always; a node any; a runtime those of
// Credentials when it is narrowed, else any (the kernel's policy still
// decides which principal may use which); nobody else any.
func (id Identity) PermitsCredential(tenant, profile string) bool {
	if profile == "" {
		return true
	}
	switch id.Role {
	case Node:
		return true
	case Runtime:
		return len(id.Credentials) == 0 || slices.Contains(id.Credentials, tenant+"/"+profile)
	}
	return false
}

// SharesTurns reports whether caller may attach to a turn opener opened:
// the opener itself, or a runtime the opener lists in SharesTurnsWith.
// Unknown identities share nothing.
func (s *Set) SharesTurns(opener, caller string) bool {
	if opener == caller {
		return true
	}
	id, ok := s.Lookup(opener)
	return ok && slices.Contains(id.SharesTurnsWith, caller)
}

// Set is the identities of a node, looked up by name. Safe for concurrent
// reads; never modified after NewSet.
type Set struct {
	byName map[string]*Identity
	list   []Identity
}

// NewSet validates ids (names unique) and indexes them. (A runtime
// named like the nodes' account is refused by ServerConfig, which knows
// that account's name.)
func NewSet(ids []Identity) (*Set, error) {
	s := &Set{byName: make(map[string]*Identity, len(ids)), list: slices.Clone(ids)}
	var errs []error
	for i := range s.list {
		id := &s.list[i]
		if err := id.Validate(); err != nil {
			errs = append(errs, err)
		} else if _, dup := s.byName[id.Name]; dup {
			errs = append(errs, fmt.Errorf("%w: %s listed twice", ErrInvalid, id.Name))
		}
		s.byName[id.Name] = id
	}
	for _, id := range s.list {
		for _, other := range id.SharesTurnsWith {
			if o, ok := s.byName[other]; !ok || o.Role != Runtime {
				errs = append(errs, fmt.Errorf("%w: %s: shares_turns_with names %q, which is not a runtime identity", ErrInvalid, id.Name, other))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// Lookup returns the identity named name.
func (s *Set) Lookup(name string) (*Identity, bool) {
	if s == nil {
		return nil, false
	}
	id, ok := s.byName[name]
	return id, ok
}

// All returns the identities in configuration order.
func (s *Set) All() []Identity { return slices.Clone(s.list) }

// OfRole returns the identities of role r.
func (s *Set) OfRole(r Role) []Identity {
	var out []Identity
	for _, id := range s.list {
		if id.Role == r {
			out = append(out, id)
		}
	}
	return out
}
