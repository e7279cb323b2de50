package oauth

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// The flows a credential profile may use.
const (
	FlowClientCredentials = "client_credentials" // a service: no person, no browser
	FlowAuthorizationCode = "authorization_code" // a person: a link, a login, a redirect to the node
)

// Client is how one credential profile authorizes: its flow, its client
// registration at the authorization server and what it asks for.
type Client struct {
	Flow     string
	ClientID string
	// Secret returns the client secret ("" for a public client, which
	// relies on PKCE alone). Read at each token request; never stored.
	Secret func() (string, error)
	// Scopes asked for; empty: what the server's challenge or metadata
	// names.
	Scopes []string
	// Resource is the MCP server's URL: where discovery starts and the
	// resource indicator (RFC 8707) of every token request.
	Resource string
	// Issuer pins the authorization server ("" : the server's metadata
	// decides).
	Issuer string
}

// Token is a usable access token and the non-secret identity of the
// grant it comes from (which changes with a re-authorization or a change
// of the granted scopes, never with a refresh alone).
type Token struct {
	Access   string
	Identity string
	Scopes   []string
	Expiry   time.Time
}

// Options configure a Manager; zero fields take the defaults.
type Options struct {
	// Bucket names the grants' bucket (DefaultBucket); its pending logins
	// are in Bucket+"_login". Replicas is their replica count.
	Bucket   string
	Replicas int
	// Holder names this node in refresh leases (default a random name).
	Holder string
	// HTTPClient makes every request to servers' metadata and to
	// authorization servers (default: no redirects followed).
	HTTPClient *http.Client
	Logger     *slog.Logger
	// Now is the clock expiry and leases are measured on.
	Now func() time.Time
	// Early is how long before its expiry an access token is refreshed
	// (default 10s). Lease bounds one refresh (default 15s): past it,
	// another node may take over.
	Early time.Duration
	Lease time.Duration
	// RedirectURL is this node's callback (…/oauth/callback), where the
	// authorization server sends a person back after a login.
	RedirectURL string
}

// Manager obtains, stores and refreshes the grants of every OAuth
// credential profile of a node. Safe for concurrent use; every node of a
// cluster runs one over the same buckets.
type Manager struct {
	st   *store
	opts Options
	hc   *http.Client
	log  *slog.Logger
	now  func() time.Time

	mu   sync.Mutex
	meta map[string]*serverMeta
	// local collapses one node's concurrent refreshes of a grant.
	local map[string]*inflight

	tokenRequests atomic.Int64
	redirect      atomic.Pointer[string]
}

type inflight struct {
	done chan struct{}
	tok  Token
	err  error
}

// New opens (creating if needed) the buckets on js and returns a manager
// sealing with sealer.
func New(ctx context.Context, js jetstream.JetStream, sealer *Sealer, opts *Options) (*Manager, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Early == 0 {
		o.Early = 10 * time.Second
	}
	if o.Lease == 0 {
		o.Lease = 15 * time.Second
	}
	if o.Holder == "" {
		o.Holder = "node-" + rand.Text()[:8]
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 30 * time.Second, Transport: http.DefaultTransport.(*http.Transport).Clone(), CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	st, err := openStore(ctx, js, o.Bucket, o.Replicas, sealer)
	if err != nil {
		return nil, err
	}
	m := &Manager{st: st, opts: o, hc: o.HTTPClient, log: o.Logger, now: o.Now,
		meta: map[string]*serverMeta{}, local: map[string]*inflight{}}
	m.SetRedirectURL(o.RedirectURL)
	return m, nil
}

// SetRedirectURL sets this node's callback URL (Options.RedirectURL),
// once its listener's address is known.
func (m *Manager) SetRedirectURL(u string) { m.redirect.Store(&u) }

// Close releases the manager's idle connections. Idempotent; a closed
// manager still works (it dials again).
func (m *Manager) Close() { m.hc.CloseIdleConnections() }

// TokenRequests counts the requests this manager sent to token endpoints.
func (m *Manager) TokenRequests() int64 { return m.tokenRequests.Load() }

// Error is an OAuth failure: ErrAuthRequired or ErrUnavailable, with what
// to say. Its message never holds a token or a secret.
type Error struct {
	kind error
	msg  string
}

func (e *Error) Error() string { return e.msg }

// Unwrap gives the kind, for errors.Is.
func (e *Error) Unwrap() error { return e.kind }

// The kinds of Error.
var (
	// ErrAuthRequired: no usable grant — never authorized, or refused by
	// the authorization server; the profile must be authorized (again).
	ErrAuthRequired = errors.New("oauth: authorization required")
	// ErrUnavailable: the authorization server or the metadata could not
	// be reached or answered badly; nothing stored changed.
	ErrUnavailable = errors.New("oauth: authorization server unavailable")
)

// Token returns a usable access token for ref: the stored one while it
// is valid, else a refreshed one (client credentials: a new one), the
// refresh serialized across nodes. ErrAuthRequired when there is no grant
// to use or refresh.
func (m *Manager) Token(ctx context.Context, ref Ref, c *Client) (Token, error) {
	g, _, err := m.st.get(ctx, ref)
	if err != nil {
		if kerr := keyNotHeld(ref, c, err); kerr != nil {
			return Token{}, kerr
		}
		// A service's grant sealed by a key no longer held: obtained anew.
	}
	if g != nil && g.usable(m.now(), m.opts.Early) {
		return tokenOf(g), nil
	}
	key := ref.key()
	m.mu.Lock()
	f := m.local[key]
	if f == nil {
		f = &inflight{done: make(chan struct{})}
		m.local[key] = f
		m.mu.Unlock()
		f.tok, f.err = m.renew(ctx, ref, c)
		m.mu.Lock()
		delete(m.local, key)
		m.mu.Unlock()
		close(f.done)
		return f.tok, f.err
	}
	m.mu.Unlock()
	select {
	case <-f.done:
		return f.tok, f.err
	case <-ctx.Done():
		return Token{}, &Error{kind: ErrUnavailable, msg: "oauth: waiting for a refresh: " + ctx.Err().Error()}
	}
}

// keyNotHeld classifies a failed read of ref's grant: a record sealed by
// a key this node does not hold is ErrAuthRequired for a person's grant
// (authorize again, or reseal on a node holding the key) and nil for a
// service's, which is obtained anew; anything else is ErrUnavailable.
func keyNotHeld(ref Ref, c *Client, err error) error {
	var kn *KeyNotHeldError
	if !errors.As(err, &kn) {
		return &Error{kind: ErrUnavailable, msg: err.Error()}
	}
	if c.Flow == FlowClientCredentials {
		return nil
	}
	return &Error{kind: ErrAuthRequired, msg: fmt.Sprintf("%s: authorize it again (`node oauth login`), or run `node oauth reseal` on a node that still holds that key", err.Error())}
}

func tokenOf(g *grant) Token {
	return Token{Access: g.Access, Identity: g.identity(), Scopes: slices.Clone(g.Scopes), Expiry: g.Expiry}
}

// pollEvery is how often a node waiting on another's refresh re-reads.
const pollEvery = 20 * time.Millisecond

// renew is the cross-node refresh: take the record's lease with a
// compare-and-set, call the token endpoint, write the result against the
// lease's revision. A node that finds another's live lease waits for its
// result.
func (m *Manager) renew(ctx context.Context, ref Ref, c *Client) (Token, error) {
	for {
		g, rev, err := m.st.get(ctx, ref)
		if err != nil {
			if kerr := keyNotHeld(ref, c, err); kerr != nil {
				return Token{}, kerr
			}
			// g is nil and rev the unreadable record's: the new grant
			// replaces it by compare-and-set like any other.
		}
		now := m.now()
		switch {
		case g != nil && g.usable(now, m.opts.Early):
			return tokenOf(g), nil
		case g != nil && g.Failed != "":
			return Token{}, &Error{kind: ErrAuthRequired, msg: g.Failed}
		case g != nil && g.Lease != nil && now.Before(g.Lease.Until):
			t := time.NewTimer(pollEvery)
			select {
			case <-ctx.Done():
				t.Stop()
				return Token{}, &Error{kind: ErrUnavailable, msg: "oauth: waiting for another node's refresh: " + ctx.Err().Error()}
			case <-t.C:
			}
			continue
		case g == nil && c.Flow != FlowClientCredentials:
			return Token{}, &Error{kind: ErrAuthRequired, msg: fmt.Sprintf("%s has not been authorized: run `node oauth login` for it", ref)}
		case g != nil && g.Refresh == "" && c.Flow != FlowClientCredentials:
			return Token{}, &Error{kind: ErrAuthRequired, msg: fmt.Sprintf("the access token of %s expired and there is no refresh token: authorize it again", ref)}
		}
		held := &grant{}
		if g != nil {
			*held = *g
		}
		held.Lease = &lease{Holder: m.opts.Holder, Until: now.Add(m.opts.Lease)}
		leaseRev, err := m.st.put(ctx, ref, held, rev)
		if errors.Is(err, errConflict) {
			continue // another node moved first: see what it did
		}
		if err != nil {
			return Token{}, &Error{kind: ErrUnavailable, msg: err.Error()}
		}
		next, err := m.obtain(ctx, ref, c, g)
		if err != nil {
			var e *Error
			if errors.As(err, &e) && errors.Is(e, ErrAuthRequired) {
				// Refused for good: keep the reason, drop the tokens.
				failed := &grant{Issuer: held.Issuer, Resource: held.Resource, Flow: held.Flow, Epoch: held.Epoch, Authz: held.Authz, Failed: e.msg}
				if _, werr := m.st.put(ctx, ref, failed, leaseRev); werr != nil && !errors.Is(werr, errConflict) {
					m.log.Warn("oauth: recording a refused refresh", "grant", ref.String(), "err", werr)
				}
				m.log.Warn("oauth: grant refused by the authorization server", "grant", ref.String(), "reason", e.msg)
				return Token{}, err
			}
			held.Lease = nil // transient: let the next try (any node's) go at once
			_, _ = m.st.put(ctx, ref, held, leaseRev)
			return Token{}, err
		}
		if _, err := m.st.put(ctx, ref, next, leaseRev); errors.Is(err, errConflict) {
			// Our lease was taken over (we overran it) or a login replaced
			// the grant: the record there is the one to use.
			m.log.Warn("oauth: a refresh result lost to a newer record", "grant", ref.String())
			continue
		} else if err != nil {
			return Token{}, &Error{kind: ErrUnavailable, msg: err.Error()}
		}
		if g != nil && next.identity() != g.identity() {
			m.log.Info("oauth: granted scopes changed", "grant", ref.String(), "scopes", strings.Join(next.Scopes, " "))
		}
		return tokenOf(next), nil
	}
}

// obtain asks the token endpoint for prev's successor: a refresh with its
// refresh token, or (client credentials) a new grant.
func (m *Manager) obtain(ctx context.Context, ref Ref, c *Client, prev *grant) (*grant, error) {
	sm, err := m.discover(ctx, c.Resource, c.Issuer)
	if err != nil {
		return nil, err
	}
	if prev != nil && prev.Issuer != "" && prev.Issuer != sm.issuer {
		m.forget(c.Resource, c.Issuer)
		return nil, &Error{kind: ErrAuthRequired, msg: fmt.Sprintf("the server's authorization server changed (%s, the grant is %s's): authorize again", sm.issuer, prev.Issuer)}
	}
	secret := ""
	if c.Secret != nil {
		if secret, err = c.Secret(); err != nil {
			return nil, &Error{kind: ErrAuthRequired, msg: "the client secret: " + bounded(err.Error())}
		}
	}
	scopes := c.Scopes
	if len(scopes) == 0 {
		scopes = sm.scopes
	}
	hctx := context.WithValue(ctx, oauth2.HTTPClient, m.hc)
	m.tokenRequests.Add(1)
	var tok *oauth2.Token
	next := &grant{Issuer: sm.issuer, Resource: sm.resource, Flow: c.Flow, Obtained: m.now()}
	if prev != nil && prev.Refresh != "" {
		cfg := oauth2.Config{ClientID: c.ClientID, ClientSecret: secret, Scopes: scopes,
			Endpoint: oauth2.Endpoint{TokenURL: sm.as.TokenEndpoint, AuthStyle: authStyle(sm.as.TokenEndpointAuthMethodsSupported, secret)}}
		tok, err = cfg.TokenSource(hctx, &oauth2.Token{RefreshToken: prev.Refresh, Expiry: time.Unix(1, 0)}).Token()
		next.Epoch, next.Refreshes, next.Authz = prev.Epoch, prev.Refreshes+1, prev.Authz
	} else {
		if c.Flow != FlowClientCredentials {
			return nil, &Error{kind: ErrAuthRequired, msg: fmt.Sprintf("%s has no refresh token: authorize it again", ref)}
		}
		cfg := clientcredentials.Config{ClientID: c.ClientID, ClientSecret: secret, TokenURL: sm.as.TokenEndpoint, Scopes: scopes,
			EndpointParams: map[string][]string{"resource": {sm.resource}},
			AuthStyle:      authStyle(sm.as.TokenEndpointAuthMethodsSupported, secret)}
		tok, err = cfg.Token(hctx)
		next.Epoch, next.Authz = 1, rand.Text()
		if prev != nil {
			next.Epoch, next.Refreshes, next.Authz = prev.Epoch, prev.Refreshes+1, prev.Authz
		}
	}
	if err != nil {
		return nil, tokenError(err)
	}
	next.Access, next.Refresh, next.Expiry = tok.AccessToken, tok.RefreshToken, m.expiry(tok)
	if next.Refresh == "" && prev != nil && c.Flow != FlowClientCredentials {
		next.Refresh = prev.Refresh // not rotated: the same one goes on
	}
	next.Scopes = grantedScopes(tok, scopes)
	return next, nil
}

// expiry is when tok expires on the manager's clock: expires_in from
// now (the oauth2 package measures it on the wall clock).
func (m *Manager) expiry(tok *oauth2.Token) time.Time {
	switch {
	case tok.ExpiresIn > 0:
		return m.now().Add(time.Duration(tok.ExpiresIn) * time.Second)
	case tok.Expiry.IsZero():
		return time.Time{}
	}
	return m.now().Add(time.Until(tok.Expiry))
}

// grantedScopes: the token response's scope, else (RFC 6749 §5.1: the
// same as asked) what was asked for.
func grantedScopes(tok *oauth2.Token, asked []string) []string {
	if s, ok := tok.Extra("scope").(string); ok {
		return strings.Fields(s)
	}
	return slices.Clone(asked)
}

// authStyle picks how the client authenticates at the token endpoint.
func authStyle(supported []string, secret string) oauth2.AuthStyle {
	switch {
	case secret == "":
		return oauth2.AuthStyleInParams // a public client: client_id only
	case slices.Contains(supported, "client_secret_basic"), len(supported) == 0:
		return oauth2.AuthStyleInHeader
	default:
		return oauth2.AuthStyleInParams
	}
}

// tokenError classifies a token endpoint failure: an OAuth error answer
// (4xx) refuses the grant for good; anything else is transient. Only the
// error code and a bounded description are kept, never the body.
func tokenError(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		code := re.ErrorCode
		if code == "" && re.Response != nil {
			code = fmt.Sprintf("HTTP %d", re.Response.StatusCode)
		}
		msg := "the authorization server refused: " + code
		if re.ErrorDescription != "" {
			msg += ": " + bounded(re.ErrorDescription)
		}
		if re.Response != nil && re.Response.StatusCode >= 500 {
			return &Error{kind: ErrUnavailable, msg: msg}
		}
		return &Error{kind: ErrAuthRequired, msg: msg}
	}
	return &Error{kind: ErrUnavailable, msg: "the token endpoint: " + bounded(err.Error())}
}

func bounded(s string) string {
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// Invalidate marks ref's access token expired when it is still access
// (the server refused it before its expiry: revoked, or a clock apart):
// the next Token refreshes. A token already replaced is left alone.
func (m *Manager) Invalidate(ctx context.Context, ref Ref, access string) {
	for range 3 {
		g, rev, err := m.st.get(ctx, ref)
		if err != nil || g == nil || g.Access != access {
			return
		}
		g.Expiry = m.now().Add(-time.Second)
		if _, err := m.st.put(ctx, ref, g, rev); !errors.Is(err, errConflict) {
			return
		}
	}
}

// Forget deletes ref's grant (the profile's authorization is withdrawn,
// a logout): every node's next Token for it is ErrAuthRequired (a
// client-credentials grant is obtained anew), and an authorization after
// it is a new grant identity, so nothing discovered with this one is
// served again.
func (m *Manager) Forget(ctx context.Context, ref Ref) error {
	if err := m.st.kv.Delete(ctx, ref.key()); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("oauth: forgetting %s: %w", ref, err)
	}
	return nil
}
