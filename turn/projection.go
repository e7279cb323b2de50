package turn

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/projection"
	"github.com/sharedos/sharedos/reason"
)

// ProjectionRequest asks for the turn's visible catalogue as one model
// API's profile shows it (docs/model-facing.md): every tool whose
// namespace is enabled and whose capability a grant valid now covers, in
// the registry's order — or, with a Query, the K of them that rank best
// for it. Tools that cannot be represented, that pass the profile's
// request limits or the token Budget are left out and reported, never
// weakened or cut.
type ProjectionRequest struct {
	Profile projection.Profile
	// Budget, when positive, bounds the listing's tokens.
	Budget int
	// Encoding is the OpenAI encoding tokens are counted in ("" for
	// o200k_base).
	Encoding string
	// Query, when set, makes this a search; K bounds its result (0: every
	// tool that matches).
	Query string
	K     int
	// Transport is recorded on the listing (audit.Event.Transport).
	Transport string
	// MaxBytes, when positive, bounds the listing's bytes: a larger one
	// is refused invalid_request before anything is recorded, never cut —
	// a budget or a search is how to send less.
	MaxBytes int
}

// MaxQueryBytes bounds a search's query.
const MaxQueryBytes = 4 << 10

// profileShow is what a turn showed one model profile: the names it
// assigned once over the whole held registry (stable for the turn), and
// which of them a listing or search has actually shown (only those can
// be called).
type profileShow struct {
	names []string          // by registry index
	shown map[string]string // model-facing name -> turn alias
}

// Project answers a model-facing listing (or search) at now and records
// it as tool.catalog.listed: the turn's aliases of the tools sent, the
// profile, the projection_hash of the exact bytes, the model-facing names
// and what was left out. Each call is judged at its own instant, like a
// listing; the same held catalogue, instant and request give the same
// bytes.
func (m *Machine) Project(now time.Time, r ProjectionRequest) (projection.Projection, *audit.Record, error) {
	now = m.at(now)
	if err := m.ready(); err != nil {
		return projection.Projection{}, nil, err
	}
	defer m.done()
	if !r.Profile.Valid() {
		return projection.Projection{}, nil, reason.New(reason.InvalidRequest, "unknown model profile %q (one of %v)", r.Profile, projection.Profiles())
	}
	if len(r.Query) > MaxQueryBytes || r.K < 0 || r.Budget < 0 {
		return projection.Projection{}, nil, reason.New(reason.InvalidRequest, "a query is at most %d bytes; k and budget are not negative", MaxQueryBytes)
	}
	if err := m.policyInForce(now); err != nil {
		return projection.Projection{}, nil, err
	}
	show, err := m.show(r.Profile)
	if err != nil {
		return projection.Projection{}, nil, reason.New(reason.Internal, "naming the catalogue for %s: %v", r.Profile, err)
	}
	at := m.authInstant(now)
	var visible []projection.Listed
	for i := range m.registry.Len() {
		t, alias := m.registry.At(i)
		if m.nsEnabled(t.Namespace) && m.auth.CanDiscover(t.Capability, at) {
			visible = append(visible, projection.Listed{Alias: alias, Tool: t, ModelName: show.names[i]})
		}
	}
	opts := projection.Options{Budget: r.Budget, Encoding: r.Encoding, Cache: m.cfg.Projections}
	var p projection.Projection
	if r.Query != "" {
		p, err = projection.Search(visible, r.Query, r.K, r.Profile, opts)
	} else {
		p, err = projection.Project(visible, r.Profile, opts)
	}
	if err != nil {
		return projection.Projection{}, nil, reason.New(reason.InvalidRequest, "%v", err)
	}
	if r.MaxBytes > 0 && len(p.Listing) > r.MaxBytes {
		return projection.Projection{}, nil, reason.New(reason.InvalidRequest, "the %s listing is %d bytes, more than a reply carries (%d): give a token budget or search", r.Profile, len(p.Listing), r.MaxBytes)
	}
	ev := &audit.Event{Type: audit.CatalogListed, CatalogHash: m.registry.Hash(), Namespaces: m.ns, Transport: r.Transport,
		Projection: &audit.Projection{Profile: string(r.Profile), Hash: p.Hash, Tokens: p.Tokens, TokenMethod: p.TokenMethod, K: r.K}}
	if r.Query != "" {
		sum := sha256.Sum256([]byte(r.Query))
		ev.Projection.QueryHash = hex.EncodeToString(sum[:])
	}
	for _, t := range p.Tools {
		alias := m.registry.Alias(t.Identity)
		ev.Listed = append(ev.Listed, alias)
		ev.Projection.Names = append(ev.Projection.Names, t.Alias)
		show.shown[t.Alias] = alias
	}
	left := func(id catalog.Identity, why string) {
		ev.Projection.LeftOut = append(ev.Projection.LeftOut, audit.LeftOut{Alias: m.registry.Alias(id), Why: why})
	}
	for _, u := range p.Unrepresentable {
		left(u.Tool, "unrepresentable")
	}
	for _, id := range p.OverLimit {
		left(id, "over_limit")
	}
	for _, id := range p.OverBudget {
		left(id, "over_budget")
	}
	if m.cfg.Switches.NoProjectionRecord {
		ev.Projection = nil
	}
	return p, m.record(now, ev), nil
}

// shownAlias returns the turn alias of the tool this turn showed profile
// as name.
func (m *Machine) shownAlias(profile projection.Profile, name string) (string, bool) {
	show := m.shows[profile]
	if show == nil {
		return "", false
	}
	alias, ok := show.shown[name]
	return alias, ok
}

// show returns the turn's names for profile, assigning them over the
// whole held registry the first time.
func (m *Machine) show(p projection.Profile) (*profileShow, error) {
	if s := m.shows[p]; s != nil {
		return s, nil
	}
	all := make([]projection.Listed, m.registry.Len())
	for i := range all {
		t, alias := m.registry.At(i)
		all[i] = projection.Listed{Alias: alias, Tool: t}
	}
	names, err := projection.Aliases(all, p)
	if err != nil {
		return nil, err
	}
	if m.shows == nil {
		m.shows = map[projection.Profile]*profileShow{}
	}
	s := &profileShow{names: names, shown: map[string]string{}}
	m.shows[p] = s
	return s, nil
}
