package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/internal/node"
	"github.com/sharedos/sharedos/internal/oauth"
	"github.com/sharedos/sharedos/internal/oauth/oauthtest"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A person authorizes their own account through the node: before, the
// turn's listing says auth_required and status shows why; an admin asks
// the node for the link (node oauth login), the person follows it (the
// authorization server's login form), the redirect lands on the node's
// callback; then the turn lists and calls the account's tools. No token
// is in the node's logs, its audit trail, its metrics or its status.
func TestOAuthLoginThroughTheNode(t *testing.T) {
	testOAuthLogin(t, func(t *testing.T, as *oauthtest.Server, link string) { followLogin(t, link, as.URL, "alice", "pw-a") })
}

// The same through a real browser: headless Chromium loads the link, the
// authorization server's page signs in (its form filled and submitted in
// the browser), and Chromium follows the redirect to the node's callback.
func TestOAuthLoginInABrowser(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium not installed (apt-get install chromium): the browser login is not tested")
	}
	testOAuthLogin(t, func(t *testing.T, as *oauthtest.Server, link string) {
		as.PrefillLogin("alice", "pw-a")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
			"--user-data-dir="+t.TempDir(), "--dump-dom", link).Output()
		if err != nil || !strings.Contains(string(out), "Authorized") {
			t.Fatalf("chromium: %v; the page it ended on:\n%s", err, out)
		}
	})
}

func testOAuthLogin(t *testing.T, follow func(t *testing.T, as *oauthtest.Server, link string)) {
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections)
	clock := &oauthtest.Clock{}
	as := oauthtest.NewServer(clock)
	t.Cleanup(as.Close)
	rs := oauthtest.NewResourceServer(as, []oauthtest.Tool{{Name: "read_repo", ListScope: "repo:read"}, {Name: "create_issue", ListScope: "issues:write"}})
	t.Cleanup(rs.Close)
	as.AddUser(oauthtest.User{Name: "alice", Password: "pw-a", Scopes: []string{"repo:read"}})
	t.Setenv("SHAREDOS_TEST_OAUTH_WEB", "web-secret")

	cfg := sampleConfig(t, t.TempDir())
	grant := []authority.GrantSpec{{ID: "gh", Capability: "mcp.gh.*", Resource: "mcp/gh/**"}}
	for i := range cfg.Principals {
		if cfg.Principals[i].Tenant == "acme" && cfg.Principals[i].Principal == "ada" {
			cfg.Principals[i].Grants = append(cfg.Principals[i].Grants, grant...)
		}
	}
	cfg.CredentialProfiles = append(cfg.CredentialProfiles, config.CredentialProfile{Tenant: "acme", Profile: "gh-user", Principals: []string{"ada"}})
	cfg.Identities = append(cfg.Identities, config.Identity{Name: "admin-globex", Role: "admin", Tenants: []string{"globex"}})
	cfg.Providers = append(cfg.Providers, config.Provider{ID: "gh", Kind: "mcp", MCP: &mcpprovider.Config{
		Transport: "http", URL: rs.URL + oauthtest.MCPPath,
		Credentials: []mcpprovider.Credential{{Tenant: "acme", Profile: "gh-user", OAuth: &mcpprovider.OAuth{
			Flow: "authorization_code", ClientID: "web", ClientSecretEnv: "SHAREDOS_TEST_OAUTH_WEB", Scopes: []string{"repo:read", "issues:write"}, Issuer: as.Issuer()}}}}})
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	n, err := node.Start(context.Background(), cfg, node.Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown(context.Background()) })
	callback := "http://" + n.HTTPAddr() + oauth.CallbackPath
	as.AddClient(oauthtest.Client{ID: "web", Secret: "web-secret", Grants: []string{"authorization_code", "refresh_token"},
		Scopes: []string{"repo:read", "issues:write"}, RedirectURIs: []string{callback}})

	rt := client.New(connectAs(t, n, "runtime"), nil)
	access := client.Access{Tenant: "acme", Principal: "ada", Credential: "gh-user", Namespaces: []string{"gh"}}
	turn, err := rt.Open(ctx(t), access)
	if err != nil {
		t.Fatal(err)
	}
	l, err := turn.ListTools(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Tools) != 0 || len(l.Degraded) != 1 || l.Degraded[0].Code != "auth_required" {
		t.Fatalf("before a login: %+v, want no tools and gh degraded auth_required", l)
	}
	if gh := ghStatus(t, n); gh.Profile != "acme/gh-user#ada" || gh.State != mcpprovider.StateAuthRequired || !strings.Contains(gh.Error, "node oauth login") {
		t.Fatalf("status %+v", gh)
	}

	// The admin asks for the link; the person follows it.
	req, _ := json.Marshal(oauth.LoginRequest{Provider: "gh", Tenant: "acme", Profile: "gh-user", Principal: "ada"})
	if m, err := connectAs(t, n, "runtime").Request(oauth.LoginSubject("sharedos"), req, 300*time.Millisecond); err == nil {
		var rep oauth.LoginReply
		if json.Unmarshal(m.Data, &rep) == nil && rep.Login != nil {
			t.Fatal("a runtime identity started a login")
		}
	}
	// A tenant admin of another tenant is refused acme's profile.
	m, err := connectAs(t, n, "admin-globex").Request(oauth.LoginSubject("sharedos"), req, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var refused oauth.LoginReply
	if json.Unmarshal(m.Data, &refused) != nil || refused.Login != nil || refused.Error == nil || refused.Error.Code != "policy_forbidden" {
		t.Fatalf("globex's admin asking for acme's login: %s", m.Data)
	}
	m, err = connectAs(t, n, "admin").Request(oauth.LoginSubject("sharedos"), req, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep oauth.LoginReply
	if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Login == nil {
		t.Fatalf("login: %s %v", m.Data, err)
	}
	if u, _ := url.Parse(rep.Login.URL); u.Query().Get("redirect_uri") != callback {
		t.Fatalf("the link sends the person back to %s, want the node's callback %s", u.Query().Get("redirect_uri"), callback)
	}
	follow(t, as, rep.Login.URL)

	turn, err = rt.Open(ctx(t), access)
	if err != nil {
		t.Fatal(err)
	}
	l, err = turn.ListTools(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var aliases []string
	for _, tl := range l.Tools {
		aliases = append(aliases, tl.Alias)
	}
	if !slices.Equal(aliases, []string{"gh_read_repo"}) || len(l.Degraded) != 0 {
		t.Fatalf("after the login: %v %+v (alice's account grants repo:read only)", aliases, l.Degraded)
	}
	r, err := turn.Invoke(ctx(t), "gh_read_repo", []byte(`{}`))
	if err != nil || !strings.Contains(r.Text, "ran read_repo as alice") {
		t.Fatalf("call: %+v %v", r, err)
	}
	_ = turn.Close(ctx(t))
	if gh := ghStatus(t, n); gh.State != mcpprovider.StateReady {
		t.Fatalf("status after the login %+v", gh)
	}

	// The admin reseals (every grant is under the node's only key
	// already) and withdraws ada's grant: her next turn is auth_required.
	// globex's admin may do neither: resealing moves every tenant's
	// grants, and ada's grant is acme's.
	for _, subject := range []string{oauth.ResealSubject("sharedos"), oauth.LogoutSubject("sharedos")} {
		body, _ := json.Marshal(oauth.LogoutRequest{Provider: "gh", Tenant: "acme", Profile: "gh-user", Principal: "ada"})
		m, err := connectAs(t, n, "admin-globex").Request(subject, body, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep struct {
			Error *oauth.ReplyError `json:"error"`
		}
		if json.Unmarshal(m.Data, &rep) != nil || rep.Error == nil || rep.Error.Code != "policy_forbidden" {
			t.Fatalf("globex's admin on %s: %s", subject, m.Data)
		}
	}
	m, err = connectAs(t, n, "admin").Request(oauth.ResealSubject("sharedos"), []byte(`{}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rr oauth.ResealReply
	if err := json.Unmarshal(m.Data, &rr); err != nil || rr.Report == nil || rr.Report.Current != 1 || rr.Report.Resealed != 0 {
		t.Fatalf("reseal: %s %v", m.Data, err)
	}
	out, _ := json.Marshal(oauth.LogoutRequest{Provider: "gh", Tenant: "acme", Profile: "gh-user", Principal: "ada"})
	if m, err := connectAs(t, n, "runtime").Request(oauth.LogoutSubject("sharedos"), out, 300*time.Millisecond); err == nil {
		var rep oauth.LogoutReply
		if json.Unmarshal(m.Data, &rep) == nil && rep.Withdrawn {
			t.Fatal("a runtime identity withdrew a grant")
		}
	}
	if m, err = connectAs(t, n, "admin").Request(oauth.LogoutSubject("sharedos"), out, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	var lo oauth.LogoutReply
	if err := json.Unmarshal(m.Data, &lo); err != nil || !lo.Withdrawn {
		t.Fatalf("logout: %s %v", m.Data, err)
	}
	turn, err = rt.Open(ctx(t), access)
	if err != nil {
		t.Fatal(err)
	}
	if l, err = turn.ListTools(ctx(t)); err != nil || len(l.Tools) != 0 || len(l.Degraded) != 1 || l.Degraded[0].Code != "auth_required" {
		t.Fatalf("after the logout: %+v %v, want no tools and gh degraded auth_required", l, err)
	}
	_ = turn.Close(ctx(t))

	// No token anywhere: logs, audit trail, metrics, status.
	issued := as.Issued()
	if len(issued) < 2 {
		t.Fatalf("issued %d tokens", len(issued))
	}
	outputs := map[string]string{"logs": logs.String(), "audit": auditBytes(t, n, cfg.Audit.Stream), "metrics": get(t, n, "/metrics"), "status": get(t, n, "/status")}
	if !strings.Contains(outputs["audit"], "gh.read_repo") && !strings.Contains(outputs["audit"], "read_repo") {
		t.Fatalf("the audit trail has no record of the call (is it read?)")
	}
	for name, out := range outputs {
		for _, tok := range issued {
			if strings.Contains(out, tok) {
				t.Errorf("a token is in the %s", name)
			}
		}
	}
}

// followLogin is the person's browser: the authorization server's form,
// then its redirect to the node's callback.
func followLogin(t *testing.T, link, asURL, user, password string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	req := regexp.MustCompile(`name="req" value="([^"]+)"`).FindSubmatch(body)
	if req == nil {
		t.Fatalf("no login form: %d %s", resp.StatusCode, body)
	}
	resp, err = hc.PostForm(asURL+"/login", url.Values{"req": {string(req[1])}, "username": {user}, "password": {password}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "Authorized") {
		t.Fatalf("callback: %d %s", resp.StatusCode, body)
	}
}

func get(t *testing.T, n *node.Node, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// ghStatus is the gh server's entry of GET /status.
func ghStatus(t *testing.T, n *node.Node) mcpprovider.ProfileStatus {
	t.Helper()
	var st node.Status
	if err := json.Unmarshal([]byte(get(t, n, "/status")), &st); err != nil {
		t.Fatal(err)
	}
	for _, p := range st.MCP {
		if p.Server == "gh" {
			return p
		}
	}
	t.Fatalf("no gh in status %+v", st.MCP)
	return mcpprovider.ProfileStatus{}
}

// auditBytes is every record of the audit stream, raw.
func auditBytes(t *testing.T, n *node.Node, stream string) string {
	t.Helper()
	nc := connectAs(t, n, "node")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx(t), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		if m, err := s.GetMsg(ctx(t), seq); err == nil {
			out.Write(m.Data)
		}
	}
	return out.String()
}
