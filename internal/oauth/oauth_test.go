package oauth_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
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
	// keyDir holds seal's key file.
	keyDir string
	cb     *httptest.Server // the node's callback listener
	mgr    *oauth.Manager
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
	e.keyDir = t.TempDir()
	if e.seal, err = oauth.LoadOrCreateKey(e.keyDir); err != nil {
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
	svc := oauth.Ref{Server: "gh", Tenant: "acme", Profile: "bot"}
	if _, err := e.mgr.Token(ctxT(t), svc, e.service()); err != nil {
		t.Fatal(err)
	}
	ada := e.login(t, "ada")
	other, err := oauth.LoadOrCreateKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := e.managerWith(t, "n2", other)
	// A person's grant sealed by a key this node does not hold: authorize
	// again, told which key sealed it.
	_, err = m.Token(ctxT(t), ada, e.person())
	if !errors.Is(err, oauth.ErrAuthRequired) || !strings.Contains(err.Error(), e.seal.KeyID()) {
		t.Fatalf("a grant under a key not held: %v, want auth required naming key %s", err, e.seal.KeyID())
	}
	// A service's is obtained anew, replacing the unreadable record.
	if _, err := m.Token(ctxT(t), svc, e.service()); err != nil || e.as.Requests("client_credentials") != 2 {
		t.Fatalf("a service grant under a key not held is obtained anew: %v, %d requests", err, e.as.Requests("client_credentials"))
	}
}

func TestRetiredKeyOpensAndResealMovesGrantsToTheCurrentKey(t *testing.T) {
	e := newEnv(t)
	svc := oauth.Ref{Server: "gh", Tenant: "acme", Profile: "bot"}
	if _, err := e.mgr.Token(ctxT(t), svc, e.service()); err != nil {
		t.Fatal(err)
	}
	ada := e.login(t, "ada")
	oldKey := e.seal.KeyID()
	if got := e.sealedBy(t, ada); got != oldKey {
		t.Fatalf("the record names key %s, want the sealer's %s", got, oldKey)
	}
	oldBytes := readKey(t, e.keyDir)
	// Rotate: a new current key, the old one retired (open only).
	dir := t.TempDir()
	writeKey(t, filepath.Join(dir, oauth.KeyFileName+".old"), oldBytes)
	rotated, err := oauth.LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ids := rotated.KeyIDs(); len(ids) != 2 || ids[0] == oldKey || ids[1] != oldKey {
		t.Fatalf("key ids %v: a new current key, then the retired one", ids)
	}
	m := e.managerWith(t, "n2", rotated)
	for _, ref := range []oauth.Ref{svc, ada} {
		if _, err := m.Token(ctxT(t), ref, e.clientOf(ref)); err != nil {
			t.Fatalf("%s under the retired key opens: %v", ref, err)
		}
	}
	rep, err := m.Reseal(ctxT(t))
	if err != nil || rep.Resealed != 2 || rep.KeyID != rotated.KeyID() || len(rep.Unreadable) != 0 {
		t.Fatalf("reseal: %+v %v, want both grants resealed under %s", rep, err, rotated.KeyID())
	}
	if got := e.sealedBy(t, ada); got != rotated.KeyID() {
		t.Fatalf("after reseal the record names key %s", got)
	}
	if rep, err := m.Reseal(ctxT(t)); err != nil || rep.Resealed != 0 || rep.Current != 2 {
		t.Fatalf("a second reseal has nothing to do: %+v %v", rep, err)
	}
	// The retired key removed: the grants open under the current key alone,
	// with no new authorization.
	only, err := oauth.NewSealer(readKey(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	m3 := e.managerWith(t, "n3", only)
	for _, ref := range []oauth.Ref{svc, ada} {
		if _, err := m3.Token(ctxT(t), ref, e.clientOf(ref)); err != nil {
			t.Fatalf("%s after reseal, without the retired key: %v", ref, err)
		}
	}
	if e.as.Requests("client_credentials") != 1 || e.as.Requests("authorization_code") != 1 {
		t.Fatal("rotation obtained new grants; it should only reseal the stored ones")
	}
	// A node that never got the new key cannot read what was resealed:
	// reseal lists it, the person's grant is auth required.
	rep, err = e.mgr.Reseal(ctxT(t))
	if err != nil || len(rep.Unreadable) != 2 || rep.Unreadable[0].KeyID != rotated.KeyID() {
		t.Fatalf("reseal on a node without the new key: %+v %v", rep, err)
	}
	if _, err := e.mgr.Token(ctxT(t), ada, e.person()); !errors.Is(err, oauth.ErrAuthRequired) {
		t.Fatalf("a grant sealed by a key not held: %v, want auth required", err)
	}
}

// login authorizes principal's grant of the person profile as alice.
func (e *env) login(t *testing.T, principal string) oauth.Ref {
	t.Helper()
	ref := oauth.Ref{Server: "gh", Tenant: "acme", Profile: "gh-user", Principal: principal}
	l, err := e.mgr.BeginLogin(ctxT(t), ref, e.person())
	if err != nil {
		t.Fatal(err)
	}
	Login(t, l.URL, "alice", "pw-a")
	return ref
}

func (e *env) clientOf(ref oauth.Ref) *oauth.Client {
	if ref.Principal == "" {
		return e.service()
	}
	return e.person()
}

func (e *env) managerWith(t *testing.T, holder string, s *oauth.Sealer) *oauth.Manager {
	t.Helper()
	m, err := oauth.New(ctxT(t), e.js, s, &oauth.Options{Holder: holder, Now: e.clock.Now, RedirectURL: e.cb.URL + oauth.CallbackPath})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// sealedBy is the key id ref's stored record names (after the magic).
func (e *env) sealedBy(t *testing.T, ref oauth.Ref) string {
	t.Helper()
	kv, err := e.js.KeyValue(ctxT(t), oauth.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := kv.Keys(ctxT(t))
	for _, k := range keys {
		if strings.HasSuffix(k, "."+base64.RawURLEncoding.EncodeToString([]byte(ref.Principal))) {
			v, _ := kv.Get(ctxT(t), k)
			if !bytes.HasPrefix(v.Value(), []byte("SK1\x00")) {
				t.Fatalf("record %s has no key id", k)
			}
			return hex.EncodeToString(v.Value()[4:12])
		}
	}
	t.Fatalf("no record for %s", ref)
	return ""
}

func readKey(t *testing.T, dir string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, oauth.KeyFileName))
	if err != nil {
		t.Fatal(err)
	}
	k, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writeKey(t *testing.T, path string, key []byte) {
	t.Helper()
	if err := os.WriteFile(path, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
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
	// A retired key beside it opens what it sealed; the current one seals.
	retired := filepath.Join(dir, oauth.KeyFileName+".old")
	writeKey(t, retired, bytes.Repeat([]byte{7}, 32))
	old, _ := oauth.NewSealer(bytes.Repeat([]byte{7}, 32))
	c, err := oauth.LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Open(old.Seal([]byte("y"), []byte("k")), []byte("k")); err != nil || string(got) != "y" || c.KeyID() != a.KeyID() {
		t.Fatalf("a retired key opens, the current one still seals: %v", err)
	}
	if err := os.Chmod(retired, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := oauth.LoadOrCreateKey(dir); err == nil {
		t.Fatal("a retired key file others may read is refused")
	}
	if err := os.Remove(retired); err != nil {
		t.Fatal(err)
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
