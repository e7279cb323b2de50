package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrForbidden is matched by every *ForbiddenError.
var ErrForbidden = errors.New("policy: outside the admin's scope")

// Scope is which keys of the policy an admin may read and change. A
// cluster admin (All) has every key. A tenant admin has the keys of its
// Tenants — their grants, credential bindings and approval rules — and
// no other: not another tenant's, and not a cluster-wide key (providers,
// identities), which serve or bind every tenant. The zero Scope has no
// key.
type Scope struct {
	All     bool
	Tenants []string
}

// Covers reports whether k is within s.
func (s Scope) Covers(k Key) bool {
	return s.All || k.Kind.tenanted() && slices.Contains(s.Tenants, k.Tenant)
}

// ForbiddenError is an operation refused for the admin's scope: Key is
// the key it was refused on.
type ForbiddenError struct {
	Op    string
	Key   Key
	Scope Scope
}

func (e *ForbiddenError) Error() string {
	what := "a cluster-wide key"
	if e.Key.Kind.tenanted() {
		what = "a key of tenant " + e.Key.Tenant
	}
	return fmt.Sprintf("%s: %s %s is %s; this admin changes only the grants, credentials and approvals of tenants %s",
		ErrForbidden, e.Op, e.Key, what, strings.Join(e.Scope.Tenants, ", "))
}

// Is makes errors.Is(err, ErrForbidden) match.
func (e *ForbiddenError) Is(target error) bool { return target == ErrForbidden }

// within returns the entries of es that s covers.
func (s Scope) within(es []Entry) []Entry {
	if s.All {
		return es
	}
	var out []Entry
	for _, e := range es {
		if s.Covers(e.Key) {
			out = append(out, e)
		}
	}
	return out
}

// firstOutside is the first key of d (in key order) s does not cover.
func (s Scope) firstOutside(d Document) (Key, bool, error) {
	items, err := d.Items()
	if err != nil {
		return Key{}, false, err
	}
	var out []Key
	for k := range items {
		if !s.Covers(k) {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return Key{}, false, nil
	}
	slices.SortFunc(out, func(a, b Key) int { return strings.Compare(a.String(), b.String()) })
	return out[0], true, nil
}

// ExportWithin is the part of the policy s covers as a document, with
// its entries.
func (s *Store) ExportWithin(ctx context.Context, sc Scope) (Document, []Entry, error) {
	es, err := s.List(ctx)
	if err != nil {
		return Document{}, nil, err
	}
	es = sc.within(es)
	items, _ := itemsOf(es)
	d, err := DocumentOf(items)
	return d, es, err
}

// DiffWithin lists what importing d into the part of the policy sc
// covers would change: the keys sc does not cover are neither compared
// nor removed. d naming such a key is refused (*ForbiddenError).
func (s *Store) DiffWithin(ctx context.Context, d Document, sc Scope) ([]Diff, error) {
	if k, outside, err := sc.firstOutside(d); err != nil {
		return nil, err
	} else if outside {
		return nil, &ForbiddenError{Op: OpDiff, Key: k, Scope: sc}
	}
	to, err := d.Items()
	if err != nil {
		return nil, err
	}
	es, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	from, revs := itemsOf(sc.within(es))
	return Compare(from, revs, to), nil
}

// ImportWithin makes the part of the policy sc covers hold d, as
// ImportSince does for the whole policy: the keys sc does not cover are
// left as they are, and the policy the import leaves is validated whole.
// d naming a key sc does not cover is refused (*ForbiddenError) and
// nothing is written.
func (s *Store) ImportWithin(ctx context.Context, d Document, since uint64, by string, sc Scope) ([]Diff, error) {
	if sc.All {
		return s.ImportSince(ctx, d, since, by)
	}
	if k, outside, err := sc.firstOutside(d); err != nil {
		return nil, err
	} else if outside {
		return nil, &ForbiddenError{Op: OpImport, Key: k, Scope: sc}
	}
	if err := s.unchangedSince(ctx, since); err != nil {
		return nil, err
	}
	changes, err := s.DiffWithin(ctx, d, sc)
	if err != nil {
		return nil, err
	}
	if err := s.check(ctx, changes); err != nil {
		return nil, err
	}
	return s.apply(ctx, changes, by)
}
