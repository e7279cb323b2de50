package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/reason"
)

// pageNames are the templates, each rendered inside layout.html.
var pageNames = []string{"error", "signedout", "providers", "turns", "turn", "audit", "contracts", "contract", "approvals"}

func (c *Console) parseTemplates() error {
	funcs := template.FuncMap{
		"ago":   c.ago,
		"until": c.until,
		"short": short,
		"stamp": func(t time.Time) string {
			if t.IsZero() {
				return "never"
			}
			return t.UTC().Format("2006-01-02 15:04:05 UTC")
		},
		"join": strings.Join,
	}
	c.pages = map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return fmt.Errorf("console: template %s: %w", name, err)
		}
		c.pages[name] = t
	}
	return nil
}

// frame is what layout.html is given.
type frame struct {
	Node   string
	Viewer *viewer
	Nav    string
	Page   any
}

// errorPage is error.html's data.
type errorPage struct{ Title, Message string }

// render writes page name with data; a template that fails is a 500
// with nothing of the half-rendered page.
func (c *Console) render(w http.ResponseWriter, status int, name string, v *viewer, data any) {
	var b bytes.Buffer
	if err := c.pages[name].Execute(&b, frame{Node: c.opts.Node, Viewer: v, Nav: name, Page: data}); err != nil {
		c.opts.Logger.Error("console: rendering", "page", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}

// ago says how long before now t was, coarsely ("2 hours ago").
func (c *Console) ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := c.opts.Now().Sub(t)
	if d < 0 {
		return "just now"
	}
	return coarse(d) + " ago"
}

// until says how long after now t is ("in 3 minutes", or "expired").
func (c *Console) until(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	d := t.Sub(c.opts.Now())
	if d <= 0 {
		return "expired " + coarse(-d) + " ago"
	}
	return "in " + coarse(d)
}

func coarse(d time.Duration) string {
	unit := func(n int64, s string) string {
		if n == 1 {
			return "1 " + s
		}
		return fmt.Sprintf("%d %ss", n, s)
	}
	switch {
	case d < time.Second:
		return "less than a second"
	case d < time.Minute:
		return unit(int64(d/time.Second), "second")
	case d < time.Hour:
		return unit(int64(d/time.Minute), "minute")
	case d < 48*time.Hour:
		return unit(int64(d/time.Hour), "hour")
	}
	return unit(int64(d/(24*time.Hour)), "day")
}

// The providers page.

type providersPage struct {
	Providers []providerRow
}

type providerRow struct {
	ID, Kind string
	Profiles []profileRow
}

// profileRow is one (provider, credential profile)'s discovery, as the
// discovery article asks a page to show it: the state, when it was last
// checked, why it failed, and last-known tools told apart from
// currently verified ones (a failed discovery is never "no tools").
type profileRow struct {
	mcpprovider.ProfileStatus
	// Label is the state for a person; Headline the one line under the
	// provider's name ("Unable to refresh: authentication expired").
	Label, Headline string
	// Verified: the tools are a fresh, verified snapshot; else they are
	// last known (shown, never run until a refresh verifies them).
	Verified bool
	// Bad: the state is a failure of some kind.
	Bad bool
}

var stateLabels = map[mcpprovider.State]string{
	mcpprovider.StateUnknown: "Unknown", mcpprovider.StateLoading: "Loading", mcpprovider.StateReady: "Ready",
	mcpprovider.StateStale: "Stale", mcpprovider.StateRefreshing: "Refreshing", mcpprovider.StateAuthRequired: "Auth required",
	mcpprovider.StateIncompatible: "Incompatible", mcpprovider.StateFailed: "Failed",
}

var classLabels = map[mcpprovider.Class]string{
	mcpprovider.ClassNetworkUnreachable: "network unreachable", mcpprovider.ClassTimeout: "no answer in time",
	mcpprovider.ClassAuthExpired: "authentication expired", mcpprovider.ClassPermissionDenied: "permission denied",
	mcpprovider.ClassProtocolMismatch: "protocol mismatch", mcpprovider.ClassMalformedResponse: "malformed response",
	mcpprovider.ClassServerBug: "server error", mcpprovider.ClassRateLimited: "rate limited",
	mcpprovider.ClassUnsupported: "unsupported operation",
}

func classLabel(c mcpprovider.Class) string {
	if l, ok := classLabels[c]; ok {
		return l
	}
	if c == "" {
		return "unclassified failure"
	}
	return string(c)
}

func rowOf(st mcpprovider.ProfileStatus) profileRow {
	r := profileRow{ProfileStatus: st, Label: stateLabels[st.State]}
	if r.Label == "" {
		r.Label = string(st.State)
	}
	r.Verified = st.State == mcpprovider.StateReady && !st.LastKnown
	switch st.State {
	case mcpprovider.StateReady:
		r.Headline = fmt.Sprintf("Verified: %d tools", st.Tools)
		if st.Tools == 0 {
			r.Headline = "Verified: the server offers no tools"
		}
	case mcpprovider.StateStale:
		r.Headline = "Snapshot expired: refreshed before its next use"
	case mcpprovider.StateRefreshing:
		r.Headline = "Refreshing: the last known snapshot is kept meanwhile"
	case mcpprovider.StateLoading:
		r.Headline = "First discovery under way"
	case mcpprovider.StateUnknown:
		r.Headline = "Not asked yet: discovered when a turn first needs it"
	default: // auth_required, incompatible, failed
		r.Bad = true
		verb := "Discovery failed"
		if !st.Checked.IsZero() {
			verb = "Unable to refresh"
		}
		r.Headline = verb + ": " + classLabel(st.Class)
	}
	return r
}

// profileVisible: a profile's key is "tenant/profile" ("" for a server
// without credentials, which every viewer sees).
func profileVisible(v *viewer, key string) bool {
	t, _, ok := strings.Cut(key, "/")
	return key == "" || !ok || v.Tenant(t)
}

func (c *Console) providersPage(w http.ResponseWriter, r *http.Request, v *viewer) {
	var p providersPage
	for _, pr := range c.opts.Source.Providers() {
		row := providerRow{ID: pr.ID, Kind: pr.Kind}
		for _, st := range pr.Discovery {
			if profileVisible(v, st.Profile) {
				row.Profiles = append(row.Profiles, rowOf(st))
			}
		}
		p.Providers = append(p.Providers, row)
	}
	c.render(w, http.StatusOK, "providers", v, p)
}

// The turns pages.

type turnsPage struct {
	Tenants  []string // the tenants the selector offers
	Selected string   // "" for all the viewer may see
	Turns    []actors.TurnView
	Error    string
}

// opTimeout bounds what one page asks of the node.
const opTimeout = 5 * time.Second

func (c *Console) turnsPage(w http.ResponseWriter, r *http.Request, v *viewer) {
	sel := r.URL.Query().Get("tenant")
	if sel != "" && !v.Tenant(sel) {
		c.render(w, http.StatusForbidden, "error", v, errorPage{Title: "Not your tenant",
			Message: fmt.Sprintf("Identity %s is not bound to tenant %q.", v.ID.Name, sel)})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	all, err := c.opts.Source.Turns(ctx, v.Tenant)
	p := turnsPage{Selected: sel}
	if err != nil {
		p.Error = err.Error()
	}
	seen := map[string]bool{}
	if !v.AllTenants() {
		for _, t := range v.ID.Tenants {
			seen[t] = true
		}
	}
	for _, t := range all {
		seen[t.Tenant] = true
		if sel == "" || t.Tenant == sel {
			p.Turns = append(p.Turns, t)
		}
	}
	for t := range seen {
		p.Tenants = append(p.Tenants, t)
	}
	slices.Sort(p.Tenants)
	c.render(w, http.StatusOK, "turns", v, p)
}

type turnPage struct {
	Turn  actors.TurnView
	Trail *trailView // nil: the node gave the console no audit trail
}

func (c *Console) turnPage(w http.ResponseWriter, r *http.Request, v *viewer) {
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	t, err := c.opts.Source.Turn(ctx, r.PathValue("id"))
	// A turn of a tenant the viewer is not bound to is answered as one
	// that does not exist: its id says nothing about it.
	if err != nil || !v.Tenant(t.Tenant) {
		status, msg := http.StatusNotFound, "No open turn "+r.PathValue("id")+" on this node."
		if err != nil && !errors.Is(err, reason.ErrTurnNotFound) {
			status, msg = http.StatusServiceUnavailable, "The node did not answer: "+err.Error()
		}
		c.render(w, status, "error", v, errorPage{Title: "No such turn", Message: msg})
		return
	}
	c.render(w, http.StatusOK, "turn", v, turnPage{Turn: t, Trail: c.trail(r.Context(), t.Tenant, t.TurnID)})
}
