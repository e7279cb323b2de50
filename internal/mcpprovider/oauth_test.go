package mcpprovider_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
	"github.com/sharedos/sharedos/internal/oauth"
	"github.com/sharedos/sharedos/internal/oauth/oauthtest"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/reason"
)

// oauthEnv is a real OAuth deployment on loopback: a strict authorization
// server, an MCP resource server (the SDK's bearer middleware and
// protected-resource metadata) whose tools depend on the token's scopes,
// a JetStream store and a node callback listener.
type oauthEnv struct {
	clock *oauthtest.Clock
	as    *oauthtest.Server
	rs    *oauthtest.ResourceServer
	js    jetstream.JetStream
	seal  *oauth.Sealer
	cb    *httptest.Server
	logs  *syncBuffer
	cfg   mcpprovider.Config
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newOAuthEnv(t *testing.T) *oauthEnv {
	t.Helper()
	e := &oauthEnv{clock: &oauthtest.Clock{}, logs: &syncBuffer{}}
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections)
	e.as = oauthtest.NewServer(e.clock)
	t.Cleanup(e.as.Close)
	e.rs = oauthtest.NewResourceServer(e.as, []oauthtest.Tool{
		{Name: "read_repo", ListScope: "repo:read"},
		{Name: "create_issue", ListScope: "issues:write"},
		{Name: "delete_repo", ListScope: "repo:read", CallScope: "repo:admin"},
	})
	t.Cleanup(e.rs.Close)
	_, nc := natstest.Start(t, true)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	e.js = js
	if e.seal, err = oauth.LoadOrCreateKey(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	e.cb = httptest.NewServer(http.NewServeMux())
	t.Cleanup(e.cb.Close)
	e.as.AddClient(oauthtest.Client{ID: "svc", Secret: "svc-secret", Grants: []string{"client_credentials"}, Scopes: []string{"repo:read"}})
	e.as.AddClient(oauthtest.Client{ID: "web", Secret: "web-secret", Grants: []string{"authorization_code", "refresh_token"},
		Scopes: []string{"repo:read", "issues:write"}, RedirectURIs: []string{e.cb.URL + oauth.CallbackPath}})
	e.as.AddUser(oauthtest.User{Name: "alice", Password: "pw-a", Scopes: []string{"repo:read", "issues:write"}})
	e.as.AddUser(oauthtest.User{Name: "bob", Password: "pw-b", Scopes: []string{"repo:read"}})
	t.Setenv("OAUTHTEST_SVC", "svc-secret")
	t.Setenv("OAUTHTEST_WEB", "web-secret")
	e.cfg = mcpprovider.Config{Transport: "http", URL: e.rs.URL + oauthtest.MCPPath, Credentials: []mcpprovider.Credential{
		{Tenant: "acme", Profile: "bot", OAuth: &mcpprovider.OAuth{Flow: "client_credentials", ClientID: "svc", ClientSecretEnv: "OAUTHTEST_SVC", Scopes: []string{"repo:read"}}},
		{Tenant: "acme", Profile: "gh-user", OAuth: &mcpprovider.OAuth{Flow: "authorization_code", ClientID: "web", ClientSecretEnv: "OAUTHTEST_WEB",
			Scopes: []string{"repo:read", "issues:write"}, Issuer: e.as.Issuer()}},
	}}
	t.Cleanup(func() { e.assertNoToken(t) })
	return e
}

// node is one node's OAuth store and provider over the shared bucket.
func (e *oauthEnv) node(t *testing.T, name string) (*oauth.Manager, *mcpprovider.Provider) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m, err := oauth.New(ctxT(t), e.js, e.seal, &oauth.Options{Holder: name, Now: e.clock.Now, Logger: log, RedirectURL: e.cb.URL + oauth.CallbackPath})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	p, err := mcpprovider.New("gh", e.cfg, &mcpprovider.Options{OAuth: m, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	if mux, ok := e.cb.Config.Handler.(*http.ServeMux); ok && name == "n1" {
		mux.Handle(oauth.CallbackPath, m.Callback(func(oauth.Ref) (string, error) { return "web-secret", nil }))
	}
	return m, p
}

// assertNoToken: no token the AS issued is in a log line or a status.
func (e *oauthEnv) assertNoToken(t *testing.T) {
	logs := e.logs.String()
	for _, tok := range e.as.Issued() {
		if strings.Contains(logs, tok) {
			t.Errorf("a token is in the logs:\n%s", logs)
		}
	}
}

func (e *oauthEnv) assertStatusHasNoToken(t *testing.T, p *mcpprovider.Provider) {
	t.Helper()
	b, _ := json.Marshal(p.Status())
	for _, tok := range e.as.Issued() {
		if strings.Contains(string(b), tok) {
			t.Fatalf("a token is in the status: %s", b)
		}
	}
}

// login authorizes principal's gh-user grant as account user (asking
// for extra scopes too), following the authorization link as a browser
// would (the AS's form, then the redirect to the node's callback).
func (e *oauthEnv) login(t *testing.T, p *mcpprovider.Provider, principal, user, password string, extra ...string) {
	t.Helper()
	l, err := p.BeginLogin(ctxT(t), "acme", "gh-user", principal, extra)
	if err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(l.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	req := regexp.MustCompile(`name="req" value="([^"]+)"`).FindSubmatch(body)
	if req == nil {
		t.Fatalf("no login form: %d %s", resp.StatusCode, body)
	}
	resp, err = hc.PostForm(e.as.URL+"/login", url.Values{"req": {string(req[1])}, "username": {user}, "password": {password}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "Authorized") {
		t.Fatalf("callback: %d %s", resp.StatusCode, body)
	}
}

func as(principal, profile string) authority.AccessContext {
	return authority.AccessContext{Tenant: "acme", Principal: principal, CredentialProfile: profile}
}

// call invokes a tool of a pinned catalogue, as the kernel would.
func call(t *testing.T, p *mcpprovider.Provider, a authority.AccessContext, pinned providers.Catalog, name string) (providers.Result, error) {
	t.Helper()
	for _, d := range pinned.Definitions {
		if d.Name != name {
			continue
		}
		nt, err := catalog.Normalize("gh", d, catalog.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Invoke(ctxT(t), providers.Call{Access: a, Tool: catalog.Identity{Provider: "gh", Name: name}, Revision: nt.Revision, Token: d.Token, Arguments: json.RawMessage(`{}`)})
	}
	t.Fatalf("%s is not in the pinned catalogue %v", name, names(pinned))
	return providers.Result{}, nil
}

func statusOf(p *mcpprovider.Provider, profile string) mcpprovider.ProfileStatus {
	for _, st := range p.Status() {
		if st.Profile == profile {
			return st
		}
	}
	return mcpprovider.ProfileStatus{}
}

func TestOAuthClientCredentialsServesTheGrantsTools(t *testing.T) {
	e := newOAuthEnv(t)
	_, p := e.node(t, "n1")
	cat, err := p.Catalog(ctxT(t), as("ada", "bot"))
	if err != nil {
		t.Fatal(err)
	}
	if got := names(cat); !slices.Equal(got, []string{"delete_repo", "read_repo"}) {
		t.Fatalf("tools %v: the service's scope (repo:read) decides", got)
	}
	res, err := call(t, p, as("ada", "bot"), cat, "read_repo")
	if err != nil || res.Text != "ran read_repo as svc" {
		t.Fatalf("call: %+v %v", res, err)
	}
	// Every principal of a service profile shares its one grant.
	if _, err := p.Catalog(ctxT(t), as("bob", "bot")); err != nil || e.as.Requests("client_credentials") != 1 {
		t.Fatalf("%v; %d grants", err, e.as.Requests("client_credentials"))
	}
	// Expired: a new token, the same grant identity, no re-discovery.
	before := p.Discoveries()
	e.clock.Advance(2 * time.Minute)
	if res, err = call(t, p, as("ada", "bot"), cat, "read_repo"); err != nil {
		t.Fatal(err)
	}
	if e.as.Requests("client_credentials") != 2 || p.Discoveries() != before {
		t.Fatalf("%d grants, %d discoveries (was %d)", e.as.Requests("client_credentials"), p.Discoveries(), before)
	}
	if st := statusOf(p, "acme/bot"); st.State != mcpprovider.StateReady {
		t.Fatalf("status %+v", st)
	}
	e.assertStatusHasNoToken(t, p)
}

func TestOAuthStepUpIsATypedRefusalNamingTheScope(t *testing.T) {
	e := newOAuthEnv(t)
	_, p := e.node(t, "n1")
	cat, err := p.Catalog(ctxT(t), as("ada", "bot"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = call(t, p, as("ada", "bot"), cat, "delete_repo")
	if reason.Of(err) != reason.InsufficientScope || !strings.Contains(err.Error(), "repo:admin") || !errors.Is(err, providers.ErrNotDispatched) {
		t.Fatalf("step-up: %v, want insufficient_scope naming repo:admin, not dispatched", err)
	}
	if e.rs.Calls.Load() != 0 {
		t.Fatal("the tool ran")
	}
	if st := statusOf(p, "acme/bot"); st.State == mcpprovider.StateAuthRequired || st.State == mcpprovider.StateFailed {
		t.Fatalf("one tool's missing scope is not the profile's failure: %+v", st)
	}
}

func TestOAuthPerPrincipalAccountsSeeTheirOwnTools(t *testing.T) {
	e := newOAuthEnv(t)
	_, p := e.node(t, "n1")
	if _, err := p.Catalog(ctxT(t), as("ada", "gh-user")); reason.Of(err) != reason.AuthRequired {
		t.Fatalf("before a login: %v, want auth_required", err)
	}
	if st := statusOf(p, "acme/gh-user#ada"); st.State != mcpprovider.StateAuthRequired || !strings.Contains(st.Error, "node oauth login") {
		t.Fatalf("status %+v: auth_required, saying what to do", st)
	}
	e.login(t, p, "ada", "alice", "pw-a")
	e.login(t, p, "bea", "bob", "pw-b")
	ca, err := p.Catalog(ctxT(t), as("ada", "gh-user"))
	if err != nil {
		t.Fatal(err)
	}
	cb, err := p.Catalog(ctxT(t), as("bea", "gh-user"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names(ca), []string{"create_issue", "delete_repo", "read_repo"}) || !slices.Equal(names(cb), []string{"delete_repo", "read_repo"}) {
		t.Fatalf("account A %v, account B %v", names(ca), names(cb))
	}
	if res, err := call(t, p, as("bea", "gh-user"), cb, "read_repo"); err != nil || res.Text != "ran read_repo as bob" {
		t.Fatalf("bea's call goes as her own account: %+v %v", res, err)
	}
	if _, err := p.Catalog(ctxT(t), as("cy", "gh-user")); reason.Of(err) != reason.AuthRequired {
		t.Fatalf("a principal who never authorized gets no one else's grant: %v", err)
	}
	e.assertStatusHasNoToken(t, p)
}

// Refresh rotates tokens without a re-discovery; a refresh that narrows
// the scopes is a discovery event; an open turn's pinned tool that went
// is capability_changed.
func TestOAuthRefreshAndScopeChangeRediscovers(t *testing.T) {
	e := newOAuthEnv(t)
	_, p := e.node(t, "n1")
	e.login(t, p, "ada", "alice", "pw-a")
	pinned, err := p.Catalog(ctxT(t), as("ada", "gh-user"))
	if err != nil {
		t.Fatal(err)
	}
	before := p.Discoveries()
	e.clock.Advance(2 * time.Minute)
	if _, err := call(t, p, as("ada", "gh-user"), pinned, "create_issue"); err != nil {
		t.Fatal(err)
	}
	if e.as.Requests("refresh_token") != 1 || p.Discoveries() != before {
		t.Fatalf("a rotating refresh: %d refreshes, %d discoveries (was %d)", e.as.Requests("refresh_token"), p.Discoveries(), before)
	}
	e.as.SetUserScopes("alice", []string{"repo:read"})
	e.clock.Advance(2 * time.Minute)
	now, err := p.Catalog(ctxT(t), as("ada", "gh-user"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names(now), []string{"delete_repo", "read_repo"}) || p.Discoveries() != before+1 {
		t.Fatalf("after the scopes narrowed: %v, %d discoveries (was %d)", names(now), p.Discoveries(), before)
	}
	if _, err := call(t, p, as("ada", "gh-user"), pinned, "create_issue"); reason.Of(err) != reason.CapabilityChanged {
		t.Fatalf("a pinned tool the new grant does not offer: %v", err)
	}
}

// Expiry while a turn is open, with the refresh token revoked: the turn
// keeps its pinned catalogue, its calls fail auth_required (not
// provider_error), the tool never runs, and status says why; a new login
// restores it.
func TestOAuthRevokedRefreshIsAuthRequired(t *testing.T) {
	e := newOAuthEnv(t)
	_, p := e.node(t, "n1")
	e.login(t, p, "ada", "alice", "pw-a")
	pinned, err := p.Catalog(ctxT(t), as("ada", "gh-user"))
	if err != nil {
		t.Fatal(err)
	}
	e.as.RevokeUser("alice")
	e.clock.Advance(2 * time.Minute)
	_, err = call(t, p, as("ada", "gh-user"), pinned, "read_repo")
	if reason.Of(err) != reason.AuthRequired || !errors.Is(err, providers.ErrNotDispatched) || !strings.Contains(err.Error(), "authentication expired") {
		t.Fatalf("call: %v, want auth_required, not dispatched", err)
	}
	if e.rs.Calls.Load() != 0 {
		t.Fatal("a tool ran from a snapshot whose credential is auth_required")
	}
	st := statusOf(p, "acme/gh-user#ada")
	if st.State != mcpprovider.StateAuthRequired || !st.LastKnown || !strings.Contains(st.Error, "invalid_grant") {
		t.Fatalf("status %+v: auth_required, the last snapshot shown as last-known, with the reason", st)
	}
	if _, err := p.Catalog(ctxT(t), as("ada", "gh-user")); reason.Of(err) != reason.AuthRequired {
		t.Fatalf("a new turn: %v", err)
	}
	e.login(t, p, "ada", "alice", "pw-a")
	if res, err := call(t, p, as("ada", "gh-user"), pinned, "read_repo"); err != nil || res.Text != "ran read_repo as alice" {
		t.Fatalf("after a new login: %+v %v", res, err)
	}
	e.assertStatusHasNoToken(t, p)
}

// A token the server refuses before its expiry (revoked at the AS) is
// refreshed once and the call goes through.
func TestOAuthRefusedTokenIsRefreshedOnce(t *testing.T) {
	e := newOAuthEnv(t)
	m, p := e.node(t, "n1")
	e.login(t, p, "ada", "alice", "pw-a")
	pinned, err := p.Catalog(ctxT(t), as("ada", "gh-user"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := m.Token(ctxT(t), oauth.Ref{Server: "gh", Tenant: "acme", Profile: "gh-user", Principal: "ada"}, &oauth.Client{Flow: oauth.FlowAuthorizationCode})
	if err != nil {
		t.Fatal(err)
	}
	e.as.RevokeAccess(tok.Access)
	if res, err := call(t, p, as("ada", "gh-user"), pinned, "read_repo"); err != nil || res.Text != "ran read_repo as alice" {
		t.Fatalf("%+v %v", res, err)
	}
	if e.as.Requests("refresh_token") != 1 {
		t.Fatalf("%d refreshes, want 1", e.as.Requests("refresh_token"))
	}
}

// Two nodes (two providers over one store) whose token expired call at
// once: one refresh reaches the authorization server.
func TestOAuthTwoNodesRefreshOnce(t *testing.T) {
	e := newOAuthEnv(t)
	_, p1 := e.node(t, "n1")
	_, p2 := e.node(t, "n2")
	e.login(t, p1, "ada", "alice", "pw-a")
	c1, err := p1.Catalog(ctxT(t), as("ada", "gh-user"))
	if err != nil {
		t.Fatal(err)
	}
	c2, err := p2.Catalog(ctxT(t), as("ada", "gh-user"))
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Minute)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		p, c := p1, c1
		if i%2 == 1 {
			p, c = p2, c2
		}
		wg.Go(func() { _, errs[i] = call(t, p, as("ada", "gh-user"), c, "read_repo") })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if n := e.as.Requests("refresh_token"); n != 1 {
		t.Fatalf("%d refreshes at the AS, want 1", n)
	}
}

// Step-up: the profile authorized again with the scope the refusal named
// runs the call, from the same pinned catalogue.
func TestOAuthStepUpReauthorizes(t *testing.T) {
	e := newOAuthEnv(t)
	e.as.AddClient(oauthtest.Client{ID: "web", Secret: "web-secret", Grants: []string{"authorization_code", "refresh_token"},
		Scopes: []string{"repo:read", "issues:write", "repo:admin"}, RedirectURIs: []string{e.cb.URL + oauth.CallbackPath}})
	e.as.SetUserScopes("alice", []string{"repo:read", "issues:write", "repo:admin"})
	_, p := e.node(t, "n1")
	e.login(t, p, "ada", "alice", "pw-a")
	pinned, err := p.Catalog(ctxT(t), as("ada", "gh-user"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = call(t, p, as("ada", "gh-user"), pinned, "delete_repo")
	if reason.Of(err) != reason.InsufficientScope || !strings.Contains(err.Error(), "repo:admin") {
		t.Fatalf("before step-up: %v", err)
	}
	e.login(t, p, "ada", "alice", "pw-a", "repo:admin")
	if res, err := call(t, p, as("ada", "gh-user"), pinned, "delete_repo"); err != nil || res.Text != "ran delete_repo as alice" {
		t.Fatalf("after authorizing repo:admin: %+v %v", res, err)
	}
}

// A logout withdraws one principal's grant on every node: their next
// catalogue and their pinned turn's calls are auth_required, another
// principal's grant is untouched, and after a new login no node serves
// what it discovered with the withdrawn grant.
func TestOAuthLogoutWithdrawsOnePrincipalsGrant(t *testing.T) {
	e := newOAuthEnv(t)
	_, p1 := e.node(t, "n1")
	_, p2 := e.node(t, "n2")
	e.login(t, p1, "ada", "alice", "pw-a")
	e.login(t, p1, "bea", "bob", "pw-b")
	pinned, err := p1.Catalog(ctxT(t), as("ada", "gh-user"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Catalog(ctxT(t), as("ada", "gh-user")); err != nil {
		t.Fatal(err)
	}
	if err := p1.Logout(ctxT(t), "acme", "gh-user", ""); err == nil {
		t.Fatal("a per-principal profile's logout names the principal")
	}
	if err := p1.Logout(ctxT(t), "acme", "gh-user", "ada"); err != nil {
		t.Fatal(err)
	}
	if _, err := p1.Catalog(ctxT(t), as("ada", "gh-user")); reason.Of(err) != reason.AuthRequired {
		t.Fatalf("after the logout, on the node that did it: %v, want auth_required", err)
	}
	if _, err := call(t, p1, as("ada", "gh-user"), pinned, "read_repo"); reason.Of(err) != reason.AuthRequired {
		t.Fatalf("a pinned turn's call after the logout: %v, want auth_required", err)
	}
	if _, err := p1.Catalog(ctxT(t), as("bea", "gh-user")); err != nil {
		t.Fatalf("another principal's grant is untouched: %v", err)
	}
	// The same account authorizes again, same scopes: node 2 discovered
	// with the withdrawn grant and must not serve that.
	e.login(t, p1, "ada", "alice", "pw-a")
	before := p2.Discoveries()
	if _, err := p2.Catalog(ctxT(t), as("ada", "gh-user")); err != nil {
		t.Fatal(err)
	}
	if p2.Discoveries() != before+1 {
		t.Fatalf("node 2 served the catalogue discovered with the withdrawn grant (%d discoveries, was %d)", p2.Discoveries(), before)
	}
	e.assertStatusHasNoToken(t, p1)
}

// What a provider holds per principal is bounded: past MaxPrincipals the
// least recently used is let go, past PrincipalIdle any unused one, and a
// principal let go connects and discovers again on their next turn.
func TestOAuthPrincipalSessionsAreBounded(t *testing.T) {
	e := newOAuthEnv(t)
	m, _ := e.node(t, "n1")
	cfg := e.cfg
	cfg.MaxPrincipals, cfg.PrincipalIdle = 2, mcpprovider.Duration(time.Hour)
	p, err := mcpprovider.New("gh", cfg, &mcpprovider.Options{OAuth: m, Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	held := func() []string {
		var out []string
		for _, st := range p.Status() {
			out = append(out, st.Profile)
		}
		slices.Sort(out)
		return out
	}
	for _, who := range []string{"ada", "bea", "cy"} {
		e.login(t, p, who, "alice", "pw-a")
	}
	for _, who := range []string{"ada", "bea", "ada", "cy"} {
		if _, err := p.Catalog(ctxT(t), as(who, "gh-user")); err != nil {
			t.Fatal(err)
		}
	}
	if got := held(); !slices.Equal(got, []string{"acme/gh-user#ada", "acme/gh-user#cy"}) {
		t.Fatalf("held %v: at most 2, bea (least recently used) let go", got)
	}
	before := p.Discoveries()
	if _, err := p.Catalog(ctxT(t), as("bea", "gh-user")); err != nil || p.Discoveries() != before+1 {
		t.Fatalf("bea again: %v, %d discoveries (was %d): connects and discovers anew", err, p.Discoveries(), before)
	}
	e.clock.Advance(2 * time.Hour)
	e.login(t, p, "dee", "alice", "pw-a")
	if _, err := p.Catalog(ctxT(t), as("dee", "gh-user")); err != nil {
		t.Fatal(err)
	}
	if got := held(); !slices.Equal(got, []string{"acme/gh-user#dee"}) {
		t.Fatalf("held %v: the idle ones let go", got)
	}
}
