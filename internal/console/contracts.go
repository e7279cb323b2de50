package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/sharedos/sharedos/internal/contracts"
	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/reason"
)

// Reviewer is a Source whose node keeps contract baselines (contract
// drift). With it the console lists the contracts under review, shows
// each one's diff, and lets an approver of the tenant accept or reject.
type Reviewer interface {
	// Contracts carries out one review operation as caller
	// (contracts.Do against the node's gate).
	Contracts(ctx context.Context, caller contracts.Caller, op string, req contracts.Request) (contracts.Reply, error)
}

func (c *Console) reviewer() Reviewer {
	r, _ := c.opts.Source.(Reviewer)
	return r
}

// MayReview: an approver decides its tenants' reviews; admins and audit
// readers see them.
func (v *viewer) MayReview() bool {
	return v.ID.Role == identity.Approver || v.ID.Role == identity.Admin || v.ID.Role == identity.Audit
}

// Contracts: the node gives the console its contract baselines.
func (v *viewer) Contracts() bool { return v.contracts }

// decides reports whether the viewer may accept or reject tenant's reviews.
func (v *viewer) decides(tenant string) bool { return v.ID.Approves(tenant) }

// caller is the viewer as the review operations see it: reading its
// tenants; deciding only as an approver (decides).
func (v *viewer) caller(deciding bool) contracts.Caller {
	tenants := v.ID.Tenants
	if v.AllTenants() {
		tenants = []string{""}
	}
	approves := v.Tenant
	if deciding {
		approves = v.decides
	}
	return contracts.Caller{Name: v.ID.Name, Approves: approves, Tenants: tenants}
}

type contractsPage struct {
	Baselines []contracts.Baseline
	All       bool
	Error     string
}

func (c *Console) contractsPage(w http.ResponseWriter, r *http.Request, v *viewer) {
	if !v.MayReview() {
		c.render(w, http.StatusForbidden, "error", v, errorPage{Title: "Not for this role",
			Message: fmt.Sprintf("Contract reviews are for approvers (and admins and audit readers, to see); %s is a %s identity.", v.ID.Name, v.ID.Role)})
		return
	}
	all := r.URL.Query().Get("all") == "1"
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	rep, err := c.reviewer().Contracts(ctx, v.caller(false), contracts.OpList, contracts.Request{Pending: !all})
	p := contractsPage{Baselines: rep.Baselines, All: all}
	if err != nil {
		p.Error = err.Error()
	}
	c.render(w, http.StatusOK, "contracts", v, p)
}

type contractPage struct {
	Baseline contracts.Baseline
	Decides  bool
	Result   string // what a decision did
	Bad      bool
}

func keyOf(r *http.Request) contracts.Request {
	if r.Method == http.MethodPost {
		return contracts.Request{Tenant: r.PostForm.Get("tenant"), Provider: r.PostForm.Get("provider"), Tool: r.PostForm.Get("tool")}
	}
	return contracts.Request{Tenant: r.PathValue("tenant"), Provider: r.PathValue("provider"), Tool: r.PathValue("tool")}
}

// contractPage shows one baseline's diff and, to an approver of its
// tenant, the accept and reject forms.
func (c *Console) contractPage(w http.ResponseWriter, r *http.Request, v *viewer) {
	c.showContract(w, r, v, keyOf(r), "", false)
}

func (c *Console) showContract(w http.ResponseWriter, r *http.Request, v *viewer, k contracts.Request, result string, bad bool) {
	if !v.MayReview() || !v.Tenant(k.Tenant) {
		c.render(w, http.StatusNotFound, "error", v, errorPage{Title: "No such contract", Message: "There is no such contract baseline for you."})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	rep, err := c.reviewer().Contracts(ctx, v.caller(false), contracts.OpDiff, k)
	if err != nil || rep.Baseline == nil {
		c.render(w, http.StatusNotFound, "error", v, errorPage{Title: "No such contract", Message: fmt.Sprint("The node found no baseline: ", err)})
		return
	}
	c.render(w, http.StatusOK, "contract", v, contractPage{Baseline: *rep.Baseline, Decides: v.decides(k.Tenant), Result: result, Bad: bad})
}

// decideContract accepts or rejects the pending revision the form names,
// as the viewer, who must approve the tenant.
func (c *Console) decideContract(w http.ResponseWriter, r *http.Request, v *viewer) {
	k := keyOf(r)
	op := contracts.OpReject
	if r.PostForm.Get("decision") == "accept" {
		op = contracts.OpAccept
	}
	if !v.decides(k.Tenant) {
		c.render(w, http.StatusForbidden, "error", v, errorPage{Title: "Refused",
			Message: fmt.Sprintf("%s is not an approver of tenant %q; nothing was changed.", v.ID.Name, k.Tenant)})
		return
	}
	k.Revision, k.Why = r.PostForm.Get("revision"), r.PostForm.Get("why")
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	rep, err := c.reviewer().Contracts(ctx, v.caller(true), op, k)
	switch {
	case err != nil && (rep.Reviewed == nil || rep.Reviewed.Revision == ""):
		code := reason.Of(err)
		if code == "" && errors.Is(err, context.DeadlineExceeded) {
			code = reason.DeadlineExceeded
		}
		c.showContract(w, r, v, k, fmt.Sprintf("Not done (%s): %v", code, err), true)
	default:
		rv := rep.Reviewed
		msg := fmt.Sprintf("Revision %s %s by %s.", short(rv.Revision), rv.Decision, rv.By)
		if err != nil {
			msg += " " + err.Error()
		}
		c.showContract(w, r, v, k, msg, err != nil)
	}
}
