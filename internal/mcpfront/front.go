package mcpfront

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/reason"
)

// Transport is the name operations through this front carry
// (authority.AccessContext.Transport, "transport" on audit events).
const Transport = "mcp"

// Path is where the front is served on the node's HTTP listener.
const Path = "/mcp"

// Options configure a Front. Zero values take the defaults named.
type Options struct {
	// Kernel is the node's kernel. Required.
	Kernel *actors.Kernel
	// Key is the node's Ed25519 key: it signs the tokens this front mints.
	// Required.
	Key ed25519.PrivateKey
	// TrustedKeys are further public keys whose tokens are admitted
	// (other nodes'); the front's own key is always trusted.
	TrustedKeys []ed25519.PublicKey
	// URL is the endpoint's URL as clients reach it ("http://host:port/mcp",
	// or a public URL in front of the node, "https://mcp.example.com/mcp"):
	// every token's audience. Its path ends with Path, where Mount serves
	// the endpoint (a proxy that adds a prefix strips it). Required.
	URL string
	// AllowedOrigins are the browser origins ("https://app.example") whose
	// requests are served; a request with any other Origin is refused 403.
	// The URL's own origin is always allowed; requests with no Origin
	// (non-browser clients) are served.
	AllowedOrigins []string
	// MaxRequestBodyBytes bounds a request body; larger ones are refused
	// 413. Default 1 MiB.
	MaxRequestBodyBytes int64
	// PageSize is the most tools one tools/list page shows. Default 100.
	PageSize int
	// ListTTL is the ttlMs a listing carries: how long a client may keep
	// it. A turn's catalogue is pinned, but what its principal may see
	// follows live authority and namespaces, so a listing may go stale;
	// calls are decided live whatever the client cached. Default 5s;
	// negative: 0 (re-list every time).
	ListTTL time.Duration
	// RequestTimeout bounds one request's work. Default 2m.
	RequestTimeout time.Duration
	// Bounds bound the turns the front holds tokens for and their tokens,
	// in all, per tenant and per principal; mints beyond them are refused
	// overloaded. Zero fields: DefaultBounds.
	Bounds Bounds
	// DisableFastPath sends every request through the SDK's stateless
	// handler, tools/call and tools/list included (fast.go): for
	// comparing the two, and a way back should the fast path misbehave.
	DisableFastPath bool
	// Bus, when set, is the node's NATS connection: a request whose
	// token names another node is forwarded to it there, and ServeBus
	// serves the requests other nodes forward here (forward.go). Nil:
	// such a request is refused 403.
	Bus *nats.Conn
	// BusPrefix is the subjects' prefix (nats.prefix).
	BusPrefix string
	// Clock is the time tokens are checked at. Default time.Now.
	Clock  func() time.Time
	Logger *slog.Logger
	// Tracer, if set, records a server span per tools/list and tools/call
	// ("tools/call {tool}", the MCP conventions), under the trace context
	// of the request's params._meta or HTTP headers (trace.go). nil: none.
	Tracer trace.Tracer
}

func (o *Options) defaults() error {
	if o.Kernel == nil {
		return errors.New("mcpfront: Options.Kernel is required")
	}
	if len(o.Key) != ed25519.PrivateKeySize {
		return errNoKey
	}
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("mcpfront: Options.URL %q is not an http(s) URL", o.URL)
	}
	if !strings.HasSuffix(u.Path, Path) {
		return fmt.Errorf("mcpfront: Options.URL %q: its path must end with %s, where the endpoint is served", o.URL, Path)
	}
	if o.MaxRequestBodyBytes == 0 {
		o.MaxRequestBodyBytes = 1 << 20
	}
	if o.PageSize <= 0 {
		o.PageSize = 100
	}
	if o.ListTTL == 0 {
		o.ListTTL = 5 * time.Second
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = 2 * time.Minute
	}
	if err := o.Bounds.Validate(); err != nil {
		return err
	}
	o.Bounds = o.Bounds.WithDefaults()
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// Front serves the node's open turns over MCP, each to the holders of its
// execution tokens. Safe for concurrent use.
type Front struct {
	opts   Options
	k      *actors.Kernel
	keys   []ed25519.PublicKey
	origin string // the URL's own origin
	// loopback: the URL's host is loopback, so are the pages allowed.
	loopback bool
	// host is the URL's host name: a Host the DNS-rebinding check admits
	// on a loopback listener (the endpoint's own public name).
	host    string
	metaURL string // RFC 9728 protected-resource metadata
	handler http.Handler
	// sdkHandler is handler without the fast path (tests compare them).
	sdkHandler http.Handler
	// fastServed counts requests the fast path answered.
	fastServed atomic.Int64

	// busHandler serves requests forwarded by other nodes (forward.go):
	// handler less the edge's checks (checkOrigin).
	busHandler http.Handler
	fwdSlots   chan struct{}
	sub        *nats.Subscription

	// mu guards tab: the turns of this node the front has minted tokens
	// for, each there from its first token until it closes or its last
	// token expires.
	mu  sync.RWMutex
	tab *table

	// verified remembers tokens whose signature verified, and those this
	// front minted (claims are immutable; expiry and audience are still
	// checked per request), so a sandbox's calls skip the Ed25519
	// verification, and the TokenInfo the SDK carries is built once per
	// token, not per request. Cleared when full.
	vmu      sync.RWMutex
	verified map[string]*verifiedToken
}

// verifiedToken is a token whose signature is good: its claims, and the
// TokenInfo requests bearing it carry (shared; never modified).
type verifiedToken struct {
	c    *Claims
	info *auth.TokenInfo
}

func newVerified(c *Claims) *verifiedToken {
	return &verifiedToken{c: c, info: &auth.TokenInfo{UserID: c.Tenant + "/" + c.Principal, Extra: map[string]any{"claims": c}}}
}

// remember adds a verified token to the memory.
func (f *Front) remember(tok string, v *verifiedToken) {
	f.vmu.Lock()
	if len(f.verified) >= maxVerified {
		clear(f.verified)
	}
	f.verified[tok] = v
	f.vmu.Unlock()
}

// forget takes a token out of the memory (its turn's entry let it go).
func (f *Front) forget(tok string) {
	f.vmu.Lock()
	delete(f.verified, tok)
	f.vmu.Unlock()
}

// maxVerified bounds the verified-token memory.
const maxVerified = 1 << 14

// turnEntry is one turn the front has minted tokens for: its authority,
// the catalogue it holds, the turn's mcp.Server, and for each token the
// access it operates the turn with (its minter's lease, never shown to
// anyone: a token works while the lease it was minted under is held).
type turnEntry struct {
	id   string // the turn's
	auth authority.AccessContext
	hash string
	// tenantKey and principalKey are the scopes the table counts it in.
	tenantKey, principalKey string
	server                  *mcp.Server
	tokens                  map[string]minted // by token id; guarded by Front.mu
}

type minted struct {
	tok     string // the token itself (the verified memory's key)
	access  authority.AccessContext
	expires time.Time
}

// New returns a front; serve its Handler at Path (and MetadataPath).
func New(opts Options) (*Front, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	u, _ := url.Parse(opts.URL)
	f := &Front{
		opts: opts, k: opts.Kernel, verified: map[string]*verifiedToken{},
		keys:     append([]ed25519.PublicKey{opts.Key.Public().(ed25519.PublicKey)}, opts.TrustedKeys...),
		origin:   u.Scheme + "://" + u.Host,
		loopback: isLoopbackHost(u.Hostname()),
		host:     u.Hostname(),
		metaURL:  u.Scheme + "://" + u.Host + MetadataPath(u.Path),
	}
	f.tab = newTable(opts.Bounds, f.forget)
	// The SDK's DNS-rebinding check is made by checkOrigin instead (the
	// same rule, and the endpoint's own public name admitted).
	sdk := mcp.NewStreamableHTTPHandler(f.getServer, &mcp.StreamableHTTPOptions{
		Stateless: true, JSONResponse: true, MaxRequestBodyBytes: opts.MaxRequestBodyBytes,
		PropagateRequestCancellation: true, Logger: opts.Logger, DisableLocalhostProtection: true,
	})
	// Expiry is checked by verify on the front's clock; the SDK's own
	// check (on the wall clock) is off: a TokenInfo carries no Expiration.
	bearer := auth.RequireBearerToken(f.verify, &auth.RequireBearerTokenOptions{ResourceMetadataURL: f.metaURL, AllowMissingExpiration: true})
	chain := bearer(f.bind(rewrite(sdk)))
	f.sdkHandler = f.deadlines(f.checkOrigin(chain))
	f.busHandler = chain
	if !opts.DisableFastPath {
		f.busHandler = f.fast(chain)
	}
	f.handler = f.deadlines(f.checkOrigin(f.busHandler))
	return f, nil
}

// MetadataPath is where the RFC 9728 protected-resource metadata of an
// endpoint at path is served.
func MetadataPath(path string) string { return "/.well-known/oauth-protected-resource" + path }

// URL is the endpoint's URL (the tokens' audience).
func (f *Front) URL() string { return f.opts.URL }

// Mount serves the front on mux: the endpoint at Path and the
// protected-resource metadata at MetadataPath(Path). When the URL is a
// public one with a longer path ("/team/mcp", a proxy stripping the
// prefix), the metadata is served at its own path too, where clients
// look for it (MetadataPath of the URL's path), for a proxy that passes
// /.well-known/ through unchanged.
func (f *Front) Mount(mux *http.ServeMux) {
	u, _ := url.Parse(f.opts.URL)
	mux.Handle(Path, f.handler)
	meta := auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: f.opts.URL, BearerMethodsSupported: []string{"header"}, ResourceName: "SharedOS turn (MCP front)",
		ResourceDocumentation: "https://github.com/sharedos/sharedos/blob/main/docs/protocol.md#execution-tokens",
	})
	mux.Handle("GET "+MetadataPath(Path), meta)
	if u.Path != Path {
		mux.Handle("GET "+MetadataPath(u.Path), meta)
	}
}

// Handler is the endpoint's handler (Mount serves it with the metadata).
func (f *Front) Handler() http.Handler { return f.handler }

// Token is a minted execution token.
type Token struct {
	Token  string
	Claims Claims
}

// Mint mints an execution token for the open turn access names, for its
// lease holder (access carries the lease; Describe checks it). The token
// binds the catalogue the turn holds, resolved now if it was not yet.
// ttl 0 is DefaultTokenLifetime; more than MaxTokenLifetime is refused.
func (f *Front) Mint(ctx context.Context, access authority.AccessContext, ttl time.Duration) (Token, error) {
	switch {
	case ttl == 0:
		ttl = DefaultTokenLifetime
	case ttl < 0 || ttl > MaxTokenLifetime:
		return Token{}, reason.New(reason.InvalidRequest, "token lifetime %v is outside (0, %v]", ttl, MaxTokenLifetime)
	}
	info, err := f.k.Describe(ctx, access)
	if err != nil {
		return Token{}, err
	}
	now := f.opts.Clock()
	c := Claims{
		V: TokenVersion, ID: tokenID(), Turn: info.TurnID, Node: f.k.Node(), CatalogHash: info.CatalogHash,
		Tenant: info.Tenant, Principal: info.Principal, Credential: info.CredentialProfile, Attributes: info.Attributes,
		Audience: f.opts.URL, IssuedAt: now.UnixMilli(), Expires: now.Add(ttl).UnixMilli(),
	}
	tok, err := Sign(f.opts.Key, &c)
	if err != nil {
		return Token{}, reason.New(reason.Internal, "signing token: %v", err)
	}
	op := access
	op.Transport, op.Now, op.EnabledNamespaces = Transport, time.Time{}, nil
	op.Attributes = info.Attributes
	f.mu.Lock()
	e := f.tab.turns[info.TurnID]
	fresh := e == nil
	if fresh {
		auth := op
		auth.LeaseID, auth.Caller, auth.Transport = "", "", ""
		e = &turnEntry{id: info.TurnID, auth: auth, hash: info.CatalogHash, tokens: map[string]minted{}}
		e.tenantKey, e.principalKey = scopeKeys(info.Tenant, info.Principal)
		if err := f.tab.add(e, f.k.Node(), now); err != nil {
			f.mu.Unlock()
			return Token{}, err
		}
		e.server = f.newServer(e)
	}
	if err := f.tab.addToken(e, c.ID, minted{tok: tok, access: op, expires: c.ExpiresAt()}, f.k.Node(), now); err != nil {
		if len(e.tokens) == 0 {
			f.tab.drop(e)
		}
		f.mu.Unlock()
		return Token{}, err
	}
	// Signed here: its first request need not verify the signature.
	vc := c
	f.remember(tok, newVerified(&vc))
	f.mu.Unlock()
	if fresh {
		// The turn may have closed after Describe and before its entry
		// was in the table, unseen by TurnClosed: asked again now, the
		// turn either answers open (its close, if any, comes after the
		// entry and takes it out) or says it is gone, and the entry goes.
		// (Any other failure leaves the entry: it goes at the turn's
		// close or its tokens' expiry.)
		if _, err := f.k.Describe(ctx, access); err != nil {
			if code := reason.Of(err); code == reason.TurnClosed || code == reason.TurnNotFound {
				f.dropEntry(e)
			}
			return Token{}, err
		}
	}
	return Token{Token: tok, Claims: c}, nil
}

// dropEntry takes e out of the table with its tokens and its server: its
// turn closed. Tokens naming the turn are refused from then on (admit
// finds no entry), and a turn id is never reused (the kernel mints a new
// turn's id at random and refuses one a caller names), so no later turn
// admits them.
func (f *Front) dropEntry(e *turnEntry) {
	f.mu.Lock()
	f.tab.drop(e)
	f.mu.Unlock()
}

// TurnClosed tells the front a turn closed: its entry goes and its tokens
// are refused from now on (the node calls it on turn.closed).
func (f *Front) TurnClosed(turnID string) {
	f.mu.Lock()
	if e := f.tab.turns[turnID]; e != nil {
		f.tab.drop(e)
	}
	f.mu.Unlock()
}

// Turns is how many turns the front holds tokens for.
func (f *Front) Turns() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.tab.turns)
}

// Held is what the front holds: turns, tokens, and the tenants and
// principals it counts them for.
func (f *Front) Held() (turns, tokens, tenants, principals int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.tab.turns), f.tab.total.tokens, len(f.tab.tenants), len(f.tab.principals)
}

type claimsKey struct{}
type entryKey struct{}

// verify is the auth.TokenVerifier: signature, expiry, audience. The
// audience of a token another node minted is its node's endpoint: that
// node checks it when the request is forwarded there.
func (f *Front) verify(_ context.Context, tok string, r *http.Request) (*auth.TokenInfo, error) {
	v, err := f.verifyToken(tok, r)
	if err != nil {
		return nil, err
	}
	return v.info, nil
}

func (f *Front) verifyToken(tok string, r *http.Request) (*verifiedToken, error) {
	f.vmu.RLock()
	v := f.verified[tok]
	f.vmu.RUnlock()
	if v == nil {
		c, err := parseToken(tok, f.keys)
		if err != nil {
			return nil, err
		}
		v = newVerified(c)
		f.remember(tok, v)
	}
	aud := f.opts.URL
	if r != nil && f.forwards(v.c, r) {
		aud = v.c.Audience
	}
	if err := checkClaims(v.c, aud, f.opts.Clock()); err != nil {
		return nil, err
	}
	return v, nil
}

// admit is the turn entry a verified token c operates, or, when the turn
// does not admit it, nil and the reason and message bind refuses it with
// (the fast path takes only what bind would admit).
func (f *Front) admit(c *Claims) (*turnEntry, reason.Code, string) {
	if c.Node != f.k.Node() {
		return nil, reason.TurnNotFound, fmt.Sprintf("turn %s is served by node %s, not %s", c.Turn, c.Node, f.k.Node())
	}
	f.mu.RLock()
	e := f.tab.turns[c.Turn]
	var issued bool
	if e != nil {
		_, issued = e.tokens[c.ID]
	}
	f.mu.RUnlock()
	// (auth and hash are set when the entry is made, never changed.)
	switch {
	case e == nil:
		return nil, reason.TurnNotFound, fmt.Sprintf("no open turn %s on node %s (closed, or its tokens expired)", c.Turn, c.Node)
	case c.Tenant != e.auth.Tenant:
		return nil, reason.TenantForbidden, fmt.Sprintf("the token is for tenant %q; turn %s is not", c.Tenant, c.Turn)
	case !c.sameAuthority(e.auth.Tenant, e.auth.Principal, e.auth.CredentialProfile, e.auth.Attributes):
		return nil, reason.TurnNotFound, fmt.Sprintf("the token's principal is not turn %s's", c.Turn)
	case c.CatalogHash != e.hash:
		return nil, reason.TurnNotFound, fmt.Sprintf("the token binds catalogue %s but turn %s holds %s: a token minted for another catalogue cannot reconnect", short(c.CatalogHash), c.Turn, short(e.hash))
	case !issued:
		return nil, reason.TurnNotFound, fmt.Sprintf("token %s was not issued for turn %s by this node", c.ID, c.Turn)
	}
	return e, "", ""
}

// forbid refuses a verified token that the turn does not admit: 403, with
// the reason in WWW-Authenticate and, for a request, as a JSON-RPC error
// answering it (code CodeRefused, data {code, message}), which MCP clients
// surface as the call's error. A notification (no id) is never answered
// by a JSON-RPC message: its 403 carries the reason as text.
func (f *Front) forbid(w http.ResponseWriter, r *http.Request, code reason.Code, msg string) {
	var req struct {
		ID json.RawMessage `json:"id"`
	}
	_ = json.NewDecoder(io.LimitReader(r.Body, f.opts.MaxRequestBodyBytes)).Decode(&req)
	w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer resource_metadata=%q, error="invalid_token", error_description=%q`, f.metaURL, msg))
	if len(req.ID) == 0 || string(req.ID) == "null" {
		http.Error(w, fmt.Sprintf("forbidden: %s: %s", code, msg), http.StatusForbidden)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusForbidden)
	_, _ = w.Write(rpcRefusal(req.ID, "forbidden: "+msg, code, msg))
}

// bind admits a verified token only for the open turn it names, holding
// the catalogue it binds, under the authority it names.
func (f *Front) bind(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ti := auth.TokenInfoFromContext(r.Context())
		c, _ := ti.Extra["claims"].(*Claims)
		if c == nil {
			f.forbid(w, r, reason.Internal, "no execution token claims")
			return
		}
		if f.forwards(c, r) {
			f.forward(w, r, c)
			return
		}
		e, code, msg := f.admit(c)
		if e == nil {
			if code == reason.TurnNotFound && f.closed(r.Context(), c) {
				code, msg = reason.TurnClosed, fmt.Sprintf("turn %s is closed", c.Turn)
			}
			f.forbid(w, r, code, msg)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), entryKey{}, e)))
	})
}

// closed reports whether the kernel knows c's turn as closed (it keeps
// the ids of recently closed turns): what a token of a turn the front
// holds no entry for is told. The turn is asked without a lease, so it
// admits nothing; only the reason is read.
func (f *Front) closed(ctx context.Context, c *Claims) bool {
	ctx, cancel := context.WithTimeout(ctx, f.opts.RequestTimeout)
	defer cancel()
	_, err := f.k.Describe(ctx, authority.AccessContext{
		Tenant: c.Tenant, Principal: c.Principal, CredentialProfile: c.Credential, Attributes: c.Attributes,
		TurnID: c.Turn, Transport: Transport,
	})
	return reason.Of(err) == reason.TurnClosed
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// getServer is the turn's server, chosen by bind from the verified token.
func (f *Front) getServer(r *http.Request) *mcp.Server {
	if e, ok := r.Context().Value(entryKey{}).(*turnEntry); ok {
		return e.server
	}
	return nil
}

// loopbackOrigin reports whether origin is a page on this machine
// (localhost, 127.0.0.0/8, ::1): allowed when the front itself listens on
// loopback, as MCP's local-server guidance has it; the Host check (DNS
// rebinding) still applies.
func loopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return isLoopbackHost(u.Hostname())
}

func isLoopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// checkOrigin refuses a browser request from an origin not allowed (the
// SDK's CrossOriginProtection lets any request with no Origin through and
// allows same-origin by Sec-Fetch-Site, which a non-browser can forge),
// and then a request that rebindingHost refuses, with the SDK's answer.
func (f *Front) checkOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" && !strings.EqualFold(o, f.origin) && !slices.Contains(f.opts.AllowedOrigins, o) && !(f.loopback && loopbackOrigin(o)) {
			http.Error(w, fmt.Sprintf("forbidden: origin %q is not allowed", o), http.StatusForbidden)
			return
		}
		if f.rebindingHost(r) {
			http.Error(w, fmt.Sprintf("Forbidden: invalid Host header %q", r.Host), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// rebindingHost is the SDK's DNS-rebinding protection (a request on a
// loopback listener whose Host is not loopback), less the endpoint's own
// host: behind a proxy on the same machine that passes the public Host
// through (node.mcp_url), that Host is the operator's name, not a
// rebinding attacker's.
func (f *Front) rebindingHost(r *http.Request) bool {
	la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || la == nil || !loopbackAddr(la) || sdkIsLoopback(r.Host) {
		return false
	}
	h := r.Host
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	}
	return !strings.EqualFold(strings.Trim(h, "[]"), f.host)
}
