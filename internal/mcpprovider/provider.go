package mcpprovider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/internal/oauth"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/reason"
)

// Options are what the configuration does not say; nil means defaults.
type Options struct {
	Logger *slog.Logger
	// Now is the clock freshness is measured on (default time.Now).
	Now func() time.Time
	// Memory returns the in-process servers a "memory" transport names.
	// The provider connects to each over mcp.NewInMemoryTransports.
	Memory func(name string) (*mcp.Server, bool)
	// Dial, when set, replaces how a profile's transport is made (tests
	// drive fake servers through it); the provider still tees it.
	Dial func(ctx context.Context, profile string) (mcp.Transport, error)
	// HTTPTransport is the base of HTTP sessions (default a clone of
	// http.DefaultTransport).
	HTTPTransport http.RoundTripper
	// Authority, when set, gives each tool's capability and requirement
	// instead of the config's templates (an embedder's own mapping; the
	// conformance harness reads them from the tool's _meta). raw is the
	// tool's JSON as the server sent it; ok=false refuses the tool.
	Authority func(name string, raw json.RawMessage) (capability, requirement string, ok bool)
	// OAuth holds the grants of the server's oauth credential profiles
	// (the node's OAuth store); without it such a profile is auth_required.
	OAuth *oauth.Manager
	// Tracer, if set, records a client span per tools/call (trace.go);
	// with or without it, a call's trace context goes to the server in
	// params._meta.
	Tracer trace.Tracer
}

// Provider serves one MCP server's tools as a providers.ContextToolProvider.
// Safe for concurrent use: Catalog and Invoke may be called for many turns
// at once; each returns by its ctx's deadline. Close stops it.
type Provider struct {
	id   string
	cfg  Config
	opts Options
	log  *slog.Logger
	norm *normalizer

	bg     context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	profiles map[string]*profile
	// principals counts the per-principal profiles in profiles (bounded
	// by cfg.MaxPrincipals); swept is when idle ones were last let go.
	principals int
	swept      time.Time

	discoveries atomic.Int64
	// warmed is closed once every eager profile's first discovery ended
	// (at New for a lazy server).
	warmed chan struct{}
}

// profile is everything per (server, credential profile): its session,
// its snapshots and its discovery state. Guarded by its mu.
type profile struct {
	// key is "tenant/profile" ("" for an anonymous server): the cache's
	// and the logs' name for it. tenant and name are its parts.
	key          string
	tenant, name string
	cred         *Credential
	// OAuth profiles: whose grant (principal set when per principal) and
	// how it is obtained. grant is the identity of the grant the session
	// and snapshots were made with; bearer the access token last used.
	ref    oauth.Ref
	client *oauth.Client
	grant  string
	bearer string
	// perPrincipal: one principal's own grant, let go when idle (evict).
	// used is when it was last taken (guarded by Provider.mu); holds
	// counts those using it now (a catalogue, a call, a discovery), which
	// keep it from being let go.
	perPrincipal bool
	used         time.Time
	holds        atomic.Int32

	mu        sync.Mutex
	session   *mcp.ClientSession
	protocol  string
	gen       uint64 // bumped by every hint; a discovery begun before a hint lands stale
	state     State
	class     Class
	lastErr   string
	since     time.Time
	snaps     map[string]*snapshot // by who: "" for a public/legacy answer, tenant/principal for a private one
	lastScope string
	flights   map[string]*flight
	refused   []Refusal
	connects  int
}

// snapshot is one verified listing and when it stops being fresh.
type snapshot struct {
	key      CacheKey
	tools    []*Tool
	byName   map[string]*Tool
	refused  []Refusal
	received time.Time
	expires  time.Time
	// stale: a hint arrived, or a refresh failed; never executed
	// without a refresh.
	stale bool
}

// CacheKey is what a snapshot is cached under: never a secret.
type CacheKey struct {
	Server   string
	Profile  string
	Protocol string
	// Scope is the answer's cacheScope ("public", "private"; "" before
	// 2026-07-28); a private answer is also keyed by who asked.
	Scope string
	Who   string
	// Grant is an OAuth profile's grant identity (issuer, authorization
	// epoch, granted scopes; never a token): a re-authorization or a
	// change of scopes is another key, so its catalogue is discovered anew.
	Grant string
}

type flight struct {
	done chan struct{}
	who  string
	snap *snapshot
	err  error
}

// New returns the provider for server id. Nothing is dialled until the
// first catalogue or call.
func New(id string, cfg Config, opts *Options) (*Provider, error) {
	if err := cfg.Validate(id); err != nil {
		return nil, fmt.Errorf("mcp server %s: %w", id, err)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.HTTPTransport == nil {
		o.HTTPTransport = http.DefaultTransport.(*http.Transport).Clone()
	}
	cfg = cfg.withDefaults(id)
	p := &Provider{id: id, cfg: cfg, opts: o, log: o.Logger.With("mcp_server", id), norm: newNormalizer(id, cfg), profiles: map[string]*profile{}}
	p.norm.authority = o.Authority
	p.bg, p.cancel = context.WithCancel(context.Background())
	p.warmed = make(chan struct{})
	if cfg.Discovery != DiscoveryEager {
		close(p.warmed)
		return p, nil
	}
	accesses := cfg.eagerAccesses()
	var first sync.WaitGroup
	first.Add(len(accesses))
	for _, a := range accesses {
		p.goBg(func() { p.keepFresh(a, first.Done) })
	}
	p.goBg(func() { first.Wait(); close(p.warmed) })
	return p, nil
}

// Warmed is closed once an eager server's first discovery for each of
// its profiles has ended, in success or failure (each bounded by
// ConnectTimeout+ListTimeout); for a lazy server, at once.
func (p *Provider) Warmed() <-chan struct{} { return p.warmed }

// keepFresh is eager discovery for one profile: discover now, then again
// before the snapshot's TTL runs out; after a failure again after a
// backoff (1s doubling to 30s). firstDone is called once the first
// discovery ended. It returns when the provider closes.
func (p *Provider) keepFresh(access authority.AccessContext, firstDone func()) {
	backoff := time.Second
	for {
		snap, err := p.current(p.bg, access, false)
		if firstDone != nil {
			firstDone()
			firstDone = nil
		}
		wait := backoff
		if err != nil {
			backoff = min(2*backoff, 30*time.Second)
		} else {
			backoff = time.Second
			wait = p.refreshIn(snap)
		}
		t := time.NewTimer(wait)
		select {
		case <-p.bg.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// refreshIn is how long until an eager refresh of snap: at three
// quarters of its TTL (the configured ttl when the server gave 0), and
// at least a second from now.
func (p *Provider) refreshIn(snap *snapshot) time.Duration {
	ttl := snap.expires.Sub(snap.received)
	if ttl <= 0 {
		ttl = time.Duration(p.cfg.TTL)
	}
	return max(snap.received.Add(ttl*3/4).Sub(p.opts.Now()), time.Second)
}

// ID is the configured server id: the provider id, the tools' namespace
// and the prefix of their model-facing aliases.
func (p *Provider) ID() string { return p.id }

// Discoveries counts the tools/list listings taken from the server.
func (p *Provider) Discoveries() int64 { return p.discoveries.Load() }

// Close ends every session and waits for background work. Idempotent.
func (p *Provider) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	ps := make([]*profile, 0, len(p.profiles))
	for _, pr := range p.profiles {
		ps = append(ps, pr)
	}
	p.mu.Unlock()
	p.cancel()
	var errs []error
	for _, pr := range ps {
		pr.mu.Lock()
		s := pr.session
		pr.session = nil
		pr.mu.Unlock()
		if s != nil {
			if err := s.Close(); err != nil && !errors.Is(err, mcp.ErrConnectionClosed) {
				errs = append(errs, err)
			}
		}
	}
	p.wg.Wait()
	return errors.Join(errs...)
}

// profileOf returns the state of a configured credential profile, held
// (release with pr.holds.Add(-1)), or a failure for one that is not
// configured (its turns get nothing, and never another profile's tools).
func (p *Provider) profileOf(access authority.AccessContext) (*profile, error) {
	key, cred, ok := p.cfg.profileFor(access.Tenant, access.CredentialProfile)
	if !ok {
		if access.CredentialProfile == "" {
			return nil, p.coded(&failure{class: ClassPermissionDenied, msg: "the server needs a credential and the turn names no credential profile"})
		}
		return nil, p.coded(&failure{class: ClassPermissionDenied, msg: fmt.Sprintf("no credential is configured for profile %q", key)})
	}
	principal := ""
	if cred != nil && cred.OAuth != nil && cred.OAuth.perPrincipal() {
		if access.Principal == "" {
			return nil, p.coded(&failure{class: ClassAuthExpired, code: reason.AuthRequired, msg: fmt.Sprintf("profile %q is authorized per principal and the turn names none", key)})
		}
		principal = access.Principal
		key += "#" + principal // each principal's own grant, session and snapshots
	}
	now := p.opts.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, reason.New(reason.ProviderUnavailable, "mcp server %s: closed", p.id)
	}
	pr := p.profiles[key]
	if pr == nil || principal != "" && now.Sub(p.swept) >= time.Duration(p.cfg.PrincipalIdle)/8 {
		p.evictIdle(now, principal != "" && pr == nil)
	}
	if pr == nil {
		pr = &profile{key: key, cred: cred, state: StateUnknown, since: now, snaps: map[string]*snapshot{}, flights: map[string]*flight{}, perPrincipal: principal != ""}
		if pr.perPrincipal {
			p.principals++
		}
		if cred != nil {
			pr.tenant, pr.name = cred.Tenant, cred.Profile
		}
		if cred != nil && cred.OAuth != nil {
			o := cred.OAuth
			pr.ref = oauth.Ref{Server: p.id, Tenant: cred.Tenant, Profile: cred.Profile, Principal: principal}
			pr.client = &oauth.Client{Flow: o.Flow, ClientID: o.ClientID, Secret: o.clientSecret, Scopes: o.Scopes, Resource: p.cfg.URL, Issuer: o.Issuer}
		}
		p.profiles[key] = pr
	}
	pr.used = now
	pr.holds.Add(1)
	return pr, nil
}

// evictIdle lets go of the per-principal profiles unused for
// PrincipalIdle and, when adding is set and MaxPrincipals are held, of the
// least recently used until there is room: each is removed and its
// session closed (in the background), so its principal's next turn
// connects and discovers again. One in use is never let go, so the bound
// is exceeded only by as many as are in use at once. Caller holds p.mu.
func (p *Provider) evictIdle(now time.Time, adding bool) {
	p.swept = now
	idle := time.Duration(p.cfg.PrincipalIdle)
	for k, pr := range p.profiles {
		if pr.perPrincipal && pr.holds.Load() == 0 && now.Sub(pr.used) >= idle {
			p.evictLocked(k, pr)
		}
	}
	for adding && p.principals >= p.cfg.MaxPrincipals {
		var lru *profile
		for _, pr := range p.profiles {
			if pr.perPrincipal && pr.holds.Load() == 0 && (lru == nil || pr.used.Before(lru.used)) {
				lru = pr
			}
		}
		if lru == nil {
			return // every one is in use
		}
		p.evictLocked(lru.key, lru)
	}
}

// evictLocked removes pr (at key) and closes its session in the
// background; a holder still using it finishes on it. Caller holds p.mu.
func (p *Provider) evictLocked(key string, pr *profile) {
	delete(p.profiles, key)
	if pr.perPrincipal {
		p.principals--
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		pr.mu.Lock()
		cs := pr.session
		pr.session = nil
		for _, s := range pr.snaps {
			s.stale = true
		}
		pr.mu.Unlock()
		if cs != nil {
			_ = cs.Close()
		}
		p.log.Debug("mcp principal session let go", "profile", pr.key)
	}()
}

func whoOf(a authority.AccessContext) string { return a.Tenant + "/" + a.Principal }

// coded turns a failure into the kernel's reason error.
func (p *Provider) coded(err error) error {
	var re *reason.Error
	if errors.As(err, &re) {
		return err
	}
	c, msg := classified(err)
	return reason.New(codeOf(err, c), "mcp server %s: %s: %s", p.id, c, msg)
}

// codedIn is coded, naming the discovery state the failure left.
func (p *Provider) codedIn(st State, err error) error {
	c, msg := classified(err)
	return reason.New(codeOf(err, c), "mcp server %s: %s (%s): %s", p.id, st, c, msg)
}

// codeOf is a failure's own code when it has one, else its class's.
func codeOf(err error, c Class) reason.Code {
	var f *failure
	if errors.As(err, &f) && f.code != "" {
		return f.code
	}
	return c.code()
}

// classified is err's class and what to say of it: a failure's own
// message, else the error's, bounded.
func classified(err error) (Class, string) {
	var f *failure
	if errors.As(err, &f) {
		return f.class, f.msg
	}
	return classify(err, 0, 0), trimErr(err)
}

func trimErr(err error) string {
	s := err.Error()
	if len(s) > 512 {
		s = s[:512] + "…"
	}
	return s
}

// Catalog returns the server's tools for access's credential profile from
// a fresh snapshot, discovering first when there is none. An error means
// unknown, never empty: an empty list is a ready, empty catalogue.
func (p *Provider) Catalog(ctx context.Context, access authority.AccessContext) (providers.Catalog, error) {
	snap, err := p.current(ctx, access, false)
	if err != nil {
		return providers.Catalog{}, err
	}
	defs := make([]catalog.Definition, len(snap.tools))
	for i, t := range snap.tools {
		defs[i] = t.Definition
	}
	scope := "global"
	if snap.key.Scope == "private" {
		scope = "principal"
	}
	ttl := max(snap.expires.Sub(p.opts.Now()), 0)
	var refused []string
	for _, r := range snap.refused {
		refused = append(refused, r.Name+": "+r.Reason)
	}
	return providers.Catalog{Definitions: defs, Freshness: providers.Freshness{TTL: ttl, Scope: scope}, Refused: refused}, nil
}

// current returns a verified snapshot for access: the cached one when it
// is fresh (or, with allowExpired, merely expired — never hinted or
// failed), else a new discovery's.
func (p *Provider) current(ctx context.Context, access authority.AccessContext, allowExpired bool) (*snapshot, error) {
	pr, err := p.profileOf(access)
	if err != nil {
		return nil, err
	}
	defer pr.holds.Add(-1)
	// An OAuth profile's grant is checked first: one that cannot be used
	// serves nothing, not even a fresh snapshot, and one that changed
	// leaves no snapshot of the old one to serve.
	if _, err := p.authorize(ctx, pr); err != nil {
		pr.mu.Lock()
		st := pr.state
		pr.mu.Unlock()
		return nil, p.codedIn(st, err)
	}
	who := whoOf(access)
	for range 3 {
		now := p.opts.Now()
		pr.mu.Lock()
		snap := pr.lookup(who)
		if snap != nil && !snap.stale && (now.Before(snap.expires) || allowExpired) {
			pr.mu.Unlock()
			return snap, nil
		}
		if snap != nil && !snap.stale && pr.state == StateReady {
			pr.state, pr.since = next(pr.state, evExpire, ClassNone, true), now
		}
		fkey := ""
		if pr.lastScope == "private" {
			fkey = who
		}
		f := pr.flights[fkey]
		if f == nil {
			f = &flight{done: make(chan struct{}), who: who}
			pr.flights[fkey] = f
			pr.holds.Add(1) // the discovery's own, while this call's keeps pr in place
			if !p.goBg(func() { p.discover(pr, fkey, f) }) {
				pr.holds.Add(-1)
				delete(pr.flights, fkey)
				pr.mu.Unlock()
				return nil, reason.New(reason.ProviderUnavailable, "mcp server %s: closed", p.id)
			}
		}
		pr.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, reason.New(reason.ProviderTimeout, "mcp server %s: discovery did not finish before the deadline", p.id)
		}
		if f.err != nil {
			return nil, f.err
		}
		if f.snap.key.Scope != "private" || f.who == who {
			return f.snap, nil
		}
		// A private answer for someone else: ask again, as ourselves.
	}
	return nil, reason.New(reason.ProviderError, "mcp server %s: no answer for this principal", p.id)
}

// lookup finds who's snapshot: the public one, else who's private one.
// Caller holds pr.mu.
func (pr *profile) lookup(who string) *snapshot {
	if s := pr.snaps[""]; s != nil && s.key.Protocol == pr.protocol && s.key.Grant == pr.grant {
		return s
	}
	if s := pr.snaps[who]; s != nil && s.key.Protocol == pr.protocol && s.key.Grant == pr.grant {
		return s
	}
	return nil
}

// discover runs one authoritative discovery on the provider's own context
// (bounded by ListTimeout) so that a caller giving up does not waste it
// for the others waiting.
func (p *Provider) discover(pr *profile, fkey string, f *flight) {
	ctx, cancel := context.WithTimeout(p.bg, time.Duration(p.cfg.ConnectTimeout+p.cfg.ListTimeout))
	defer cancel()

	pr.mu.Lock()
	gen := pr.gen
	has := len(pr.snaps) > 0
	pr.state, pr.since = next(pr.state, evStart, ClassNone, has), p.opts.Now()
	pr.mu.Unlock()

	snap, err := p.list(ctx, pr, f.who)
	if errors.Is(err, errStaleSession) {
		snap, err = p.list(ctx, pr, f.who) // once more, on a new session
	}

	now := p.opts.Now()
	pr.mu.Lock()
	defer func() {
		delete(pr.flights, fkey)
		pr.mu.Unlock()
		pr.holds.Add(-1) // taken by current for this discovery; released before its waiters go on
		close(f.done)
	}()
	if err != nil {
		c := classify(err, 0, 0)
		pr.state, pr.class, pr.lastErr, pr.since = next(pr.state, evFailure, c, has), c, trimErr(err), now
		for _, s := range pr.snaps {
			s.stale = true // last-known: shown in status, never executed unverified
		}
		p.log.Warn("mcp discovery failed", "profile", pr.key, "class", string(c), "err", trimErr(err))
		f.err = p.codedIn(pr.state, err)
		return
	}
	if pr.gen != gen {
		snap.stale = true // a hint arrived meanwhile: this answer may predate it
	}
	pr.state, pr.class, pr.lastErr, pr.since = next(pr.state, evSuccess, ClassNone, true), ClassNone, "", now
	pr.lastScope = snap.key.Scope
	pr.refused = snap.refused
	logDrift(p.log, pr.key, pr.snaps[snap.key.Who], snap)
	if snap.key.Scope == "private" {
		delete(pr.snaps, "")
		pr.snaps[snap.key.Who] = snap
		evictPrivate(pr.snaps, now)
	} else {
		clear(pr.snaps)
		pr.snaps[""] = snap
	}
	if len(snap.refused) > 0 {
		p.log.Warn("mcp tools refused", "profile", pr.key, "refused", len(snap.refused), "first", snap.refused[0].Name+": "+snap.refused[0].Reason)
	}
	f.snap = snap
}

// list connects if needed and reads the whole tools/list, every page,
// through the SDK's iterator, hashing what the tee captured.
func (p *Provider) list(ctx context.Context, pr *profile, who string) (*snapshot, error) {
	snap, err := p.listOnce(ctx, pr, who)
	if tokenRefused(pr, err) && ctx.Err() == nil {
		p.refreshBearer(ctx, pr)
		snap, err = p.listOnce(ctx, pr, who) // once more, with a refreshed token
	}
	return snap, err
}

// tokenRefused: an OAuth profile's server answered 401 to a token its
// grant held valid (revoked, or the clocks disagree) — worth one refresh.
// Failures of the grant itself carry their own code and are final.
func tokenRefused(pr *profile, err error) bool {
	var f *failure
	return pr.client != nil && errors.As(err, &f) && f.class == ClassAuthExpired && (f.code == "" || f.retry)
}

// refreshBearer forgets the access token the server refused and the
// session that carried it; the next authorize refreshes.
func (p *Provider) refreshBearer(ctx context.Context, pr *profile) {
	pr.mu.Lock()
	bearer, cs := pr.bearer, pr.session
	pr.session = nil
	pr.mu.Unlock()
	if cs != nil {
		_ = cs.Close()
	}
	if p.opts.OAuth != nil && bearer != "" {
		p.opts.OAuth.Invalidate(ctx, pr.ref, bearer)
	}
}

func (p *Provider) listOnce(ctx context.Context, pr *profile, who string) (*snapshot, error) {
	grant, err := p.authorize(ctx, pr)
	if err != nil {
		return nil, err
	}
	pr.mu.Lock()
	reused := pr.session != nil
	pr.mu.Unlock()
	cs, protocol, err := p.session(ctx, pr)
	if err != nil {
		return nil, err
	}
	x := &exchange{limit: p.cfg.Limits.MaxResponseBytes}
	lctx := withExchange(ctx, x)
	n := 0
	var iterErr error
	for _, err := range cs.Tools(lctx, nil) {
		if err != nil {
			iterErr = err
			break
		}
		n++
		if n > p.cfg.Limits.MaxTools {
			iterErr = &failure{class: ClassMalformedResponse, msg: fmt.Sprintf("tools/list has more than %d tools", p.cfg.Limits.MaxTools)}
			break
		}
		if x.pageCount() > p.cfg.Limits.MaxPages {
			iterErr = &failure{class: ClassServerBug, msg: fmt.Sprintf("tools/list has more than %d pages; pagination does not end", p.cfg.Limits.MaxPages)}
			break
		}
	}
	status, tooLarge := x.observed()
	if iterErr != nil {
		var f *failure
		if !errors.As(iterErr, &f) {
			iterErr = &failure{class: classify(iterErr, status, tooLarge), msg: "tools/list: " + trimErr(iterErr)}
		}
		if classify(iterErr, status, tooLarge) == ClassNetworkUnreachable {
			p.dropSession(pr, cs)
			if reused && ctx.Err() == nil {
				return nil, errStaleSession
			}
		}
		return nil, iterErr
	}
	p.discoveries.Add(1)
	pages := x.takePages()
	if len(pages) > p.cfg.Limits.MaxPages {
		return nil, &failure{class: ClassServerBug, msg: fmt.Sprintf("tools/list has more than %d pages", p.cfg.Limits.MaxPages)}
	}
	at := p.opts.Now()
	l, err := p.norm.build(pages, protocol, at)
	if err != nil {
		return nil, &failure{class: ClassMalformedResponse, msg: err.Error()}
	}
	key := CacheKey{Server: p.id, Profile: pr.key, Protocol: protocol, Scope: l.scope, Grant: grant}
	if l.scope == "private" {
		key.Who = who
	}
	s := &snapshot{key: key, tools: l.tools, refused: l.refused, received: at, expires: at.Add(l.ttl), byName: make(map[string]*Tool, len(l.tools))}
	for _, t := range l.tools {
		s.byName[t.Name] = t
	}
	return s, nil
}

// errStaleSession: a session that had served before failed at the
// transport (it ended unnoticed); the discovery is retried once on a new one.
var errStaleSession = errors.New("mcpprovider: the session ended")

// session returns the profile's live session, connecting one if needed.
func (p *Provider) session(ctx context.Context, pr *profile) (*mcp.ClientSession, string, error) {
	pr.mu.Lock()
	if pr.session != nil {
		cs, v := pr.session, pr.protocol
		pr.mu.Unlock()
		return cs, v, nil
	}
	pr.mu.Unlock()
	cs, err := p.connect(ctx, pr)
	if err != nil {
		return nil, "", err
	}
	res := cs.InitializeResult()
	if res == nil || res.Capabilities == nil || res.Capabilities.Tools == nil {
		_ = cs.Close()
		return nil, "", &failure{class: ClassUnsupported, msg: "the server does not offer tools"}
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.session != nil { // lost a race with another connect: keep the first
		_ = cs.Close()
		return pr.session, pr.protocol, nil
	}
	pr.session, pr.protocol = cs, res.ProtocolVersion
	pr.connects++
	if pr.connects > 1 {
		pr.gen++ // a reconnect: what we knew is revalidated
		for _, s := range pr.snaps {
			s.stale = true
		}
	}
	if !p.goBg(func() { _ = cs.Wait(); p.dropSession(pr, cs) }) {
		pr.session = nil
		_ = cs.Close()
		return nil, "", reason.New(reason.ProviderUnavailable, "mcp server %s: closed", p.id)
	}
	return cs, res.ProtocolVersion, nil
}

// dropSession forgets a session that ended and marks what it served
// stale: a notification may have been missed, so the next use
// revalidates.
func (p *Provider) dropSession(pr *profile, cs *mcp.ClientSession) {
	pr.mu.Lock()
	if pr.session != cs {
		pr.mu.Unlock()
		return
	}
	pr.session = nil
	pr.mu.Unlock()
	_ = cs.Close()
	p.hint(pr, "session ended")
}

// hint marks the profile's snapshots stale (list_changed, a dropped
// stream): the catalogue is never edited from a notification; the next
// use, or the refresh started here, re-discovers authoritatively.
func (p *Provider) hint(pr *profile, why string) {
	pr.mu.Lock()
	pr.gen++
	for _, s := range pr.snaps {
		s.stale = true
	}
	pr.state, pr.since = next(pr.state, evHint, ClassNone, len(pr.snaps) > 0), p.opts.Now()
	public := pr.lastScope != "private" && pr.snaps[""] != nil && pr.session != nil
	pr.mu.Unlock()
	p.log.Info("mcp tools may have changed", "profile", pr.key, "why", why)
	if public && why == "list_changed" {
		// Refresh the shared answer now, in the background.
		p.goBg(func() {
			ctx, cancel := context.WithTimeout(p.bg, time.Duration(p.cfg.ListTimeout))
			defer cancel()
			_, _ = p.current(ctx, authority.AccessContext{Tenant: pr.tenant, CredentialProfile: pr.name}, false)
		})
	}
}

// goBg runs f on a goroutine Close waits for; false (f not run) once
// the provider is closed.
func (p *Provider) goBg(f func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
	return true
}

// connect opens a session for the profile over its transport, teed.
func (p *Provider) connect(ctx context.Context, pr *profile) (*mcp.ClientSession, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(p.cfg.ConnectTimeout))
	defer cancel()
	x := &exchange{limit: p.cfg.Limits.MaxResponseBytes}
	ctx = withExchange(ctx, x)
	t, err := p.transport(ctx, pr)
	if err != nil {
		return nil, err
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "sharedos-mcp-provider", Version: "1"}, &mcp.ClientOptions{
		Logger:       slog.New(slog.DiscardHandler),
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			p.hint(pr, "list_changed")
		},
	})
	var so *mcp.ClientSessionOptions
	if p.cfg.ProtocolVersion != "" {
		so = &mcp.ClientSessionOptions{ProtocolVersion: p.cfg.ProtocolVersion}
	}
	cs, err := client.Connect(ctx, t, so)
	if err != nil {
		status, tooLarge := x.observed()
		return nil, &failure{class: classify(err, status, tooLarge), msg: "connecting: " + trimErr(err)}
	}
	return cs, nil
}

// transport builds the profile's transport. A credential is read here,
// put only on this profile's requests or child process, and never
// logged or returned in an error.
func (p *Provider) transport(ctx context.Context, pr *profile) (mcp.Transport, error) {
	limit := p.cfg.Limits.MaxResponseBytes
	if p.opts.Dial != nil {
		t, err := p.opts.Dial(ctx, pr.key)
		if err != nil {
			return nil, err
		}
		return &teeTransport{inner: t, limit: limit}, nil
	}
	switch p.cfg.Transport {
	case "memory":
		var s *mcp.Server
		if p.opts.Memory != nil {
			s, _ = p.opts.Memory(p.cfg.Server)
		}
		if s == nil {
			return nil, &failure{class: ClassNetworkUnreachable, msg: fmt.Sprintf("no in-process MCP server %q", p.cfg.Server)}
		}
		ct, st := mcp.NewInMemoryTransports()
		ss, err := s.Connect(p.bg, st, nil)
		if err != nil {
			return nil, &failure{class: ClassNetworkUnreachable, msg: "starting the in-process server: " + trimErr(err)}
		}
		if !p.goBg(func() { _ = ss.Wait() }) {
			_ = ss.Close()
			return nil, reason.New(reason.ProviderUnavailable, "mcp server %s: closed", p.id)
		}
		return &teeTransport{inner: ct, limit: limit}, nil
	case "stdio":
		cmd := exec.Command(p.cfg.Command, p.cfg.Args...)
		cmd.Dir = p.cfg.Dir
		cmd.Env = childEnv(p.cfg.Env)
		if pr.cred != nil {
			s, err := pr.cred.secret()
			if err != nil {
				return nil, &failure{class: ClassAuthExpired, msg: err.Error()}
			}
			cmd.Env = append(cmd.Env, pr.cred.EnvVar+"="+s)
		}
		return &teeTransport{inner: &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, limit: limit}, nil
	default: // http
		h, err := p.cfg.headers(pr.cred)
		if err != nil {
			return nil, &failure{class: ClassAuthExpired, msg: err.Error()}
		}
		u, err := url.Parse(p.cfg.URL)
		if err != nil {
			return nil, &failure{class: ClassUnsupported, msg: "url: " + err.Error()}
		}
		rt := &teeRoundTripper{base: p.opts.HTTPTransport, host: u.Host, headers: h, limit: limit,
			onStreamEnd: func() { p.hint(pr, "stream ended") }}
		if pr.client != nil {
			rt.bearer = func(ctx context.Context) (string, error) { return p.bearer(ctx, pr) }
		}
		// Redirects are not followed: a credential goes to the configured
		// endpoint only.
		hc := &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		return &mcp.StreamableClientTransport{Endpoint: p.cfg.URL, HTTPClient: hc, MaxRetries: 2, MaxEventSize: limit}, nil
	}
}

// childEnv is a stdio server's whole environment: what a toolchain needs
// to start (PATH, HOME, temp and Go's caches) and what the config sets —
// never this process's other variables, which may hold other servers'
// credentials.
func childEnv(set map[string]string) []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "LANG", "GOPATH", "GOCACHE", "GOMODCACHE", "GOPROXY", "GOFLAGS", "GOTOOLCHAIN"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		env = append(env, k+"="+set[k])
	}
	return env
}

// Invoke runs a tool against the contract the turn pinned. The snapshot
// it checks must be verified: a stale or failed one is refreshed first,
// and so is an expired one unless the tool is annotated read-only (a tool
// that may write or destroy is never run on an expired contract). A tool
// whose current contract differs from the pinned one, or that is gone,
// is refused capability_changed and never called.
//
// An error is marked providers.ErrNotDispatched unless the tools/call
// request was written to a session that had completed its handshake
// (discovery failing, a contract that changed, a server whose start or
// restart failed during initialize, a write that failed: never sent).
func (p *Provider) Invoke(ctx context.Context, call providers.Call) (providers.Result, error) {
	snap, err := p.current(ctx, call.Access, true)
	if err != nil {
		return providers.Result{}, providers.NotDispatched(err)
	}
	t := snap.byName[call.Tool.Name]
	if t != nil && !t.ReadOnly && !p.opts.Now().Before(snap.expires) {
		if snap, err = p.current(ctx, call.Access, false); err != nil {
			return providers.Result{}, providers.NotDispatched(err)
		}
		t = snap.byName[call.Tool.Name]
	}
	if err := pinned(p.id, t, call); err != nil {
		return providers.Result{}, providers.NotDispatched(err)
	}
	return p.call(ctx, call.Access, t, call.Arguments)
}

// pinned checks the turn's pinned contract against the current one.
func pinned(server string, t *Tool, call providers.Call) error {
	switch {
	case t == nil:
		return reason.New(reason.CapabilityChanged, "mcp server %s: tool %s is no longer offered", server, call.Tool.Name)
	case call.Revision != "" && call.Revision != t.Revision,
		call.Token != "" && call.Token != t.SourceRevision:
		return reason.New(reason.CapabilityChanged, "mcp server %s: tool %s changed since the turn pinned it", server, call.Tool.Name)
	}
	return nil
}

// call sends tools/call for a verified tool and maps its result.
func (p *Provider) call(ctx context.Context, access authority.AccessContext, t *Tool, args json.RawMessage) (providers.Result, error) {
	pr, err := p.profileOf(access)
	if err != nil {
		return providers.Result{}, providers.NotDispatched(err)
	}
	defer pr.holds.Add(-1)
	res, err, retry := p.callOnce(ctx, pr, access, t, args)
	if retry && ctx.Err() == nil {
		p.refreshBearer(ctx, pr)
		res, err, _ = p.callOnce(ctx, pr, access, t, args) // once more, with a refreshed token
	}
	return res, err
}

// callOnce is one tools/call; retry reports that the server refused the
// OAuth token (401: the tool did not run), worth one refresh.
func (p *Provider) callOnce(ctx context.Context, pr *profile, access authority.AccessContext, t *Tool, args json.RawMessage) (_ providers.Result, _ error, retry bool) {
	if _, err := p.authorize(ctx, pr); err != nil {
		return providers.Result{}, providers.NotDispatched(p.coded(err)), false
	}
	cs, _, err := p.session(ctx, pr)
	if err != nil {
		return providers.Result{}, providers.NotDispatched(p.coded(err)), tokenRefused(pr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(p.cfg.CallTimeout))
	defer cancel()
	x := &exchange{limit: p.cfg.Limits.MaxResponseBytes}
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	ctx, span, meta := p.startCall(ctx, cs, t.Name)
	res, err := cs.CallTool(withExchange(ctx, x), &mcp.CallToolParams{Meta: meta, Name: t.Name, Arguments: args})
	defer func() { endCall(span, res, err, x) }()
	if err != nil {
		status, tooLarge := x.observed()
		c := classify(err, status, tooLarge)
		if c == ClassNetworkUnreachable {
			p.dropSession(pr, cs)
		}
		if f := challenged(pr, x, status); f != nil {
			// The server refused the token (401) or wants a scope the
			// grant lacks (403 insufficient_scope): the tool did not run.
			return providers.Result{}, providers.NotDispatched(p.coded(f)), f.retry
		}
		if ctx.Err() == nil && c != ClassNetworkUnreachable && c != ClassTimeout {
			// The server refused the call itself: perhaps the tool is gone
			// or changed. Refresh, and say so if it did.
			if changed := p.recheck(ctx, pr, access, t); changed != nil {
				return providers.Result{}, changed, false
			}
		}
		err := reason.New(c.code(), "mcp server %s: tools/call %s: %s: %s", p.id, t.Name, c, trimErr(err))
		if !x.wasWritten() {
			return providers.Result{}, providers.NotDispatched(err), false
		}
		return providers.Result{}, err, false
	}
	r, err := resultOf(res)
	return r, err, false
}

// challenged reads a refused call's Bearer challenge: 401 on an OAuth
// profile is a refused token (retry once refreshed, then auth_required);
// 403 insufficient_scope is step-up: the scopes the server names.
func challenged(pr *profile, x *exchange, status int) *failure {
	switch {
	case status == http.StatusUnauthorized && pr.client != nil:
		return &failure{class: ClassAuthExpired, code: reason.AuthRequired, retry: true, msg: "the server refused the access token: authentication expired"}
	case status == http.StatusForbidden:
		if ch, ok := oauth.ParseChallenge(x.challenges()); ok && ch.Error == "insufficient_scope" {
			return &failure{class: ClassInsufficientScope, msg: fmt.Sprintf("the server needs scope %q, which the credential was not granted: re-authorize the profile for it", strings.Join(ch.Scope, " "))}
		}
	}
	return nil
}

// recheck re-discovers after a refused call and returns capability_changed
// when the tool is gone or its contract is no longer the one called.
func (p *Provider) recheck(ctx context.Context, pr *profile, access authority.AccessContext, t *Tool) error {
	p.hint(pr, "call refused")
	snap, err := p.current(ctx, access, false)
	if err != nil {
		return nil
	}
	if cur := snap.byName[t.Name]; cur == nil || cur.SourceRevision != t.SourceRevision {
		return reason.New(reason.CapabilityChanged, "mcp server %s: tool %s changed or was removed (the server refused the call)", p.id, t.Name)
	}
	return nil
}

// maxPrivate bounds one profile's private snapshots (one per principal).
const maxPrivate = 1024

// evictPrivate forgets expired private snapshots, then the oldest ones
// past maxPrivate.
func evictPrivate(snaps map[string]*snapshot, now time.Time) {
	for who, s := range snaps {
		if !now.Before(s.expires) {
			delete(snaps, who)
		}
	}
	for len(snaps) > maxPrivate {
		var oldest string
		for who, s := range snaps {
			if oldest == "" || s.received.Before(snaps[oldest].received) {
				oldest = who
			}
		}
		delete(snaps, oldest)
	}
}
