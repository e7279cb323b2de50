// Package oauthtest is an OAuth 2.1 authorization server and an MCP
// resource server for tests, on loopback. The authorization server is
// strict — it is what the client is tested against, so it accepts only
// what RFC 6749, 7636 (PKCE S256), 8707 (resource indicators), 8414
// (metadata), 9207 (iss) and 6819 §5.2.2.3 (refresh token rotation, with
// reuse revoking the whole grant) allow: client authentication, exact
// redirect URIs, one-use codes that expire, the verifier, the resource,
// access token expiry, rotated refresh tokens. Its clock is the test's.
package oauthtest

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// Clock is real time plus an offset a test moves forward.
type Clock struct{ off atomic.Int64 }

// Now is the clock's time.
func (c *Clock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// Client is a registered client.
type Client struct {
	ID           string
	Secret       string // "" : a public client (PKCE, no secret)
	RedirectURIs []string
	Grants       []string // "authorization_code", "refresh_token", "client_credentials"
	Scopes       []string // what it may ask for (client credentials: what it gets)
}

// User is an account a person logs in to.
type User struct {
	Name, Password string
	Scopes         []string // what the account may grant; narrowed live by SetUserScopes
}

// Server is the authorization server. Safe for concurrent use.
type Server struct {
	*httptest.Server
	Clock    *Clock
	TokenTTL time.Duration // access tokens' lifetime (default 1m)
	// Resources are the resource indicators it issues tokens for.
	Resources []string

	mu       sync.Mutex
	clients  map[string]*Client
	users    map[string]*User
	pending  map[string]*authReq // by request id, between /authorize and the login form
	codes    map[string]*code
	access   map[string]*tok
	refresh  map[string]*rtok
	requests map[string]int // token requests by grant type
	issued   []string       // every token it issued, access and refresh
	// prefill, when set, is typed into the login form, which submits
	// itself: a headless browser then signs in with no one at the keys.
	prefill *[2]string
}

// PrefillLogin makes the login form sign in as user by itself (a script
// in the page fills and submits it, in the browser that loaded it).
func (s *Server) PrefillLogin(user, password string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prefill = &[2]string{user, password}
}

type authReq struct {
	client, redirect, state, challenge, resource string
	scopes                                       []string
}

type code struct {
	req     *authReq
	user    string
	scopes  []string
	expires time.Time
	used    bool
	family  string
}

type tok struct {
	subject, client, resource, family string
	scopes                            []string
	expires                           time.Time
}

type rtok struct {
	subject, client, resource, family string
	scopes                            []string // the grant's; a refresh gets these ∩ the account's now
	used                              bool
}

// NewServer starts an authorization server on loopback.
func NewServer(clock *Clock) *Server {
	s := &Server{Clock: clock, TokenTTL: time.Minute, clients: map[string]*Client{}, users: map[string]*User{},
		pending: map[string]*authReq{}, codes: map[string]*code{}, access: map[string]*tok{}, refresh: map[string]*rtok{}, requests: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", s.metadata)
	mux.HandleFunc("GET /authorize", s.authorize)
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("POST /token", s.token)
	s.Server = httptest.NewServer(mux)
	return s
}

// Issuer is the server's issuer identifier.
func (s *Server) Issuer() string { return s.URL }

// AddClient registers c.
func (s *Server) AddClient(c Client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clients[c.ID] = &c
}

// AddUser registers an account.
func (s *Server) AddUser(u User) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[u.Name] = &u
}

// SetUserScopes changes what an account may grant: later refreshes of
// its grants get only these.
func (s *Server) SetUserScopes(name string, scopes []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[name].Scopes = scopes
}

// RevokeUser revokes every access and refresh token of an account.
func (s *Server) RevokeUser(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, t := range s.access {
		if t.subject == name {
			delete(s.access, k)
		}
	}
	for k, t := range s.refresh {
		if t.subject == name {
			delete(s.refresh, k)
		}
	}
}

// RevokeAccess revokes one access token (its refresh token stays good).
func (s *Server) RevokeAccess(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.access, token)
}

// Issued is every access and refresh token the server issued: what must
// never appear in a log, an audit event, a metric or a status.
func (s *Server) Issued() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.issued)
}

// Requests is how many token requests of grantType it answered (any outcome).
func (s *Server) Requests(grantType string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[grantType]
}

// Verify is the resource server's check of an access token issued for
// resource: active, unexpired on the server's clock, for that resource.
// The expiration is given on the real clock (what the SDK's middleware
// compares with).
func (s *Server) Verify(token, resource string) (*auth.TokenInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.access[token]
	now := s.Clock.Now()
	switch {
	case t == nil:
		return nil, fmt.Errorf("%w: unknown or revoked", auth.ErrInvalidToken)
	case !now.Before(t.expires):
		return nil, fmt.Errorf("%w: expired", auth.ErrInvalidToken)
	case t.resource != resource:
		return nil, fmt.Errorf("%w: issued for another resource", auth.ErrInvalidToken)
	}
	return &auth.TokenInfo{Scopes: slices.Clone(t.scopes), Expiration: time.Now().Add(t.expires.Sub(now)), UserID: t.subject}, nil
}

func (s *Server) metadata(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, &oauthex.AuthServerMeta{
		Issuer: s.URL, AuthorizationEndpoint: s.URL + "/authorize", TokenEndpoint: s.URL + "/token",
		ResponseTypesSupported: []string{"code"}, GrantTypesSupported: []string{"authorization_code", "refresh_token", "client_credentials"},
		TokenEndpointAuthMethodsSupported: []string{"client_secret_basic", "client_secret_post", "none"},
		CodeChallengeMethodsSupported:     []string{"S256"}, AuthorizationResponseIssParameterSupported: true,
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func oauthErr(w http.ResponseWriter, status int, code, desc string) {
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Basic realm="token"`)
	}
	writeJSON(w, status, map[string]string{"error": code, "error_description": desc})
}

// authorize checks the authorization request; a bad client or redirect
// URI is answered here (never redirected), anything else redirected with
// an error; a good one gets the login form.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.clients[q.Get("client_id")]
	if c == nil || !slices.Contains(c.Grants, "authorization_code") {
		http.Error(w, "unknown client", http.StatusBadRequest)
		return
	}
	redirect := q.Get("redirect_uri")
	if !slices.Contains(c.RedirectURIs, redirect) {
		http.Error(w, "redirect_uri not registered", http.StatusBadRequest)
		return
	}
	fail := func(code, desc string) {
		u, _ := url.Parse(redirect)
		v := u.Query()
		v.Set("error", code)
		v.Set("error_description", desc)
		v.Set("state", q.Get("state"))
		v.Set("iss", s.URL)
		u.RawQuery = v.Encode()
		http.Redirect(w, r, u.String(), http.StatusFound)
	}
	scopes := strings.Fields(q.Get("scope"))
	switch {
	case q.Get("response_type") != "code":
		fail("unsupported_response_type", "code only")
	case q.Get("code_challenge") == "" || q.Get("code_challenge_method") != "S256":
		fail("invalid_request", "PKCE S256 is required")
	case !slices.Contains(s.Resources, q.Get("resource")):
		fail("invalid_target", "unknown resource")
	case !subset(scopes, c.Scopes):
		fail("invalid_scope", "scope not allowed for this client")
	default:
		id := rand.Text()
		s.pending[id] = &authReq{client: c.ID, redirect: redirect, state: q.Get("state"), challenge: q.Get("code_challenge"),
			resource: q.Get("resource"), scopes: scopes}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>Sign in</title><form method="post" action="/login">
<input type="hidden" name="req" value="%s"><input name="username" id="username"><input name="password" id="password" type="password">
<button type="submit" id="signin">Sign in</button></form>`, html.EscapeString(id))
		if s.prefill != nil {
			u, _ := json.Marshal(s.prefill[0])
			pw, _ := json.Marshal(s.prefill[1])
			fmt.Fprintf(w, `<script>document.getElementById("username").value=%s;document.getElementById("password").value=%s;document.forms[0].submit()</script>`, u, pw)
		}
	}
}

// login takes the form: a right password issues a one-use code for the
// scopes asked ∩ the account's, redirected with state and iss.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	req := s.pending[r.PostForm.Get("req")]
	if req == nil {
		http.Error(w, "no such request", http.StatusBadRequest)
		return
	}
	u := s.users[r.PostForm.Get("username")]
	if u == nil || subtle.ConstantTimeCompare([]byte(u.Password), []byte(r.PostForm.Get("password"))) != 1 {
		http.Error(w, "wrong username or password", http.StatusUnauthorized)
		return
	}
	delete(s.pending, r.PostForm.Get("req"))
	c := rand.Text()
	s.codes[c] = &code{req: req, user: u.Name, scopes: intersect(req.scopes, u.Scopes), expires: s.Clock.Now().Add(time.Minute), family: rand.Text()}
	ru, _ := url.Parse(req.redirect)
	v := ru.Query()
	v.Set("code", c)
	v.Set("state", req.state)
	v.Set("iss", s.URL)
	ru.RawQuery = v.Encode()
	http.Redirect(w, r, ru.String(), http.StatusFound)
}

// client authenticates the token request's client (basic or post; none
// for a public client), or answers 401.
func (s *Server) client(w http.ResponseWriter, r *http.Request) *Client {
	id, secret, basic := r.BasicAuth()
	if basic {
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
		if r.PostForm.Get("client_secret") != "" {
			oauthErr(w, http.StatusBadRequest, "invalid_request", "two client authentication methods")
			return nil
		}
	} else {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	c := s.clients[id]
	if c == nil || subtle.ConstantTimeCompare([]byte(c.Secret), []byte(secret)) != 1 {
		oauthErr(w, http.StatusUnauthorized, "invalid_client", "client authentication failed")
		return nil
	}
	return c
}

func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		oauthErr(w, http.StatusBadRequest, "invalid_request", "bad form")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	gt := r.PostForm.Get("grant_type")
	s.requests[gt]++
	c := s.client(w, r)
	if c == nil {
		return
	}
	if !slices.Contains(c.Grants, gt) {
		oauthErr(w, http.StatusBadRequest, "unauthorized_client", "grant type not allowed for this client")
		return
	}
	resource := r.PostForm.Get("resource")
	now := s.Clock.Now()
	switch gt {
	case "authorization_code":
		cd := s.codes[r.PostForm.Get("code")]
		switch {
		case cd == nil || cd.req.client != c.ID:
			oauthErr(w, http.StatusBadRequest, "invalid_grant", "unknown code")
		case cd.used:
			s.revokeFamily(cd.family) // a code used twice: what it issued is revoked
			oauthErr(w, http.StatusBadRequest, "invalid_grant", "code already used")
		case !now.Before(cd.expires):
			oauthErr(w, http.StatusBadRequest, "invalid_grant", "code expired")
		case r.PostForm.Get("redirect_uri") != cd.req.redirect:
			oauthErr(w, http.StatusBadRequest, "invalid_grant", "redirect_uri differs from the authorization request's")
		case s256(r.PostForm.Get("code_verifier")) != cd.req.challenge:
			oauthErr(w, http.StatusBadRequest, "invalid_grant", "PKCE verifier does not match")
		case resource != "" && resource != cd.req.resource:
			oauthErr(w, http.StatusBadRequest, "invalid_target", "resource differs from the authorization request's")
		default:
			cd.used = true
			s.issue(w, cd.user, c.ID, cd.req.resource, cd.family, cd.scopes, true)
		}
	case "refresh_token":
		rt := s.refresh[r.PostForm.Get("refresh_token")]
		switch {
		case rt == nil || rt.client != c.ID:
			oauthErr(w, http.StatusBadRequest, "invalid_grant", "unknown or revoked refresh token")
		case rt.used:
			s.revokeFamily(rt.family) // reuse of a rotated token: the whole grant is revoked
			oauthErr(w, http.StatusBadRequest, "invalid_grant", "refresh token reused: grant revoked")
		case resource != "" && resource != rt.resource:
			oauthErr(w, http.StatusBadRequest, "invalid_target", "resource differs from the grant's")
		default:
			rt.used = true
			scopes := rt.scopes
			if u := s.users[rt.subject]; u != nil {
				scopes = intersect(rt.scopes, u.Scopes)
			}
			if asked := strings.Fields(r.PostForm.Get("scope")); len(asked) > 0 {
				scopes = intersect(scopes, asked)
			}
			s.issue(w, rt.subject, c.ID, rt.resource, rt.family, scopes, true)
		}
	case "client_credentials":
		asked := strings.Fields(r.PostForm.Get("scope"))
		switch {
		case c.Secret == "":
			oauthErr(w, http.StatusUnauthorized, "invalid_client", "a public client cannot use client credentials")
		case !slices.Contains(s.Resources, resource):
			oauthErr(w, http.StatusBadRequest, "invalid_target", "unknown or missing resource")
		case !subset(asked, c.Scopes):
			oauthErr(w, http.StatusBadRequest, "invalid_scope", "scope not allowed for this client")
		default:
			if len(asked) == 0 {
				asked = c.Scopes
			}
			s.issue(w, c.ID, c.ID, resource, rand.Text(), asked, false)
		}
	default:
		oauthErr(w, http.StatusBadRequest, "unsupported_grant_type", gt)
	}
}

// issue answers a token request: an access token and, when withRefresh,
// a refresh token of the same family. Caller holds s.mu.
func (s *Server) issue(w http.ResponseWriter, subject, client, resource, family string, scopes []string, withRefresh bool) {
	at := "at-" + rand.Text()
	s.access[at] = &tok{subject: subject, client: client, resource: resource, family: family, scopes: scopes, expires: s.Clock.Now().Add(s.TokenTTL)}
	s.issued = append(s.issued, at)
	out := map[string]any{"access_token": at, "token_type": "Bearer", "expires_in": int(s.TokenTTL / time.Second), "scope": strings.Join(scopes, " ")}
	if withRefresh {
		rt := "rt-" + rand.Text()
		s.refresh[rt] = &rtok{subject: subject, client: client, resource: resource, family: family, scopes: scopes}
		out["refresh_token"] = rt
		s.issued = append(s.issued, rt)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) revokeFamily(family string) {
	for k, t := range s.access {
		if t.family == family {
			delete(s.access, k)
		}
	}
	for k, t := range s.refresh {
		if t.family == family {
			delete(s.refresh, k)
		}
	}
}

func s256(verifier string) string {
	h := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

func subset(a, of []string) bool {
	for _, x := range a {
		if !slices.Contains(of, x) {
			return false
		}
	}
	return true
}

func intersect(a, b []string) []string {
	out := []string{}
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}
