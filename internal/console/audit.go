package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/sharedos/sharedos/audit"
)

// Auditor is a Source that reads the audit trail. With it the console
// shows each turn's trail and verifies a tenant's chains; without it the
// audit page and the trails are absent.
type Auditor interface {
	// Trail calls fn with the records of tenant's segments in stream
	// order, or with every record of the stream, checkpoints included,
	// when tenant is "". data is the record as stored (audit.IsCheckpoint
	// tells a checkpoint), ev the decoded event.
	Trail(ctx context.Context, tenant string, fn func(data []byte, ev *audit.Event) error) error
}

// Bounds of what one page reads of the trail.
const (
	// auditTimeout bounds one read of the trail.
	auditTimeout = 20 * time.Second
	// MaxTimeline bounds the events a turn's timeline shows (its last).
	MaxTimeline = 500
	// maxPictureTurns bounds the turns the chain picture draws (the last
	// ones to start).
	maxPictureTurns = 40
)

func (c *Console) auditor() Auditor {
	a, _ := c.opts.Source.(Auditor)
	return a
}

// trailView is a turn's audit trail on its page.
type trailView struct {
	Events  []timelineEvent
	Omitted int // earlier events not shown
	Report  audit.Report
	Checked bool // the chain was verified
	Error   string
}

type timelineEvent struct {
	Seq         uint64
	Time        time.Time
	Type        audit.Type
	Detail      string
	CatalogHash string
	Bad         bool // a denial or failure
	Violation   string
}

// trail reads turn id's events from tenant's segments and verifies its
// chain (hash links and sequence; the checkpoints are the audit page's).
func (c *Console) trail(ctx context.Context, tenant, id string) *trailView {
	a := c.auditor()
	if a == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, auditTimeout)
	defer cancel()
	tv := &trailView{}
	v, err := audit.NewVerifierWith(audit.VerifyOptions{Tenant: tenant, TurnID: id})
	if err != nil {
		tv.Error = err.Error()
		return tv
	}
	err = a.Trail(ctx, tenant, func(data []byte, ev *audit.Event) error {
		if ev == nil || ev.TurnID != id || audit.IsCheckpoint(data) {
			return nil
		}
		v.Add(data)
		tv.Events = append(tv.Events, timelineOf(ev))
		if len(tv.Events) > MaxTimeline {
			tv.Events = slices.Delete(tv.Events, 0, 1)
			tv.Omitted++
		}
		return nil
	})
	if err != nil {
		tv.Error = err.Error()
		return tv
	}
	tv.Report, tv.Checked = v.Finish(true), true
	for _, viol := range tv.Report.Violations {
		for i := range tv.Events {
			if tv.Events[i].Seq == viol.Seq && !viol.Checkpoint {
				tv.Events[i].Violation = viol.Reason
			}
		}
	}
	return tv
}

func timelineOf(ev *audit.Event) timelineEvent {
	te := timelineEvent{Seq: ev.Seq, Time: ev.Time, Type: ev.Type, CatalogHash: ev.CatalogHash}
	switch {
	case ev.Call != nil:
		cl := ev.Call
		switch ev.Type {
		case audit.ToolInvoked:
			te.Detail = fmt.Sprintf("%s %s", cl.Alias, cl.Decision)
			if cl.Reason != "" {
				te.Detail += ": " + cl.Reason
			}
			te.Bad = cl.Decision == "deny"
		default:
			te.Detail = fmt.Sprintf("%s %s in %s", cl.Alias, cl.Outcome, time.Duration(cl.Duration)*time.Microsecond)
			if cl.Reason != "" {
				te.Detail += ": " + cl.Reason
			}
			te.Bad = cl.Outcome == "failed"
		}
	case ev.Close != nil:
		te.Detail = "reason " + ev.Close.Reason
	case ev.Catalog != nil:
		te.Detail = fmt.Sprintf("%d providers", len(ev.Catalog.Providers))
		for _, p := range ev.Catalog.Providers {
			if p.Status != "ok" {
				te.Detail += fmt.Sprintf("; %s %s", p.Provider, p.Status)
				te.Bad = te.Bad || p.Status == "failed"
			}
		}
	case ev.Type == audit.CatalogListed:
		te.Detail = fmt.Sprintf("%d tools shown", len(ev.Listed))
	case ev.Lease != nil || ev.Caller != "":
		te.Detail = ev.Caller
	}
	return te
}

// The audit page.

type auditPage struct {
	Tenants []string
	Tenant  string
	Result  *verifyResult
}

type verifyResult struct {
	Tenant  string
	Report  audit.Report
	Records int
	Took    time.Duration
	Picture chainPicture
	Error   string
}

// verifyTenants are the tenants the viewer may verify: its own, or for
// the whole-stream viewers every tenant in the node's turns and
// identities.
func (c *Console) verifyTenants(ctx context.Context, v *viewer) []string {
	seen := map[string]bool{}
	if !v.AllTenants() {
		for _, t := range v.ID.Tenants {
			seen[t] = true
		}
	} else {
		for _, id := range c.opts.Source.Identities().All() {
			for _, t := range id.Tenants {
				if t != "*" {
					seen[t] = true
				}
			}
		}
		if turns, err := c.opts.Source.Turns(ctx, v.Tenant); err == nil {
			for _, t := range turns {
				seen[t.Tenant] = true
			}
		}
	}
	var out []string
	for t := range seen {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

func (c *Console) auditPage(w http.ResponseWriter, r *http.Request, v *viewer) {
	if !v.MayVerify() {
		c.render(w, http.StatusForbidden, "error", v, errorPage{Title: "Not for this role",
			Message: fmt.Sprintf("Verifying audit chains is for admin and audit identities; %s is a %s identity.", v.ID.Name, v.ID.Role)})
		return
	}
	c.render(w, http.StatusOK, "audit", v, auditPage{Tenants: c.verifyTenants(r.Context(), v)})
}

// verifyAction verifies one tenant's chains over the whole stream
// (checkpoints included) and shows the report with a picture.
func (c *Console) verifyAction(w http.ResponseWriter, r *http.Request, v *viewer) {
	tenant := r.PostForm.Get("tenant")
	if !v.MayVerify() || tenant == "" || !v.Tenant(tenant) || audit.CheckTenant(tenant) != nil {
		c.render(w, http.StatusForbidden, "error", v, errorPage{Title: "Refused",
			Message: fmt.Sprintf("Identity %s may not verify tenant %q.", v.ID.Name, tenant)})
		return
	}
	res := c.verify(r.Context(), tenant)
	c.render(w, http.StatusOK, "audit", v, auditPage{Tenants: c.verifyTenants(r.Context(), v), Tenant: tenant, Result: res})
}

func (c *Console) verify(ctx context.Context, tenant string) *verifyResult {
	res := &verifyResult{Tenant: tenant}
	ctx, cancel := context.WithTimeout(ctx, auditTimeout)
	defer cancel()
	v, err := audit.NewVerifierWith(audit.VerifyOptions{Tenant: tenant})
	if err != nil {
		res.Error = err.Error()
		return res
	}
	pic := newPictureBuilder(tenant)
	start := time.Now()
	// The verifier is given the whole stream and applies the tenant
	// itself, as `node audit verify --tenant` does.
	err = c.auditor().Trail(ctx, "", func(data []byte, ev *audit.Event) error {
		v.Add(data)
		switch {
		case audit.IsCheckpoint(data):
			res.Records++
			pic.add(data, nil)
		case ev != nil && ev.Tenant == tenant:
			res.Records++
			pic.add(data, ev)
		}
		return nil
	})
	res.Took = time.Since(start).Round(time.Millisecond)
	if err != nil && !errors.Is(err, context.Canceled) {
		res.Error = err.Error()
	}
	res.Report = v.Finish(true)
	res.Picture = pic.draw(res.Report)
	return res
}
