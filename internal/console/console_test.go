package console

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/reason"
)

// fakeSource is a node of two tenants' turns and one MCP provider.
type fakeSource struct {
	mu  sync.Mutex
	ids *identity.Set
}

func (f *fakeSource) Identities() *identity.Set {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ids
}

var fakeTurns = []actors.TurnView{
	{TurnInfo: actors.TurnInfo{TurnID: "n1.acme1", Tenant: "acme", Principal: "ada", CatalogHash: "sha256:aaaa", Steps: 1, StepCeiling: 64}, Resolved: true, Opener: "runtime"},
	{TurnInfo: actors.TurnInfo{TurnID: "n1.globex1", Tenant: "globex", Principal: "gina", CatalogHash: "sha256:gggg", StepCeiling: 64}, Resolved: true, Opener: "globex-rt"},
}

func (f *fakeSource) Providers() []Provider {
	return []Provider{{ID: "github", Kind: "mcp", Discovery: []mcpprovider.ProfileStatus{
		{Server: "github", Profile: "acme/work", State: mcpprovider.StateAuthRequired, Class: mcpprovider.ClassAuthExpired,
			Error: "HTTP 401", Tools: 2, LastKnown: true, Names: []string{"search", "create_issue"}, Checked: time.Now().Add(-2 * time.Hour)},
		{Server: "github", Profile: "globex/work", State: mcpprovider.StateReady, Tools: 1, Names: []string{"globex_only"}, Checked: time.Now()},
	}}}
}

func (f *fakeSource) Turns(_ context.Context, tenant func(string) bool) ([]actors.TurnView, error) {
	var out []actors.TurnView
	for _, t := range fakeTurns {
		if tenant(t.Tenant) {
			out = append(out, t)
		}
	}
	return out, nil
}

func (f *fakeSource) Turn(_ context.Context, id string) (actors.TurnView, error) {
	for _, t := range fakeTurns {
		if t.TurnID == id {
			return t, nil
		}
	}
	return actors.TurnView{}, reason.New(reason.TurnNotFound, "no turn %s", id)
}

func newFake(t *testing.T) (*Console, *fakeSource, *httptest.Server) {
	t.Helper()
	ids, err := identity.NewSet([]identity.Identity{
		{Name: "admin", Role: identity.Admin},
		{Name: "auditor-acme", Role: identity.Audit, Tenants: []string{"acme"}},
		{Name: "node", Role: identity.Node},
		{Name: "provider-x", Role: identity.Provider, Provider: "x"},
	})
	if err != nil {
		t.Fatal(err)
	}
	src := &fakeSource{ids: ids}
	c, err := New(Options{Node: "n1", Source: src})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(Path, c.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return c, src, srv
}

// browser is an HTTP client with a cookie jar that does not follow
// redirects on its own.
func browser(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar}
}

func get(t *testing.T, cl *http.Client, u string) (int, string, http.Header) {
	t.Helper()
	resp, err := cl.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func signIn(t *testing.T, c *Console, srv *httptest.Server, name string) *http.Client {
	t.Helper()
	tok, _, err := c.IssueLogin(name)
	if err != nil {
		t.Fatal(err)
	}
	cl := browser(t)
	if code, body, _ := get(t, cl, srv.URL+LoginPath(tok)); code != http.StatusOK || !strings.Contains(body, "<h1>Providers</h1>") {
		t.Fatalf("login: %d %s", code, body)
	}
	return cl
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// A login link works once; a session's pages carry the security headers;
// a POST without the session's token, or with another's, or from another
// origin is refused and ends nothing; with it, it signs out.
func TestLoginOnceCSRFAndHeaders(t *testing.T) {
	c, _, srv := newFake(t)
	tok, _, err := c.IssueLogin("admin")
	if err != nil {
		t.Fatal(err)
	}
	cl := browser(t)
	if code, _, _ := get(t, cl, srv.URL+LoginPath(tok)); code != http.StatusOK {
		t.Fatalf("first use: %d", code)
	}
	if code, _, _ := get(t, browser(t), srv.URL+LoginPath(tok)); code != http.StatusUnauthorized {
		t.Fatalf("second use of a login link: %d, want 401", code)
	}
	code, body, h := get(t, cl, srv.URL+Path+"turns")
	if code != http.StatusOK {
		t.Fatalf("turns: %d", code)
	}
	for k, want := range map[string]string{"Content-Security-Policy": CSP, "X-Frame-Options": "DENY", "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"} {
		if got := h.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	if !strings.Contains(body, "n1.acme1") || !strings.Contains(body, "n1.globex1") {
		t.Fatalf("an admin sees every tenant's turns: %s", body)
	}
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no CSRF field in the page")
	}
	post := func(form url.Values, origin string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+Path+"logout", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	other := signIn(t, c, srv, "auditor-acme")
	_, otherBody, _ := get(t, other, srv.URL+Path+"providers")
	for name, tc := range map[string]struct {
		form   url.Values
		origin string
	}{
		"no token":                {url.Values{}, ""},
		"another session's":       {url.Values{"csrf": {csrfField.FindStringSubmatch(otherBody)[1]}}, ""},
		"right token, cross-site": {url.Values{"csrf": {m[1]}}, "http://evil.example"},
	} {
		if code := post(tc.form, tc.origin); code != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, code)
		}
	}
	if code, _, _ := get(t, cl, srv.URL+Path+"providers"); code != http.StatusOK {
		t.Fatalf("a refused POST ended the session: %d", code)
	}
	if code := post(url.Values{"csrf": {m[1]}}, ""); code != http.StatusOK {
		t.Fatalf("sign out with the token: %d", code)
	}
	if code, _, _ := get(t, cl, srv.URL+Path+"providers"); code != http.StatusUnauthorized {
		t.Fatalf("after sign-out: %d, want 401", code)
	}
}

// A reader bound to acme sees acme's turns and provider profiles only;
// globex's turn is "not found" to it and asking for the tenant is refused.
func TestTenantBinding(t *testing.T) {
	c, _, srv := newFake(t)
	cl := signIn(t, c, srv, "auditor-acme")
	_, body, _ := get(t, cl, srv.URL+Path+"turns")
	if !strings.Contains(body, "n1.acme1") || strings.Contains(body, "globex") {
		t.Fatalf("acme reader's turns page: %s", body)
	}
	if code, _, _ := get(t, cl, srv.URL+Path+"turns/n1.globex1"); code != http.StatusNotFound {
		t.Fatalf("globex turn for an acme reader: %d, want 404", code)
	}
	if code, _, _ := get(t, cl, srv.URL+Path+"turns?tenant=globex"); code != http.StatusForbidden {
		t.Fatalf("?tenant=globex for an acme reader: %d, want 403", code)
	}
	_, body, _ = get(t, cl, srv.URL+Path+"providers")
	if !strings.Contains(body, "acme/work") || strings.Contains(body, "globex") {
		t.Fatalf("acme reader's providers page: %s", body)
	}
	// The article's example: a failed refresh keeps the last known tools
	// on show, as last known, and says why; never "No tools found".
	for _, want := range []string{"Auth required", "Unable to refresh: authentication expired", "Last known tools", "create_issue", "Last checked:", "2 hours ago"} {
		if !strings.Contains(body, want) {
			t.Errorf("providers page lacks %q", want)
		}
	}
	if strings.Contains(strings.ToLower(body), "no tools found") {
		t.Error(`providers page says "no tools found"`)
	}
}

// Nodes, providers and unknown names get no login link; an identity
// removed from the node's identities is signed out at its next request.
func TestWhoMaySignIn(t *testing.T) {
	c, src, srv := newFake(t)
	for _, name := range []string{"node", "provider-x", "nobody"} {
		if _, _, err := c.IssueLogin(name); !errors.Is(err, ErrForbidden) {
			t.Errorf("%s: %v, want ErrForbidden", name, err)
		}
	}
	if rep := c.answerLogin("", ""); rep.Error == nil {
		t.Error("a login request without Nats-Request-Info was answered with a link")
	}
	if rep := c.answerLogin(`{"acc":"admin"}`, "127.0.0.1:1"); rep.Error != nil || !strings.HasPrefix(rep.Path, LoginPath("")) {
		t.Errorf("stamped request: %+v", rep)
	}
	cl := signIn(t, c, srv, "auditor-acme")
	ids, _ := identity.NewSet([]identity.Identity{{Name: "admin", Role: identity.Admin}})
	src.mu.Lock()
	src.ids = ids
	src.mu.Unlock()
	if code, _, _ := get(t, cl, srv.URL+Path+"providers"); code != http.StatusUnauthorized {
		t.Fatalf("removed identity: %d, want 401", code)
	}
}

// A login token expires; a session expires.
func TestExpiry(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	s := newSessions(clock, time.Minute, time.Hour, 4)
	tok, _, _ := s.issue("admin")
	now = now.Add(time.Minute)
	if _, _, err := s.redeem(tok); !errors.Is(err, ErrLoginInvalid) {
		t.Fatalf("expired token: %v", err)
	}
	tok, _, _ = s.issue("admin")
	cookie, _, err := s.redeem(tok)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.lookup(cookie); !ok {
		t.Fatal("fresh session not found")
	}
	now = now.Add(time.Hour)
	if _, ok := s.lookup(cookie); ok {
		t.Fatal("expired session found")
	}
	for range 4 {
		if _, _, err := s.issue("admin"); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.issue("admin"); !errors.Is(err, ErrTooMany) {
		t.Fatalf("beyond the bound: %v", err)
	}
}
