package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"unicode/utf8"

	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/reason"
)

// Approvals is a Source whose node keeps approval requests. With it the
// console lists the pending requests of the viewer's tenants with their
// arguments, and lets an approver of the tenant approve or deny.
type Approvals interface {
	// ApprovalRequests are the node's requests (nil: none kept).
	ApprovalRequests() *approval.Requests
}

func (c *Console) approvals() *approval.Requests {
	if a, ok := c.opts.Source.(Approvals); ok {
		return a.ApprovalRequests()
	}
	return nil
}

// Approvals: the node gives the console its approval requests.
func (v *viewer) Approvals() bool { return v.approvals }

// MaySeeApprovals: approvers decide, admins and audit readers see.
func (v *viewer) MaySeeApprovals() bool {
	return v.ID.Role == identity.Approver || v.ID.Role == identity.Admin || v.ID.Role == identity.Audit
}

// tenantsToRead are the tenants the viewer's lists read ("" for all).
func (v *viewer) tenantsToRead() []string {
	if v.AllTenants() {
		return []string{""}
	}
	return v.ID.Tenants
}

type approvalsPage struct {
	Requests []approvalRow
	All      bool
	Error    string
	// Result is what a decision did; Bad that it was refused.
	Result string
	Bad    bool
}

type approvalRow struct {
	approval.State
	// Args is the call's arguments as shown: indented JSON when they
	// parse, else the bytes as text (a bounded prefix).
	Args    string
	Expired bool
	Decides bool // the viewer may approve or deny it
	Own     bool // separation of duties excludes the viewer
}

// maxShownArgs bounds the argument bytes a page shows.
const maxShownArgs = 16 << 10

func showArgs(b []byte) string {
	cut := len(b) > maxShownArgs
	if cut {
		b = b[:maxShownArgs]
	}
	var out bytes.Buffer
	if !cut && json.Indent(&out, b, "", "  ") == nil {
		return out.String()
	}
	s := string(b)
	if !utf8.ValidString(s) {
		s = fmt.Sprintf("%q", b)
	}
	if cut {
		s += fmt.Sprintf("\n… (%d bytes shown of more)", maxShownArgs)
	}
	return s
}

func (c *Console) rowOf(v *viewer, st approval.State) approvalRow {
	own := st.SeparateDuties && slices.Contains(v.ID.Principals, st.Tenant+"/"+st.Principal)
	expired := st.Expired(c.opts.Now())
	return approvalRow{State: st, Args: showArgs(st.Arguments), Expired: expired, Own: own,
		Decides: st.Status == approval.Pending && !expired && !own && v.ID.Approves(st.Tenant)}
}

func (c *Console) approvalsPage(w http.ResponseWriter, r *http.Request, v *viewer) {
	if !v.MaySeeApprovals() {
		c.render(w, http.StatusForbidden, "error", v, errorPage{Title: "Not for this role",
			Message: fmt.Sprintf("Approvals are for approvers (and admins and audit readers, to see); %s is a %s identity.", v.ID.Name, v.ID.Role)})
		return
	}
	c.renderApprovals(w, r, v, "", false)
}

func (c *Console) renderApprovals(w http.ResponseWriter, r *http.Request, v *viewer, result string, bad bool) {
	all := r.URL.Query().Get("all") == "1"
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	p := approvalsPage{All: all, Result: result, Bad: bad}
	q := c.approvals()
	now := c.opts.Now()
	for _, t := range v.tenantsToRead() {
		sts, err := q.List(ctx, t)
		if err != nil {
			p.Error = err.Error()
			break
		}
		for _, st := range sts {
			if !v.Tenant(st.Tenant) || !all && (st.Status != approval.Pending || st.Expired(now)) {
				continue
			}
			p.Requests = append(p.Requests, c.rowOf(v, st))
		}
	}
	c.render(w, http.StatusOK, "approvals", v, p)
}

// decideApproval approves or denies the request the form names, as the
// viewer, who must be an approver of its tenant (and, under separation of
// duties, not its principal: approval.Decide refuses that).
func (c *Console) decideApproval(w http.ResponseWriter, r *http.Request, v *viewer) {
	tenant, id := r.PostForm.Get("tenant"), r.PostForm.Get("id")
	if !v.ID.Approves(tenant) {
		c.render(w, http.StatusForbidden, "error", v, errorPage{Title: "Refused",
			Message: fmt.Sprintf("%s is not an approver of tenant %q; nothing was changed.", v.ID.Name, tenant)})
		return
	}
	d := approval.Decision{Approve: r.PostForm.Get("decision") == "approve", By: v.ID.Name,
		Principals: slices.Clone(v.ID.Principals), Reason: r.PostForm.Get("why")}
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	st, err := c.approvals().Decide(ctx, tenant, id, d)
	if err != nil {
		c.renderApprovals(w, r, v, fmt.Sprintf("Not done (%s): %v", reason.Of(err), err), true)
		return
	}
	c.renderApprovals(w, r, v, fmt.Sprintf("Request %s %s by %s.", st.ID, st.Status, st.DecidedBy), false)
}
