package approval

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gowebpki/jcs"

	"github.com/sharedos/sharedos/authority"
)

// DefaultExpiry is how long a request waits for a decision, and an
// approval for its call, when a rule does not say.
const DefaultExpiry = 15 * time.Minute

// MaxExpiry bounds a rule's expiry.
const MaxExpiry = 7 * 24 * time.Hour

// ErrInvalidRule wraps every error Compile returns.
var ErrInvalidRule = errors.New("approval: invalid rule")

// RuleSpec is a rule as policy writes it (cluster.yaml's approvals
// section, a key approvals.<tenant>.<name> of the policy store).
type RuleSpec struct {
	Tenant string
	Name   string
	// Capability, when set, is a capability pattern the tool's capability
	// must match ("calendar.events.*").
	Capability string
	// Provider and Tool, when set, name the tool's provider and name.
	Provider, Tool string
	// Annotations, when set, must each equal the tool's annotation of the
	// same key (JSON values compared canonically). They are the
	// provider's word about its tool, so a rule with annotations must
	// name Provider: the operator trusts that provider's annotations.
	Annotations map[string]any
	// Expiry is how long a request waits and an approval stays usable;
	// 0: DefaultExpiry.
	Expiry time.Duration
	// SeparateDuties refuses an approver whose identity names the
	// call's principal (identities[].principals) as its own.
	SeparateDuties bool
}

// Rule is a compiled RuleSpec. Immutable.
type Rule struct {
	Tenant, Name   string
	capability     authority.Pattern
	hasCapability  bool
	Provider, Tool string
	annotations    map[string][]byte // canonical JSON per key
	Expiry         time.Duration
	SeparateDuties bool
}

// Compile checks s and compiles it.
func Compile(s RuleSpec) (Rule, error) {
	r := Rule{Tenant: s.Tenant, Name: s.Name, Provider: s.Provider, Tool: s.Tool, Expiry: s.Expiry, SeparateDuties: s.SeparateDuties}
	fail := func(format string, args ...any) (Rule, error) {
		return Rule{}, fmt.Errorf("%w: %s/%s: %s", ErrInvalidRule, s.Tenant, s.Name, fmt.Sprintf(format, args...))
	}
	if s.Tenant == "" || !plainName(s.Name) {
		return fail("a tenant and a name of [A-Za-z0-9_-] (at most 64) are required")
	}
	if s.Capability != "" {
		p, err := authority.ParseCapabilityPattern(s.Capability)
		if err != nil {
			return fail("capability: %v", err)
		}
		r.capability, r.hasCapability = p, true
	}
	if len(s.Annotations) > 0 {
		if s.Provider == "" {
			return fail("annotations are the provider's word about its tools: a rule matching them must name the provider it trusts")
		}
		r.annotations = make(map[string][]byte, len(s.Annotations))
		for k, v := range s.Annotations {
			b, err := canonicalJSON(v)
			if err != nil {
				return fail("annotation %q: %v", k, err)
			}
			r.annotations[k] = b
		}
	}
	if s.Expiry < 0 || s.Expiry > MaxExpiry {
		return fail("expiry %s must be between 0 (the default, %s) and %s", s.Expiry, DefaultExpiry, MaxExpiry)
	}
	if r.Expiry == 0 {
		r.Expiry = DefaultExpiry
	}
	return r, nil
}

func plainName(s string) bool {
	if s == "" || len(s) > 64 {
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

func canonicalJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return jcs.Transform(b)
}

// Subject is what a rule is matched against: one tool of a turn's held
// catalogue, called for a tenant.
type Subject struct {
	Tenant, Provider, Tool, Capability string
	// Annotations are the tool's canonical annotations (a JSON object).
	Annotations json.RawMessage
}

// Matches reports whether r names calls of s.
func (r *Rule) Matches(s Subject) bool {
	if r.Tenant != s.Tenant || r.Provider != "" && r.Provider != s.Provider || r.Tool != "" && r.Tool != s.Tool {
		return false
	}
	if r.hasCapability && !r.capability.Match(s.Capability) {
		return false
	}
	if len(r.annotations) == 0 {
		return true
	}
	var anns map[string]json.RawMessage
	if err := json.Unmarshal(s.Annotations, &anns); err != nil {
		return false
	}
	for k, want := range r.annotations {
		got, ok := anns[k]
		if !ok {
			return false
		}
		if c, err := jcs.Transform(got); err != nil || string(c) != string(want) {
			return false
		}
	}
	return true
}

// Rules is a set of compiled rules, by tenant, each tenant's in name
// order. Immutable; the zero value (and nil) names no call.
type Rules struct {
	byTenant map[string][]Rule
}

// NewRules compiles specs; two rules of one tenant with one name are an
// error.
func NewRules(specs []RuleSpec) (*Rules, error) {
	rs := &Rules{byTenant: map[string][]Rule{}}
	var errs []error
	for _, s := range specs {
		r, err := Compile(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if slices.ContainsFunc(rs.byTenant[r.Tenant], func(o Rule) bool { return o.Name == r.Name }) {
			errs = append(errs, fmt.Errorf("%w: %s/%s listed twice", ErrInvalidRule, r.Tenant, r.Name))
			continue
		}
		rs.byTenant[r.Tenant] = append(rs.byTenant[r.Tenant], r)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, l := range rs.byTenant {
		slices.SortFunc(l, func(a, b Rule) int { return strings.Compare(a.Name, b.Name) })
	}
	return rs, nil
}

// Match returns the first rule (in name order) of s's tenant that names
// s, if any.
func (rs *Rules) Match(s Subject) (Rule, bool) {
	if rs == nil {
		return Rule{}, false
	}
	for i := range rs.byTenant[s.Tenant] {
		if r := &rs.byTenant[s.Tenant][i]; r.Matches(s) {
			return *r, true
		}
	}
	return Rule{}, false
}

// Len is the number of rules.
func (rs *Rules) Len() int {
	if rs == nil {
		return 0
	}
	n := 0
	for _, l := range rs.byTenant {
		n += len(l)
	}
	return n
}

// Live is the rules in force, replaced whole as the policy store reports
// changes; every decision reads the rules current at its instant. Safe
// for concurrent use; readers never block. The zero value names no call.
type Live struct {
	mu    sync.Mutex
	rules atomic.Pointer[Rules]
}

// NewLive returns a Live holding specs.
func NewLive(specs []RuleSpec) (*Live, error) {
	l := &Live{}
	return l, l.Replace(specs)
}

// Replace swaps in specs; nothing changes when they do not compile.
func (l *Live) Replace(specs []RuleSpec) error {
	rs, err := NewRules(specs)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.rules.Store(rs)
	l.mu.Unlock()
	return nil
}

// Rules returns the rules in force (nil for none).
func (l *Live) Rules() *Rules {
	if l == nil {
		return nil
	}
	return l.rules.Load()
}
