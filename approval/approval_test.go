package approval_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/reason"
)

func TestRulesMatch(t *testing.T) {
	rs, err := approval.NewRules([]approval.RuleSpec{
		{Tenant: "acme", Name: "deletes", Capability: "calendar.events.delete"},
		{Tenant: "acme", Name: "destructive", Provider: "files", Annotations: map[string]any{"destructiveHint": true}},
		{Tenant: "acme", Name: "one-tool", Provider: "notes", Tool: "put"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		s    approval.Subject
		rule string
	}{
		{"capability", approval.Subject{Tenant: "acme", Provider: "calendar", Tool: "delete_event", Capability: "calendar.events.delete", Annotations: json.RawMessage(`{}`)}, "deletes"},
		{"other tenant", approval.Subject{Tenant: "globex", Provider: "calendar", Tool: "delete_event", Capability: "calendar.events.delete"}, ""},
		{"trusted annotation", approval.Subject{Tenant: "acme", Provider: "files", Tool: "rm", Capability: "files.rm", Annotations: json.RawMessage(`{"destructiveHint":true}`)}, "destructive"},
		{"annotation false", approval.Subject{Tenant: "acme", Provider: "files", Tool: "rm", Capability: "files.rm", Annotations: json.RawMessage(`{"destructiveHint":false}`)}, ""},
		{"annotation from an untrusted provider", approval.Subject{Tenant: "acme", Provider: "other", Tool: "rm", Capability: "files.rm", Annotations: json.RawMessage(`{"destructiveHint":true}`)}, ""},
		{"provider and tool", approval.Subject{Tenant: "acme", Provider: "notes", Tool: "put", Capability: "notes.put"}, "one-tool"},
		{"provider, other tool", approval.Subject{Tenant: "acme", Provider: "notes", Tool: "get", Capability: "notes.get"}, ""},
	} {
		r, ok := rs.Match(tc.s)
		if got := map[bool]string{true: r.Name}[ok]; got != tc.rule {
			t.Errorf("%s: matched %q, want %q", tc.name, got, tc.rule)
		}
	}
	if _, err := approval.NewRules([]approval.RuleSpec{{Tenant: "acme", Name: "x", Annotations: map[string]any{"destructiveHint": true}}}); !errors.Is(err, approval.ErrInvalidRule) {
		t.Errorf("a rule on annotations naming no provider: %v, want ErrInvalidRule", err)
	}
	if _, err := approval.NewRules([]approval.RuleSpec{{Tenant: "acme", Name: "a"}, {Tenant: "acme", Name: "a"}}); err == nil {
		t.Error("two rules with one name accepted")
	}
	var none *approval.Rules
	if _, ok := none.Match(approval.Subject{Tenant: "acme"}); ok {
		t.Error("no rules matched a call")
	}
}

var t0 = time.Date(2026, 9, 8, 9, 0, 0, 0, time.UTC)

func request() approval.Request {
	args := []byte(`{"id": 7}`)
	return approval.Request{ID: "apr-x-c1", Tenant: "acme", Principal: "ada", Turn: "n.t1", CallID: "c1",
		Provider: "files", Tool: "rm", Alias: "files_rm", Revision: "rev1", CatalogHash: "cat1",
		Arguments: args, ArgsHash: approval.ArgsHash(args), Rule: "destructive", SeparateDuties: true,
		RequestedAt: t0, ExpiresAt: t0.Add(10 * time.Minute)}
}

func call() approval.Call {
	return approval.Call{Tenant: "acme", Principal: "ada", Turn: "n.t1", Provider: "files", Tool: "rm", Revision: "rev1", CatalogHash: "cat1", Arguments: []byte(`{"id": 7}`)}
}

func TestCheckBindsOneCall(t *testing.T) {
	approved := approval.State{Request: request(), Status: approval.Approved, Recorded: true, DecidedBy: "carol"}
	if err := approval.Check(approved, call(), t0.Add(time.Minute)); err != nil {
		t.Fatalf("the approved call: %v", err)
	}
	for _, tc := range []struct {
		name string
		st   func(*approval.State)
		c    func(*approval.Call)
		at   time.Duration
		want reason.Code
	}{
		{"other argument bytes (same value, other spacing)", nil, func(c *approval.Call) { c.Arguments = []byte(`{"id":7}`) }, 0, reason.ApprovalInvalid},
		{"other turn", nil, func(c *approval.Call) { c.Turn = "n.t2" }, 0, reason.ApprovalInvalid},
		{"other tool", nil, func(c *approval.Call) { c.Tool = "cp" }, 0, reason.ApprovalInvalid},
		{"other revision", nil, func(c *approval.Call) { c.Revision = "rev2" }, 0, reason.ApprovalInvalid},
		{"other catalogue", nil, func(c *approval.Call) { c.CatalogHash = "cat2" }, 0, reason.ApprovalInvalid},
		{"other principal", nil, func(c *approval.Call) { c.Principal = "bob" }, 0, reason.ApprovalInvalid},
		{"expired", nil, nil, 10 * time.Minute, reason.ApprovalInvalid},
		{"used", func(s *approval.State) { s.Status = approval.Used }, nil, 0, reason.ApprovalInvalid},
		{"denied", func(s *approval.State) { s.Status = approval.Denied }, nil, 0, reason.ApprovalDenied},
		{"pending", func(s *approval.State) { s.Status, s.Recorded = approval.Pending, false }, nil, 0, reason.ApprovalRequired},
		{"approved, decision not recorded", func(s *approval.State) { s.Recorded = false }, nil, 0, reason.ApprovalRequired},
	} {
		st, c := approved, call()
		if tc.st != nil {
			tc.st(&st)
		}
		if tc.c != nil {
			tc.c(&c)
		}
		err := approval.Check(st, c, t0.Add(tc.at))
		if err == nil || err.Code != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
}

func TestDecideSeparatesDuties(t *testing.T) {
	q := &approval.Requests{B: approval.NewMemory(), Clock: func() time.Time { return t0.Add(time.Minute) }}
	ctx := context.Background()
	if err := q.Put(ctx, request()); err != nil {
		t.Fatal(err)
	}
	_, err := q.Decide(ctx, "acme", "apr-x-c1", approval.Decision{Approve: true, By: "ada-approver", Principals: []string{"acme/ada"}})
	if !errors.Is(err, reason.ErrApprovalForbidden) {
		t.Fatalf("ada approving ada's own call: %v, want approval_forbidden", err)
	}
	st, err := q.Decide(ctx, "acme", "apr-x-c1", approval.Decision{Approve: true, By: "carol", Principals: []string{"acme/carol"}, Reason: "ok"})
	if err != nil || st.Status != approval.Approved || !st.Recorded {
		t.Fatalf("carol approving: %+v, %v", st, err)
	}
	if _, err := q.Decide(ctx, "acme", "apr-x-c1", approval.Decision{Approve: false, By: "dave"}); !errors.Is(err, reason.ErrApprovalInvalid) {
		t.Fatalf("deciding twice: %v, want approval_invalid", err)
	}
}

func TestDecisionNotInForceUntilRecorded(t *testing.T) {
	fail := true
	q := &approval.Requests{B: approval.NewMemory(), Clock: func() time.Time { return t0 },
		Record: func(context.Context, approval.State) error {
			if fail {
				return errors.New("audit down")
			}
			return nil
		}}
	ctx := context.Background()
	_ = q.Put(ctx, request())
	if _, err := q.Decide(ctx, "acme", "apr-x-c1", approval.Decision{Approve: true, By: "carol"}); !errors.Is(err, reason.ErrAuditUnavailable) {
		t.Fatalf("decision with audit down: %v", err)
	}
	st, _, _ := q.Get(ctx, "acme", "apr-x-c1")
	if err := approval.Check(st, call(), t0); err == nil || err.Code != reason.ApprovalRequired {
		t.Fatalf("an unrecorded approval is in force: %v", err)
	}
	fail = false
	if st, err := q.Decide(ctx, "acme", "apr-x-c1", approval.Decision{Approve: true, By: "carol"}); err != nil || !st.Recorded {
		t.Fatalf("deciding again once audit is back: %+v %v", st, err)
	}
}

// Two uses of one approval at its one revision, concurrently: one wins.
func TestUseOnce(t *testing.T) {
	q := &approval.Requests{B: approval.NewMemory(), Clock: func() time.Time { return t0 }}
	ctx := context.Background()
	_ = q.Put(ctx, request())
	if _, err := q.Decide(ctx, "acme", "apr-x-c1", approval.Decision{Approve: true, By: "carol"}); err != nil {
		t.Fatal(err)
	}
	_, rev, _ := q.Get(ctx, "acme", "apr-x-c1")
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = q.Use(ctx, "acme", "apr-x-c1", rev, "c2", t0) })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		} else if !errors.Is(err, approval.ErrConflict) {
			t.Errorf("a losing use: %v, want ErrConflict", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d uses of one approval succeeded", ok)
	}
}
