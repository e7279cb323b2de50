package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/internal/mcpprovider"
)

// Path is where the console is served on the node's HTTP listener.
const Path = "/console/"

// CookieName is the session cookie's name.
const CookieName = "sharedos_console"

// CSP is the Content-Security-Policy of every answer: the console's own
// stylesheet and images, no script, no inline style, no plugin, no
// framing, forms posted only to the console itself.
const CSP = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Source is what the console reads of its node. Every method may be
// called concurrently.
type Source interface {
	// Identities are who may sign in now (read at every request).
	Identities() *identity.Set
	// Providers are the configured providers and their discovery states.
	Providers() []Provider
	// Turns are the open turns of the tenants tenant admits.
	Turns(ctx context.Context, tenant func(string) bool) ([]actors.TurnView, error)
	// Turn is one open turn, or an error with reason turn_not_found.
	Turn(ctx context.Context, id string) (actors.TurnView, error)
}

// Provider is one configured provider as the providers page shows it.
type Provider struct {
	ID   string
	Kind string // static, nats, mcp (as configured)
	// Discovery is an MCP provider's state per credential profile
	// (mcpprovider.Provider.Status); empty for the others, whose
	// catalogue is asked for each turn.
	Discovery []mcpprovider.ProfileStatus
}

// Options configure a Console.
type Options struct {
	// Node is the node's id, shown on every page.
	Node   string
	Source Source
	// LoginTTL, SessionTTL and MaxSessions default to DefaultLoginTTL,
	// DefaultSessionTTL and DefaultMaxSessions.
	LoginTTL, SessionTTL time.Duration
	MaxSessions          int
	// SecureCookie marks the session cookie Secure even on plain HTTP
	// (the node behind a proxy that terminates TLS); over TLS it always is.
	SecureCookie bool
	// Now is the clock; default time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Console serves the console's pages. Safe for concurrent use.
type Console struct {
	opts     Options
	sessions *sessions
	pages    map[string]*template.Template
	static   http.Handler
	mux      *http.ServeMux
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// New builds a console over opts.Source.
func New(opts Options) (*Console, error) {
	if opts.Source == nil {
		return nil, errors.New("console: Options.Source is required")
	}
	if opts.LoginTTL <= 0 {
		opts.LoginTTL = DefaultLoginTTL
	}
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = DefaultSessionTTL
	}
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &Console{opts: opts, sessions: newSessions(opts.Now, opts.LoginTTL, opts.SessionTTL, opts.MaxSessions)}
	if err := c.parseTemplates(); err != nil {
		return nil, err
	}
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	c.static = http.StripPrefix(Path+"static/", http.FileServerFS(sub))
	c.routes()
	return c, nil
}

// Handler serves everything under Path.
func (c *Console) Handler() http.Handler { return c.mux }

// ErrForbidden is matched by IssueLogin's refusal of an identity that may
// not sign in.
var ErrForbidden = errors.New("console: identity may not sign in")

// IssueLogin makes a login token for the identity named name, which the
// caller has established (the bus did: ServeLogin). Nodes, providers and
// unknown identities are refused.
func (c *Console) IssueLogin(name string) (token string, expires time.Time, err error) {
	id, ok := c.opts.Source.Identities().Lookup(name)
	if !ok {
		return "", time.Time{}, fmt.Errorf("%w: no identity %q", ErrForbidden, name)
	}
	if !mayLogin(id) {
		return "", time.Time{}, fmt.Errorf("%w: %s is a %s identity", ErrForbidden, name, id.Role)
	}
	return c.sessions.issue(name)
}

// LoginPath is the path of a login link for token.
func LoginPath(token string) string { return Path + "login?t=" + url.QueryEscape(token) }

// mayLogin: everyone but nodes and providers (who act, and are not people).
func mayLogin(id *identity.Identity) bool {
	return id.Role != identity.Node && id.Role != identity.Provider
}

// viewer is the signed-in identity of a request.
type viewer struct {
	ID      *identity.Identity
	session *session
	cookie  string
	// audit, contracts, approvals: the node gives the console its audit
	// trail, its contract baselines, its approval requests.
	audit, contracts, approvals bool
}

// Tenant reports whether the viewer may see tenant's data.
func (v *viewer) Tenant(t string) bool {
	return v.ID.ClusterAdmin() || v.ID.AllTenantsBound() || slices.Contains(v.ID.Tenants, t)
}

// AllTenants reports whether the viewer sees every tenant.
func (v *viewer) AllTenants() bool { return v.ID.ClusterAdmin() || v.ID.AllTenantsBound() }

// MayVerify: verifying an audit chain is for admins and audit readers.
func (v *viewer) MayVerify() bool { return v.ID.Role == identity.Admin || v.ID.Role == identity.Audit }

// Audit: the node gives the console its audit trail.
func (v *viewer) Audit() bool { return v.audit }

// CSRF is the token every form of the session carries.
func (v *viewer) CSRF() string { return v.session.csrf }

// headers sets what every answer carries.
func headers(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin") // not no-referrer: under it a browser sends "Origin: null" even on a same-origin POST
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

// noStore marks an answer with data as never cached.
func noStore(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
}

func (c *Console) routes() {
	m := http.NewServeMux()
	m.Handle("GET "+Path+"static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		headers(w)
		w.Header().Set("Cache-Control", "public, max-age=3600")
		c.static.ServeHTTP(w, r)
	}))
	m.HandleFunc("GET "+Path+"login", c.login)
	m.HandleFunc("GET "+Path+"{$}", c.page(func(w http.ResponseWriter, r *http.Request, v *viewer) {
		http.Redirect(w, r, Path+"providers", http.StatusSeeOther)
	}))
	m.HandleFunc("POST "+Path+"logout", c.action(func(w http.ResponseWriter, r *http.Request, v *viewer) {
		c.sessions.end(v.cookie)
		http.SetCookie(w, c.cookie(r, "", -1))
		c.render(w, http.StatusOK, "signedout", nil, nil)
	}))
	m.HandleFunc("GET "+Path+"providers", c.page(c.providersPage))
	m.HandleFunc("GET "+Path+"turns", c.page(c.turnsPage))
	m.HandleFunc("GET "+Path+"turns/{id}", c.page(c.turnPage))
	if c.auditor() != nil {
		m.HandleFunc("GET "+Path+"audit", c.page(c.auditPage))
		m.HandleFunc("POST "+Path+"audit/verify", c.action(c.verifyAction))
	}
	if c.approvals() != nil {
		m.HandleFunc("GET "+Path+"approvals", c.page(c.approvalsPage))
		m.HandleFunc("POST "+Path+"approvals/decide", c.action(c.decideApproval))
	}
	if c.reviewer() != nil {
		m.HandleFunc("GET "+Path+"contracts", c.page(c.contractsPage))
		m.HandleFunc("GET "+Path+"contracts/{tenant}/{provider}/{tool}", c.page(c.contractPage))
		m.HandleFunc("POST "+Path+"contracts/decide", c.action(c.decideContract))
	}
	m.HandleFunc(Path, func(w http.ResponseWriter, r *http.Request) {
		headers(w)
		noStore(w)
		c.render(w, http.StatusNotFound, "error", nil, errorPage{Title: "Not found", Message: "There is no such page."})
	})
	c.mux = m
}

func (c *Console) cookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: CookieName, Value: value, Path: Path, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || c.opts.SecureCookie}
}

// login redeems a login link's token, sets the session cookie and sends
// the browser on without the token in its address bar or history.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	headers(w)
	noStore(w)
	tok := r.URL.Query().Get("t")
	if len(tok) > 128 {
		tok = ""
	}
	cookie, ss, err := c.sessions.redeem(tok)
	if err != nil {
		status := http.StatusUnauthorized
		if errors.Is(err, ErrTooMany) {
			status = http.StatusServiceUnavailable
		}
		c.render(w, status, "error", nil, errorPage{Title: "Sign-in failed",
			Message: "This login link is unknown, already used or expired. Run `node console` for a new one."})
		return
	}
	http.SetCookie(w, c.cookie(r, cookie, int(time.Until(ss.expires).Seconds())))
	c.opts.Logger.Info("console: signed in", "identity", ss.identity)
	http.Redirect(w, r, Path, http.StatusSeeOther)
}

// signedIn is the viewer of r, or nil.
func (c *Console) signedIn(r *http.Request) *viewer {
	ck, err := r.Cookie(CookieName)
	if err != nil || ck.Value == "" || len(ck.Value) > 128 {
		return nil
	}
	ss, ok := c.sessions.lookup(ck.Value)
	if !ok {
		return nil
	}
	id, ok := c.opts.Source.Identities().Lookup(ss.identity)
	if !ok || !mayLogin(id) {
		c.sessions.end(ck.Value) // removed from the policy: signed out
		return nil
	}
	return &viewer{ID: id, session: ss, cookie: ck.Value, audit: c.auditor() != nil, contracts: c.reviewer() != nil, approvals: c.approvals() != nil}
}

// page wraps a GET handler: headers, no caching, a signed-in viewer.
func (c *Console) page(h func(http.ResponseWriter, *http.Request, *viewer)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		headers(w)
		noStore(w)
		v := c.signedIn(r)
		if v == nil {
			c.render(w, http.StatusUnauthorized, "error", nil, errorPage{Title: "Sign in",
				Message: "You are not signed in. Run `node console` on a machine that holds your identity's seed and open the link it prints."})
			return
		}
		h(w, r, v)
	}
}

// maxForm bounds a posted form.
const maxForm = 16 << 10

// action wraps a state-changing POST: a signed-in viewer, a same-origin
// request (when the browser says where it came from), and the session's
// CSRF token; anything else is refused before h runs.
func (c *Console) action(h func(http.ResponseWriter, *http.Request, *viewer)) http.HandlerFunc {
	return c.page(func(w http.ResponseWriter, r *http.Request, v *viewer) {
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err != nil {
			c.render(w, http.StatusBadRequest, "error", v, errorPage{Title: "Bad request", Message: "The form could not be read."})
			return
		}
		if !sameOrigin(r) || !v.session.checkCSRF(r.PostForm.Get("csrf")) {
			c.render(w, http.StatusForbidden, "error", v, errorPage{Title: "Refused",
				Message: "This request did not carry this session's form token; nothing was changed. Reload the page and try again."})
			return
		}
		h(w, r, v)
	})
}

// sameOrigin: no Origin header (an old browser, a tool), or one naming
// this host; and no Sec-Fetch-Site saying another site sent it.
func sameOrigin(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}
