package oauthtest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/oauth2"

	"github.com/sharedos/sharedos/internal/oauth/oauthtest"
)

// The test authorization server refuses what a real one must: it is what
// the client is tested against, not a mock that accepts anything.
func TestAuthorizationServerIsStrict(t *testing.T) {
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections)
	as := oauthtest.NewServer(&oauthtest.Clock{})
	defer as.Close()
	as.Resources = []string{"https://mcp.example/mcp"}
	const redirect = "https://node.example/oauth/callback"
	as.AddClient(oauthtest.Client{ID: "web", Secret: "s", Grants: []string{"authorization_code", "refresh_token", "client_credentials"},
		Scopes: []string{"a"}, RedirectURIs: []string{redirect}})
	as.AddUser(oauthtest.User{Name: "u", Password: "p", Scopes: []string{"a"}})
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer noRedirect.CloseIdleConnections()
	verifier := oauth2.GenerateVerifier()
	authorize := func(q url.Values) *http.Response {
		t.Helper()
		resp, err := noRedirect.Get(as.URL + "/authorize?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	good := func() url.Values {
		return url.Values{"client_id": {"web"}, "redirect_uri": {redirect}, "response_type": {"code"}, "state": {"st"}, "scope": {"a"},
			"code_challenge": {oauth2.S256ChallengeFromVerifier(verifier)}, "code_challenge_method": {"S256"}, "resource": {"https://mcp.example/mcp"}}
	}
	bad := func(k, v string) url.Values { q := good(); q.Set(k, v); return q }
	if resp := authorize(bad("redirect_uri", "https://evil.example/cb")); resp.Body.Close() != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("an unregistered redirect URI: %d, want 400 (never redirected)", resp.StatusCode)
	}
	for _, c := range []struct {
		q    url.Values
		want string
	}{
		{bad("code_challenge_method", "plain"), "invalid_request"},
		{bad("resource", "https://other.example/mcp"), "invalid_target"},
		{bad("scope", "admin"), "invalid_scope"},
	} {
		resp := authorize(c.q)
		resp.Body.Close()
		loc, _ := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusFound || loc.Query().Get("error") != c.want || loc.Query().Get("iss") != as.URL {
			t.Fatalf("%v: %d %s, want a redirect with error %s and iss", c.q, resp.StatusCode, loc, c.want)
		}
	}
	// A good request: the form, a login, a code.
	resp := authorize(good())
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	req := regexp.MustCompile(`name="req" value="([^"]+)"`).FindSubmatch(body)
	if req == nil {
		t.Fatalf("no form: %s", body)
	}
	resp, err := noRedirect.PostForm(as.URL+"/login", url.Values{"req": {string(req[1])}, "username": {"u"}, "password": {"wrong"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a wrong password: %d", resp.StatusCode)
	}
	resp, err = noRedirect.PostForm(as.URL+"/login", url.Values{"req": {string(req[1])}, "username": {"u"}, "password": {"p"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, _ := url.Parse(resp.Header.Get("Location"))
	code := loc.Query().Get("code")
	if code == "" || loc.Query().Get("state") != "st" {
		t.Fatalf("login redirect %s", loc)
	}
	token := func(form url.Values, user, pass string) (int, string) {
		t.Helper()
		r, _ := http.NewRequest(http.MethodPost, as.URL+"/token", strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if user != "" {
			r.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out.Error
	}
	exchange := func(k, v string) url.Values {
		f := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {redirect}, "code_verifier": {verifier}, "resource": {"https://mcp.example/mcp"}}
		if k != "" {
			f.Set(k, v)
		}
		return f
	}
	if st, e := token(exchange("", ""), "web", "wrong"); st != http.StatusUnauthorized || e != "invalid_client" {
		t.Fatalf("a wrong client secret: %d %s", st, e)
	}
	for _, c := range []struct{ k, v, want string }{
		{"code_verifier", oauth2.GenerateVerifier(), "invalid_grant"},
		{"redirect_uri", "https://node.example/other", "invalid_grant"},
		{"resource", "https://other.example/mcp", "invalid_target"},
	} {
		if st, e := token(exchange(c.k, c.v), "web", "s"); st != http.StatusBadRequest || e != c.want {
			t.Fatalf("%s=%s: %d %s, want %s", c.k, c.v, st, e, c.want)
		}
	}
	if st, e := token(exchange("", ""), "web", "s"); st != http.StatusOK {
		t.Fatalf("the good exchange: %d %s", st, e)
	}
	if st, e := token(exchange("", ""), "web", "s"); st != http.StatusBadRequest || e != "invalid_grant" {
		t.Fatalf("a code used twice: %d %s", st, e)
	}
	if st, e := token(url.Values{"grant_type": {"client_credentials"}, "scope": {"a"}}, "web", "s"); st != http.StatusBadRequest || e != "invalid_target" {
		t.Fatalf("client credentials without a resource: %d %s", st, e)
	}
}
