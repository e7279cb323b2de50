package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/approvals"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/reason"
)

// One approval end to end over NATS: an approval rule in cluster.yaml's
// approvals section; ada's call refused approval_required with the
// request; the request announced on the approver's subject; an approver
// who is ada refused by separation of duties; carol approves through the
// Go API; the same call runs once; the trail records the request, the
// decision and the call's approval, and verifies.
func TestApprovalOverNATS(t *testing.T) {
	cfg := sampleConfig(t, t.TempDir())
	cfg.Approvals = []config.ApprovalRule{{Tenant: "acme", Name: "notes-writes", Provider: "notes", Tool: "put", SeparateDuties: true}}
	cfg.Identities = append(cfg.Identities,
		config.Identity{Name: "carol", Role: "approver", Tenants: []string{"acme"}, Principals: []string{"acme/carol"}},
		config.Identity{Name: "ada-approver", Role: "approver", Tenants: []string{"acme"}, Principals: []string{"acme/ada"}},
		config.Identity{Name: "globex-approver", Role: "approver", Tenants: []string{"globex"}})
	n, nc := startConnected(t, cfg)
	carolConn := connectAs(t, n, "carol")
	announced, err := carolConn.SubscribeSync("sharedos.approval.requested.acme")
	if err != nil {
		t.Fatal(err)
	}
	if err := carolConn.Flush(); err != nil {
		t.Fatal(err)
	}
	turn, err := client.New(nc, nil).Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notes"}})
	if err != nil {
		t.Fatal(err)
	}
	args := []byte(`{"space":"acme","title":"plan","body":"ship it"}`)
	_, err = turn.Invoke(ctx(t), "notes_put", args)
	req := client.ApprovalOf(err)
	if !errors.Is(err, reason.ErrApprovalRequired) || req == nil || req.Turn != turn.Access().TurnID || string(req.Args) != string(args) || req.Tool != "put" {
		t.Fatalf("the call before approval: %v, request %+v", err, req)
	}
	if m, err := announced.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("no announcement on the approver's subject: %v", err)
	} else if len(m.Data) == 0 {
		t.Fatal("an empty announcement")
	}

	carol := approvals.NewClient(carolConn, "sharedos", 0)
	pending, err := carol.List(ctx(t), "", false)
	if err != nil || len(pending) != 1 || pending[0].ID != req.ID || string(pending[0].Arguments) != string(args) {
		t.Fatalf("carol's list: %+v %v", pending, err)
	}
	if _, err := approvals.NewClient(connectAs(t, n, "globex-approver"), "sharedos", 0).Approve(ctx(t), req.ID, "not mine"); !errors.Is(err, reason.ErrApprovalInvalid) {
		t.Fatalf("an approver of another tenant: %v, want approval_invalid (no such request for it)", err)
	}
	if _, err := approvals.NewClient(connectAs(t, n, "ada-approver"), "sharedos", 0).Approve(ctx(t), req.ID, "mine"); !errors.Is(err, reason.ErrApprovalForbidden) {
		t.Fatalf("ada approving her own call: %v, want approval_forbidden", err)
	}
	// The runtime has no approvals subjects: the bus answers nothing.
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = approvals.NewClient(nc, "sharedos", 0).Approve(short, req.ID, "self-service")
	cancel()
	if err == nil {
		t.Fatal("the runtime approved its own call")
	}
	if _, err := turn.Invoke(ctx(t), "notes_put", args); !errors.Is(err, reason.ErrApprovalRequired) {
		t.Fatalf("the call before a decision: %v", err)
	}
	st, err := carol.Approve(ctx(t), req.ID, "reviewed the body")
	if err != nil || st.Status != approval.Approved || st.DecidedBy != "carol" || !st.Recorded {
		t.Fatalf("carol's approval: %+v %v", st, err)
	}
	put, err := turn.Invoke(ctx(t), "notes_put", args)
	if err != nil {
		t.Fatalf("the approved call: %v", err)
	}
	if _, err := turn.InvokeApproved(ctx(t), "notes_put", args, req.ID); !errors.Is(err, reason.ErrApprovalInvalid) {
		t.Fatalf("the approval used again: %v, want approval_invalid", err)
	}
	if shown, err := carol.Show(ctx(t), req.ID); err != nil || shown.Status != approval.Used || shown.UsedBy != put.CallID {
		t.Fatalf("after the call: %+v %v", shown, err)
	}
	if err := turn.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}

	data, evs := readAll(t, connectAs(t, n, "auditor"))
	var requested, decided, invoked bool
	for _, ev := range evs {
		switch {
		case ev.Type == audit.ApprovalRequested && ev.Approval != nil && ev.Approval.ID == req.ID:
			requested = true
		case ev.Type == audit.ApprovalDecided && ev.Approval != nil && ev.Approval.ID == req.ID && ev.Approval.By == "carol" && ev.Approval.Reason == "reviewed the body":
			decided = true
		case ev.Type == audit.ToolInvoked && ev.Call != nil && ev.Call.ID == put.CallID && ev.Call.Decision == "allow" && ev.Call.Approval == req.ID:
			invoked = true
		}
	}
	if !requested || !decided || !invoked {
		t.Fatalf("the trail: approval.requested %v, approval.decided %v, tool.invoked naming the approval %v", requested, decided, invoked)
	}
	if rep := audit.Verify(data, true); !rep.OK() {
		t.Fatalf("the trail does not verify: %v", rep.Violations)
	}
}
