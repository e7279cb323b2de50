package actors_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/reason"
)

func requireApproval(t *testing.T, f *conformance.Fixture) {
	t.Helper()
	if err := f.Rules.Replace([]approval.RuleSpec{{Tenant: "acme", Name: "notes", Provider: "notes", Tool: "put"}}); err != nil {
		t.Fatal(err)
	}
}

func approve(t *testing.T, f *conformance.Fixture, id string) {
	t.Helper()
	if _, err := f.Approvals.Decide(context.Background(), "acme", id, approval.Decision{Approve: true, By: "carol", At: f.Clock.Now()}); err != nil {
		t.Fatal(err)
	}
}

var note = []byte(`{"space":"acme","title":"t"}`)

// A call an approval rule names does not run until an approver approves
// exactly it; then the same call in the same turn runs once, and the same
// call again asks anew.
func TestApprovalFlow(t *testing.T) {
	f := conformance.NewFixture(t)
	requireApproval(t, f)
	k := start(t, f, nil)
	c := ctx(t)
	o, err := k.Open(c, conformance.Ada)
	if err != nil {
		t.Fatal(err)
	}
	who := conformance.Ada
	who.TurnID, who.LeaseID = o.TurnID, o.LeaseID
	_, err = k.Invoke(c, who, "notes_put", note)
	req := actors.ApprovalOf(err)
	if !errors.Is(err, reason.ErrApprovalRequired) || req == nil || req.Status != approval.Pending || string(req.Arguments) != string(note) || req.Turn != o.TurnID {
		t.Fatalf("first call: %v, request %+v", err, req)
	}
	if f.Notes.InvokeCalls() != 0 {
		t.Fatal("the tool ran without approval")
	}
	if _, _, err := f.Approvals.Get(c, "acme", req.ID); err != nil {
		t.Fatalf("the request is not stored: %v", err)
	}
	_, err = k.Invoke(c, who, "notes_put", note)
	if again := actors.ApprovalOf(err); !errors.Is(err, reason.ErrApprovalRequired) || again == nil || again.ID != req.ID {
		t.Fatalf("the same call before a decision: %v, %+v; want the same request %s", err, again, req.ID)
	}
	approve(t, f, req.ID)
	if _, err := k.Invoke(c, who, "notes_put", []byte(`{"space":"acme","title":"other"}`)); !errors.Is(err, reason.ErrApprovalRequired) {
		t.Fatalf("a call with other arguments after the approval: %v, want approval_required", err)
	}
	if _, err := k.Invoke(c, who, "notes_put", note); err != nil {
		t.Fatalf("the approved call: %v", err)
	}
	if n := f.Notes.InvokeCalls(); n != 1 {
		t.Fatalf("the tool ran %d times", n)
	}
	st, _, _ := f.Approvals.Get(c, "acme", req.ID)
	if st.Status != approval.Used {
		t.Fatalf("after the call the approval is %s", st.Status)
	}
	_, err = k.Invoke(c, who, "notes_put", note)
	if next := actors.ApprovalOf(err); !errors.Is(err, reason.ErrApprovalRequired) || next == nil || next.ID == req.ID {
		t.Fatalf("the same call once more: %v, %+v; want a new request", err, next)
	}
	if _, err := k.InvokeWith(c, who, "notes_put", note, actors.CallOptions{Approval: req.ID}); !errors.Is(err, reason.ErrApprovalInvalid) {
		t.Fatalf("naming the used approval: %v, want approval_invalid", err)
	}
	if f.Notes.InvokeCalls() != 1 {
		t.Fatal("a used approval ran the tool again")
	}
}

// Two calls at once on one approval: one runs, the other is refused.
func TestApprovalConcurrentUseRunsOnce(t *testing.T) {
	f := conformance.NewFixture(t)
	requireApproval(t, f)
	k := start(t, f, nil)
	c := ctx(t)
	o, err := k.Open(c, conformance.Ada)
	if err != nil {
		t.Fatal(err)
	}
	who := conformance.Ada
	who.TurnID, who.LeaseID = o.TurnID, o.LeaseID
	_, err = k.Invoke(c, who, "notes_put", note)
	req := actors.ApprovalOf(err)
	if req == nil {
		t.Fatalf("no request: %v", err)
	}
	approve(t, f, req.ID)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = k.InvokeWith(c, who, "notes_put", note, actors.CallOptions{Approval: req.ID})
		})
	}
	wg.Wait()
	ran := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ran++
		case !errors.Is(err, reason.ErrApprovalInvalid):
			t.Errorf("a losing call: %v, want approval_invalid", err)
		}
	}
	if ran != 1 || f.Notes.InvokeCalls() != 1 {
		t.Fatalf("%d calls succeeded, the tool ran %d times, on one approval", ran, f.Notes.InvokeCalls())
	}
}

// A denied request refuses its call approval_denied, with the reason.
func TestApprovalDenied(t *testing.T) {
	f := conformance.NewFixture(t)
	requireApproval(t, f)
	k := start(t, f, nil)
	c := ctx(t)
	o, _ := k.Open(c, conformance.Ada)
	who := conformance.Ada
	who.TurnID, who.LeaseID = o.TurnID, o.LeaseID
	_, err := k.Invoke(c, who, "notes_put", note)
	req := actors.ApprovalOf(err)
	if req == nil {
		t.Fatalf("no request: %v", err)
	}
	if _, err := f.Approvals.Decide(c, "acme", req.ID, approval.Decision{By: "carol", Reason: "not today", At: f.Clock.Now()}); err != nil {
		t.Fatal(err)
	}
	_, err = k.Invoke(c, who, "notes_put", note)
	if st := actors.ApprovalOf(err); !errors.Is(err, reason.ErrApprovalDenied) || st == nil || st.Reason != "not today" {
		t.Fatalf("after the denial: %v %+v", err, st)
	}
	if f.Notes.InvokeCalls() != 0 {
		t.Fatal("a denied call ran")
	}
}
