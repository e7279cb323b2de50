package console

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/internal/identity"
)

// approvalSource is fakeSource with approval requests.
type approvalSource struct {
	*fakeSource
	q *approval.Requests
}

func (a approvalSource) ApprovalRequests() *approval.Requests { return a.q }

func pendingRequest(tenant, id, principal string, separate bool) approval.Request {
	now := time.Now()
	args := []byte(`{"amount":10,"to":"acct-42"}`)
	return approval.Request{ID: id, Tenant: tenant, Principal: principal, Turn: "n1.t1", CallID: "c1", Provider: "pay", Tool: "send",
		Alias: "pay_send", Revision: "rev1", CatalogHash: "cat1", Arguments: args, ArgsHash: approval.ArgsHash(args),
		Rule: "payments", SeparateDuties: separate, RequestedAt: now, ExpiresAt: now.Add(time.Hour)}
}

// An approver of acme sees acme's pending requests with their arguments,
// not globex's; a decision without the form token changes nothing; with
// it the request is approved by the approver; a request of the
// approver's own principal under separated duties offers no decision and
// a forced one is refused.
func TestApprovalsPage(t *testing.T) {
	ids, err := identity.NewSet([]identity.Identity{
		{Name: "admin", Role: identity.Admin},
		{Name: "carol", Role: identity.Approver, Tenants: []string{"acme"}, Principals: []string{"acme/carol"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	q := &approval.Requests{B: approval.NewMemory()}
	ctx := context.Background()
	for _, r := range []approval.Request{pendingRequest("acme", "apr-1", "ada", true), pendingRequest("globex", "apr-2", "gus", false), pendingRequest("acme", "apr-3", "carol", true)} {
		if err := q.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	c, err := New(Options{Node: "n1", Source: approvalSource{&fakeSource{ids: ids}, q}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(Path, c.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	cl := signIn(t, c, srv, "carol")
	_, body, _ := get(t, cl, srv.URL+Path+"approvals")
	if !strings.Contains(body, "apr-1") || !strings.Contains(body, "&#34;to&#34;: &#34;acct-42&#34;") || strings.Contains(body, "apr-2") {
		t.Fatalf("carol's approvals:\n%s", body)
	}
	if !strings.Contains(body, "you are the call's principal") {
		t.Fatalf("apr-3 (carol's own call, duties separated) offers a decision:\n%s", body)
	}
	token := csrfField.FindStringSubmatch(body)[1]
	decide := func(form url.Values) (int, string) {
		resp, err := cl.PostForm(srv.URL+Path+"approvals/decide", form)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := decide(url.Values{"tenant": {"acme"}, "id": {"apr-1"}, "decision": {"approve"}}); code != http.StatusForbidden {
		t.Fatalf("a decision without the token: %d", code)
	}
	if st, _, _ := q.Get(ctx, "acme", "apr-1"); st.Status != approval.Pending {
		t.Fatalf("a refused POST decided: %+v", st)
	}
	if code, page := decide(url.Values{"csrf": {token}, "tenant": {"globex"}, "id": {"apr-2"}, "decision": {"approve"}}); code != http.StatusForbidden {
		t.Fatalf("carol deciding globex's: %d %s", code, page)
	}
	if code, page := decide(url.Values{"csrf": {token}, "tenant": {"acme"}, "id": {"apr-3"}, "decision": {"approve"}}); code != http.StatusOK || !strings.Contains(page, "approval_forbidden") {
		t.Fatalf("carol approving her own call: %d %s", code, page)
	}
	if code, page := decide(url.Values{"csrf": {token}, "tenant": {"acme"}, "id": {"apr-1"}, "decision": {"approve"}, "why": {"ok"}}); code != http.StatusOK || !strings.Contains(page, "apr-1 approved by carol") {
		t.Fatalf("approve: %d %s", code, page)
	}
	if st, _, _ := q.Get(ctx, "acme", "apr-1"); st.Status != approval.Approved || st.DecidedBy != "carol" || !st.Recorded {
		t.Fatalf("after approve: %+v", st)
	}
	// An admin sees every tenant's requests and decides none.
	_, body, _ = get(t, signIn(t, c, srv, "admin"), srv.URL+Path+"approvals?all=1")
	if !strings.Contains(body, "apr-2") || strings.Contains(body, `value="approve"`) {
		t.Fatalf("admin's approvals:\n%s", body)
	}
}
