package oauth

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"html"
	"net/http"
	"regexp"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/oauth2"
)

// CallbackPath is where a node's HTTP listener takes authorization
// responses.
const CallbackPath = "/oauth/callback"

// pendingLogin is an authorization request under way, sealed in the
// logins bucket under its state until the redirect comes back (to any
// node) or LoginTTL passes.
type pendingLogin struct {
	Ref         Ref       `json:"ref"`
	Verifier    string    `json:"verifier"`
	ClientID    string    `json:"client_id"`
	Issuer      string    `json:"issuer"`
	IssAdvert   bool      `json:"iss_advertised"`
	TokenURL    string    `json:"token_url"`
	AuthMethods []string  `json:"auth_methods,omitempty"`
	Resource    string    `json:"resource"`
	RedirectURL string    `json:"redirect_url"`
	Scopes      []string  `json:"scopes,omitempty"`
	Flow        string    `json:"flow"`
	Created     time.Time `json:"created"`
}

// Login is a started authorization: the link to give the person, and
// until when it can be followed.
type Login struct {
	URL     string    `json:"url"`
	Expires time.Time `json:"expires"`
}

// BeginLogin starts an authorization code flow with PKCE (S256) for ref:
// it discovers the server's authorization server, keeps the verifier
// under a random state (sealed, in the logins bucket) and returns the
// authorization URL, with the resource indicator. The redirect lands on
// the callback of whichever node's RedirectURL is configured.
func (m *Manager) BeginLogin(ctx context.Context, ref Ref, c *Client) (Login, error) {
	if c.Flow != FlowAuthorizationCode {
		return Login{}, fmt.Errorf("oauth: %s uses %s, not %s: it needs no login", ref, c.Flow, FlowAuthorizationCode)
	}
	redirect := *m.redirect.Load()
	if redirect == "" {
		return Login{}, errors.New("oauth: this node has no callback URL (node.http is off)")
	}
	sm, err := m.discover(ctx, c.Resource, c.Issuer)
	if err != nil {
		return Login{}, err
	}
	if sm.as.AuthorizationEndpoint == "" {
		return Login{}, &Error{kind: ErrUnavailable, msg: "the authorization server has no authorization endpoint"}
	}
	scopes := c.Scopes
	if len(scopes) == 0 {
		scopes = sm.scopes
	}
	state := rand.Text() // 26 base32 characters, 130 bits
	p := pendingLogin{Ref: ref, Verifier: oauth2.GenerateVerifier(), ClientID: c.ClientID, Issuer: sm.issuer,
		IssAdvert: sm.as.AuthorizationResponseIssParameterSupported, TokenURL: sm.as.TokenEndpoint,
		AuthMethods: sm.as.TokenEndpointAuthMethodsSupported, Resource: sm.resource, RedirectURL: redirect,
		Scopes: scopes, Flow: c.Flow, Created: m.now()}
	v, err := m.st.seal(&p, "login."+state)
	if err != nil {
		return Login{}, err
	}
	if _, err := m.st.logins.Create(ctx, "login."+state, v); err != nil {
		return Login{}, fmt.Errorf("oauth: keeping the login: %w", err)
	}
	cfg := oauth2.Config{ClientID: c.ClientID, Scopes: scopes, RedirectURL: redirect,
		Endpoint: oauth2.Endpoint{AuthURL: sm.as.AuthorizationEndpoint, TokenURL: sm.as.TokenEndpoint}}
	u := cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(p.Verifier), oauth2.SetAuthURLParam("resource", sm.resource))
	return Login{URL: u, Expires: p.Created.Add(LoginTTL)}, nil
}

// LoginSubject is the bus subject an admin asks a node to start a login
// on (inside the admin identities' "<prefix>.policy.>").
func LoginSubject(prefix string) string { return prefix + ".policy.oauth.login" }

// LoginRequest asks for an authorization link for one grant.
type LoginRequest struct {
	Provider  string `json:"provider"`
	Tenant    string `json:"tenant"`
	Profile   string `json:"profile"`
	Principal string `json:"principal,omitempty"`
	// Scopes are asked for beyond the profile's (step-up).
	Scopes []string `json:"scopes,omitempty"`
}

// LoginReply is the link, or a refusal with a reason code.
type LoginReply struct {
	Login *Login      `json:"login,omitempty"`
	Error *ReplyError `json:"error,omitempty"`
}

// ReplyError is a refused login request.
type ReplyError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Secrets returns the client secret of ref's profile when a login
// completes (the node's configuration; "" for a public client).
type Secrets func(ref Ref) (string, error)

var statePattern = regexp.MustCompile(`^[A-Z2-7]{26}$`)

// Callback is the handler of CallbackPath: it takes the authorization
// response, checks its state (one use) and its iss (RFC 9207), exchanges
// the code with the PKCE verifier and the resource indicator, and stores
// the grant as a new authorization of its profile (a new epoch: the
// profile's cached catalogues are not used again).
func (m *Manager) Callback(secrets Secrets) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		state := q.Get("state")
		if !statePattern.MatchString(state) {
			http.Error(w, "oauth: no such login (a bad state)", http.StatusBadRequest)
			return
		}
		ref, err := m.complete(r.Context(), state, q, secrets)
		if err != nil {
			code := http.StatusBadRequest
			if errors.Is(err, ErrUnavailable) {
				code = http.StatusBadGateway
			}
			m.log.Warn("oauth: a login failed", "err", err.Error())
			http.Error(w, err.Error(), code)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = fmt.Fprintf(w, "<!doctype html><title>Authorized</title><p>Authorized %s for %s on %s. You may close this window.</p>\n",
			html.EscapeString(ref.Tenant+"/"+ref.Profile), html.EscapeString(ref.Principal), html.EscapeString(ref.Server))
	})
}

func (m *Manager) complete(ctx context.Context, state string, q map[string][]string, secrets Secrets) (Ref, error) {
	key := "login." + state
	e, err := m.st.logins.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Ref{}, errors.New("oauth: no such login (used, expired or never started)")
	} else if err != nil {
		return Ref{}, &Error{kind: ErrUnavailable, msg: "oauth: reading the login: " + err.Error()}
	}
	// One use: whoever deletes it at its revision completes it.
	if err := m.st.logins.Delete(ctx, key, jetstream.LastRevision(e.Revision())); err != nil {
		return Ref{}, errors.New("oauth: this login is being completed already")
	}
	var p pendingLogin
	if err := m.st.open(e.Value(), key, &p); err != nil {
		return Ref{}, err
	}
	if m.now().Sub(p.Created) > LoginTTL {
		return p.Ref, errors.New("oauth: the login expired: start it again")
	}
	get := func(k string) string {
		if v := q[k]; len(v) == 1 {
			return v[0]
		}
		return ""
	}
	if ae := get("error"); ae != "" {
		return p.Ref, fmt.Errorf("oauth: the authorization server refused: %s %s", bounded(ae), bounded(get("error_description")))
	}
	if err := checkIss(get("iss"), p.Issuer, p.IssAdvert); err != nil {
		return p.Ref, err
	}
	code := get("code")
	if code == "" || len(code) > 4096 {
		return p.Ref, errors.New("oauth: the authorization response has no code")
	}
	secret := ""
	if secrets != nil {
		if secret, err = secrets(p.Ref); err != nil {
			return p.Ref, fmt.Errorf("oauth: the client secret: %s", bounded(err.Error()))
		}
	}
	cfg := oauth2.Config{ClientID: p.ClientID, ClientSecret: secret, RedirectURL: p.RedirectURL, Scopes: p.Scopes,
		Endpoint: oauth2.Endpoint{TokenURL: p.TokenURL, AuthStyle: authStyle(p.AuthMethods, secret)}}
	m.tokenRequests.Add(1)
	tok, err := cfg.Exchange(context.WithValue(ctx, oauth2.HTTPClient, m.hc), code,
		oauth2.VerifierOption(p.Verifier), oauth2.SetAuthURLParam("resource", p.Resource))
	if err != nil {
		return p.Ref, tokenError(err)
	}
	prev, _, err := m.st.get(ctx, p.Ref)
	var kn *KeyNotHeldError
	if err != nil && !errors.As(err, &kn) { // a grant no key here opens is replaced
		return p.Ref, &Error{kind: ErrUnavailable, msg: err.Error()}
	}
	g := &grant{Access: tok.AccessToken, Refresh: tok.RefreshToken, Expiry: m.expiry(tok), Scopes: grantedScopes(tok, p.Scopes),
		Issuer: p.Issuer, Resource: p.Resource, Flow: p.Flow, Epoch: 1, Authz: rand.Text(), Obtained: m.now()}
	if prev != nil {
		g.Epoch = prev.Epoch + 1
	}
	if err := m.st.replace(ctx, p.Ref, g); err != nil {
		return p.Ref, &Error{kind: ErrUnavailable, msg: err.Error()}
	}
	m.log.Info("oauth: authorized", "grant", p.Ref.String(), "scopes", fmt.Sprint(g.Scopes), "epoch", g.Epoch)
	return p.Ref, nil
}

// checkIss is RFC 9207: an authorization server that advertises the iss
// parameter must send it, and it must be the issuer; one that does not
// may omit it, and if it sends one anyway it must still match.
func checkIss(iss, issuer string, advertised bool) error {
	switch {
	case iss == "" && advertised:
		return errors.New("oauth: the authorization response has no iss, and its server advertises one (RFC 9207): refused")
	case iss != "" && iss != issuer:
		return fmt.Errorf("oauth: the authorization response comes from issuer %q, not %q (RFC 9207): refused", bounded(iss), issuer)
	}
	return nil
}

// ResealSubject is the bus subject an admin asks a node to reseal the
// stored grants on (Manager.Reseal): its request is empty.
func ResealSubject(prefix string) string { return prefix + ".policy.oauth.reseal" }

// ResealReply is what the reseal did, or a refusal.
type ResealReply struct {
	Report *ResealReport `json:"report,omitempty"`
	Error  *ReplyError   `json:"error,omitempty"`
}

// LogoutSubject is the bus subject an admin asks a node to withdraw one
// grant on (a logout: the grant is deleted for every node).
func LogoutSubject(prefix string) string { return prefix + ".policy.oauth.logout" }

// LogoutRequest names the grant to withdraw: a per-principal profile's
// principal, or (Principal empty) a shared or service profile's own.
type LogoutRequest struct {
	Provider  string `json:"provider"`
	Tenant    string `json:"tenant"`
	Profile   string `json:"profile"`
	Principal string `json:"principal,omitempty"`
}

// LogoutReply says the grant is withdrawn, or refuses.
type LogoutReply struct {
	Withdrawn bool        `json:"withdrawn,omitempty"`
	Error     *ReplyError `json:"error,omitempty"`
}
