package oauth_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/sharedos/sharedos/internal/natsserver/natstest"
	"github.com/sharedos/sharedos/internal/oauth"
	"github.com/sharedos/sharedos/internal/oauth/oauthtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type env struct {
	clock *oauthtest.Clock
	as    *oauthtest.Server
	rs    *oauthtest.ResourceServer
	js    jetstream.JetStream
	seal  *oauth.Sealer
	cb    *httptest.Server // the node's callback listener
	mgr   *oauth.Manager
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{clock: &oauthtest.Clock{}}
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections)
	e.as = oauthtest.NewServer(e.clock)
	t.Cleanup(e.as.Close)
	e.rs = oauthtest.NewResourceServer(e.as, []oauthtest.Tool{{Name: "read_repo", ListScope: "repo:read"}})
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
	mux := http.NewServeMux()
	e.cb = httptest.NewServer(mux)
	t.Cleanup(e.cb.Close)
	e.mgr = e.manager(t, "n1")
	mux.Handle(oauth.CallbackPath, e.mgr.Callback(func(oauth.Ref) (string, error) { return "web-secret", nil }))
	e.as.AddClient(oauthtest.Client{ID: "svc", Secret: "svc-secret", Grants: []string{"client_credentials"}, Scopes: []string{"repo:read"}})
	e.as.AddClient(oauthtest.Client{ID: "web", Secret: "web-secret", Grants: []string{"authorization_code", "refresh_token"},
		Scopes: []string{"repo:read", "issues:write"}, RedirectURIs: []string{e.cb.URL + oauth.CallbackPath}})
	e.as.AddUser(oauthtest.User{Name: "alice", Password: "pw-a", Scopes: []string{"repo:read", "issues:write"}})
	return e
}

func (e *env) manager(t *testing.T, holder string) *oauth.Manager {
	t.Helper()
	m, err := oauth.New(ctxT(t), e.js, e.seal, &oauth.Options{Holder: holder, Now: e.clock.Now, RedirectURL: e.cb.URL + oauth.CallbackPath})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func secret(s string) func() (string, error) { return func() (string, error) { return s, nil } }

func (e *env) service() *oauth.Client {
	return &oauth.Client{Flow: oauth.FlowClientCredentials, ClientID: "svc", Secret: secret("svc-secret"), Resource: e.rs.URL + oauthtest.MCPPath}
}

func (e *env) person() *oauth.Client {
	return &oauth.Client{Flow: oauth.FlowAuthorizationCode, ClientID: "web", Secret: secret("web-secret"),
		Scopes: []string{"repo:read", "issues:write"}, Resource: e.rs.URL + oauthtest.MCPPath}
}

// Login follows an authorization link as a browser would: the AS's
// form, the redirect to the node's callback.
func Login(t *testing.T, link, user, password string) string {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}
	resp, err := hc.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`name="req" value="([^"]+)"`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no login form at %s: %d %s", link, resp.StatusCode, body)
	}
	u, _ := url.Parse(link)
	resp, err = hc.PostForm(u.Scheme+"://"+u.Host+"/login", url.Values{"req": {string(m[1])}, "username": {user}, "password": {password}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("callback answered %d: %s", resp.StatusCode, body)
	}
	return string(body)
}

func TestClientCredentialsDiscoversAndSealsTheToken(t *testing.T) {
	e := newEnv(t)
	ref := oauth.Ref{Server: "gh", Tenant: "acme", Profile: "bot"}
	tok, err := e.mgr.Token(ctxT(t), ref, e.service())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.as.Verify(tok.Access, e.rs.URL+oauthtest.MCPPath); err != nil {
		t.Fatalf("the token is not one the AS issued for the server: %v", err)
	}
	again, err := e.mgr.Token(ctxT(t), ref, e.service())
	if err != nil || again.Access != tok.Access || e.as.Requests("client_credentials") != 1 {
		t.Fatalf("a valid token is reused: %v, %d requests", err, e.as.Requests("client_credentials"))
	}
	// At rest: the bucket holds no token in the clear.
	kv, _ := e.js.KeyValue(ctxT(t), oauth.DefaultBucket)
	keys, _ := kv.Keys(ctxT(t))
	for _, k := range keys {
		v, _ := kv.Get(ctxT(t), k)
		if bytes.Contains(v.Value(), []byte(tok.Access)) || bytes.Contains(v.Value(), []byte("repo:read")) {
			t.Fatalf("key %s holds the grant in the clear", k)
		}
	}
	// Expiry: a new token is obtained.
	e.clock.Advance(2 * time.Minute)
	next, err := e.mgr.Token(ctxT(t), ref, e.service())
	if err != nil || next.Access == tok.Access || e.as.Requests("client_credentials") != 2 {
		t.Fatalf("an expired client-credentials token is replaced: %v, %d requests", err, e.as.Requests("client_credentials"))
	}
	if next.Identity != tok.Identity {
		t.Fatal("a new token with the same scopes is the same grant identity")
	}
	// A wrong secret is refused by the AS: auth required, with the AS's code.
	bad := e.service()
	bad.Secret = secret("wrong")
	_, err = e.mgr.Token(ctxT(t), oauth.Ref{Server: "gh", Tenant: "acme", Profile: "other"}, bad)
	if !errors.Is(err, oauth.ErrAuthRequired) || !strings.Contains(err.Error(), "invalid_client") {
		t.Fatalf("a wrong client secret: %v", err)
	}
}

func TestPinnedIssuerIsEnforced(t *testing.T) {
	e := newEnv(t)
	c := e.service()
	c.Issuer = "https://elsewhere.example"
	_, err := e.mgr.Token(ctxT(t), oauth.Ref{Server: "gh", Tenant: "acme", Profile: "bot"}, c)
	if !errors.Is(err, oauth.ErrAuthRequired) || e.as.Requests("client_credentials") != 0 {
		t.Fatalf("a server naming another issuer than the pinned one gets no secret: %v, %d requests", err, e.as.Requests("client_credentials"))
	}
}

func TestAuthorizationCodeRefreshRotationAndRevocation(t *testing.T) {
	e := newEnv(t)
	ref := oauth.Ref{Server: "gh", Tenant: "acme", Profile: "gh-user", Principal: "ada"}
	if _, err := e.mgr.Token(ctxT(t), ref, e.person()); !errors.Is(err, oauth.ErrAuthRequired) {
		t.Fatalf("before a login: %v, want auth required", err)
	}
	login, err := e.mgr.BeginLogin(ctxT(t), ref, e.person())
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(login.URL)
	q := u.Query()
	if q.Get("code_challenge_method") != "S256" || q.Get("resource") != e.rs.URL+oauthtest.MCPPath || q.Get("state") == "" {
		t.Fatalf("authorization URL %s: PKCE S256, resource and state", login.URL)
	}
	if body := Login(t, login.URL, "alice", "pw-a"); !strings.Contains(body, "Authorized") {
		t.Fatalf("callback: %s", body)
	}
	first, err := e.mgr.Token(ctxT(t), ref, e.person())
	if err != nil {
		t.Fatal(err)
	}
	// The link is one use: following it again completes nothing.
	resp, err := http.Get(e.cb.URL + oauth.CallbackPath + "?state=" + q.Get("state") + "&code=x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a used login answered %d", resp.StatusCode)
	}

	e.clock.Advance(2 * time.Minute)
	second, err := e.mgr.Token(ctxT(t), ref, e.person())
	if err != nil || second.Access == first.Access || e.as.Requests("refresh_token") != 1 {
		t.Fatalf("refresh: %v, %d refreshes", err, e.as.Requests("refresh_token"))
	}
	if second.Identity != first.Identity {
		t.Fatal("a refresh with the same scopes keeps the grant identity")
	}
	// A narrower account: the next refresh grants less, the identity changes.
	e.as.SetUserScopes("alice", []string{"repo:read"})
	e.clock.Advance(2 * time.Minute)
	third, err := e.mgr.Token(ctxT(t), ref, e.person())
	if err != nil || third.Identity == second.Identity || strings.Join(third.Scopes, " ") != "repo:read" {
		t.Fatalf("a refresh narrowing the scopes: %v %v", err, third.Scopes)
	}
	// Revoked at the AS: the refresh is refused and the grant stays failed.
	e.as.RevokeUser("alice")
	e.clock.Advance(2 * time.Minute)
	_, err = e.mgr.Token(ctxT(t), ref, e.person())
	if !errors.Is(err, oauth.ErrAuthRequired) || !strings.Contains(err.Error(), "invalid_grant") {
		t.Fatalf("a revoked refresh token: %v", err)
	}
	n := e.as.Requests("refresh_token")
	if _, err := e.mgr.Token(ctxT(t), ref, e.person()); !errors.Is(err, oauth.ErrAuthRequired) || e.as.Requests("refresh_token") != n {
		t.Fatalf("a failed grant is not retried at the AS until authorized again: %v", err)
	}
	// A new login authorizes again, with a new identity.
	login, err = e.mgr.BeginLogin(ctxT(t), ref, e.person())
	if err != nil {
		t.Fatal(err)
	}
	Login(t, login.URL, "alice", "pw-a")
	fourth, err := e.mgr.Token(ctxT(t), ref, e.person())
	if err != nil || fourth.Identity == third.Identity {
		t.Fatalf("re-authorized: %v", err)
	}
}

func TestTwoNodesRefreshingAtOnceRefreshOnce(t *testing.T) {
	e := newEnv(t)
	ref := oauth.Ref{Server: "gh", Tenant: "acme", Profile: "gh-user", Principal: "ada"}
	login, err := e.mgr.BeginLogin(ctxT(t), ref, e.person())
	if err != nil {
		t.Fatal(err)
	}
	Login(t, login.URL, "alice", "pw-a")
	if _, err := e.mgr.Token(ctxT(t), ref, e.person()); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Minute)
	nodes := []*oauth.Manager{e.mgr, e.manager(t, "n2"), e.manager(t, "n3")}
	var wg sync.WaitGroup
	toks := make([]oauth.Token, 12)
	errs := make([]error, len(toks))
	for i := range toks {
		wg.Go(func() { toks[i], errs[i] = nodes[i%len(nodes)].Token(ctxT(t), ref, e.person()) })
	}
	wg.Wait()
	for i := range toks {
		if errs[i] != nil || toks[i].Access != toks[0].Access {
			t.Fatalf("caller %d: %v: every node uses the one refreshed token (%s vs %s; %d refreshes)", i, errs[i], toks[i].Access, toks[0].Access, e.as.Requests("refresh_token"))
		}
	}
	if n := e.as.Requests("refresh_token"); n != 1 {
		t.Fatalf("%d refreshes at the AS, want 1 (a rotating refresh token sent twice revokes the grant)", n)
	}
}

func TestStoredGrantOpensOnlyUnderItsKey(t *testing.T) {
	e := newEnv(t)
	ref := oauth.Ref{Server: "gh", Tenant: "acme", Profile: "bot"}
	if _, err := e.mgr.Token(ctxT(t), ref, e.service()); err != nil {
		t.Fatal(err)
	}
	other, err := oauth.LoadOrCreateKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := oauth.New(ctxT(t), e.js, other, &oauth.Options{Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Token(ctxT(t), ref, e.service()); err == nil || errors.Is(err, oauth.ErrAuthRequired) {
		t.Fatalf("a node with another key reads nothing: %v", err)
	}
}

func TestKeyFileIsPrivateAndCreatedOnce(t *testing.T) {
	dir := t.TempDir()
	a, err := oauth.LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := oauth.LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	sealed := a.Seal([]byte("x"), []byte("k"))
	if got, err := b.Open(sealed, []byte("k")); err != nil || string(got) != "x" {
		t.Fatal("the second load is the same key")
	}
	if _, err := b.Open(sealed, []byte("other")); err == nil {
		t.Fatal("a record moved to another key does not open")
	}
	path := filepath.Join(dir, oauth.KeyFileName)
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := oauth.LoadOrCreateKey(dir); err == nil {
		t.Fatal("a key file others may read is refused")
	}
}

func TestCallbackRefusesAnotherIssuer(t *testing.T) {
	e := newEnv(t)
	ref := oauth.Ref{Server: "gh", Tenant: "acme", Profile: "gh-user", Principal: "ada"}
	login, err := e.mgr.BeginLogin(ctxT(t), ref, e.person())
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(login.URL)
	resp, err := http.Get(e.cb.URL + oauth.CallbackPath + "?" + url.Values{"state": {u.Query().Get("state")}, "code": {"c"}, "iss": {"https://evil.example"}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "RFC 9207") || e.as.Requests("authorization_code") != 0 {
		t.Fatalf("a response from another issuer: %d %s; %d code exchanges", resp.StatusCode, body, e.as.Requests("authorization_code"))
	}
}
