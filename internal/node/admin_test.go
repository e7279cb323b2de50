package node_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/policy"
	"github.com/sharedos/sharedos/reason"
)

// Only an admin identity reaches the policy service: every other role is
// refused on every admin subject — by the bus (runtimes, readers,
// providers and approvers may not publish there, so no answer comes),
// or, for a request published inside the nodes' account, by the service
// (policy_forbidden).
func TestPolicyServiceAnswersOnlyAdmins(t *testing.T) {
	cfg := sampleConfig(t, t.TempDir())
	cfg.Identities = append(cfg.Identities, config.Identity{Name: "approver", Role: "approver", Tenants: []string{"acme"}})
	n, _ := startConnected(t, cfg)
	adminConn := connectAs(t, n, "admin")
	admin := policy.NewClient(adminConn, "sharedos", 0)
	if _, err := admin.Do(ctx(t), policy.OpList, policy.Request{}); err != nil {
		t.Fatalf("the admin's list: %v", err)
	}
	// The admin has nothing but the policy subjects: no turns, no
	// JetStream API (it never touches the bucket itself).
	short, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	if _, err := client.New(adminConn, nil).Open(short, client.Access{Tenant: "acme", Principal: "ada"}); err == nil {
		t.Fatal("the admin opened a turn")
	}
	cancel()
	for _, subj := range []string{"$JS.API.INFO", "$JS.API.STREAM.INFO.KV_SHAREDOS_POLICY", "$KV.SHAREDOS_POLICY.grants.acme.ada"} {
		if m, err := adminConn.Request(subj, []byte(`{}`), 300*time.Millisecond); err == nil {
			t.Fatalf("the admin reached %s: %s", subj, m.Data)
		}
	}
	for _, who := range []string{"runtime", "auditor", "auditor-acme", "provider-calendar", "approver"} {
		c := policy.NewClient(connectAs(t, n, who), "sharedos", 0)
		for _, op := range policy.Ops() {
			short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			rep, err := c.Do(short, op, policy.Request{Key: "grants.acme.ada", Value: "tenant: acme\nprincipal: ada\n", Document: "principals: []\n"})
			cancel()
			if err == nil || rep.Entry != nil || rep.Entries != nil || rep.Document != "" || rep.Changes != nil {
				t.Fatalf("%s on %s: answered %+v (%v)", who, op, rep, err)
			}
		}
	}
	node := policy.NewClient(connectAs(t, n, "node"), "sharedos", 0)
	for _, op := range policy.Ops() {
		if _, err := node.Do(ctx(t), op, policy.Request{Key: "grants.acme.ada"}); !errors.Is(err, reason.ErrPolicyForbidden) {
			t.Fatalf("a request inside the nodes' account on %s: %v, want policy_forbidden", op, err)
		}
	}
	// The grants are as seeded: nothing any of them sent was written.
	e, err := n.Policy().Get(ctx(t), policy.Key{Kind: policy.Grants, Tenant: "acme", Name: "ada"})
	if err != nil || e.By != "cluster.yaml" {
		t.Fatalf("after the refusals: %+v %v", e, err)
	}
}

// Two admins put the same key at the same revision at once: one wins, the
// other is refused policy_conflict with the winner's revision; both the
// winner's change and nothing of the loser's are in the trail, which
// verifies.
func TestConcurrentAdminsOneWins(t *testing.T) {
	cfg := sampleConfig(t, t.TempDir())
	cfg.Identities = append(cfg.Identities, config.Identity{Name: "admin2", Role: "admin"})
	n, _ := startConnected(t, cfg)
	key := "grants.acme.bob"
	cur, err := policy.NewClient(connectAs(t, n, "admin"), "sharedos", 0).Do(ctx(t), policy.OpGet, policy.Request{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]string{
		"admin":  "tenant: acme\nprincipal: bob\ngrants: [{id: bob-a, capability: notes.get, resource: 'notes/acme/**'}]\n",
		"admin2": "tenant: acme\nprincipal: bob\ngrants: [{id: bob-b, capability: notes.get, resource: 'notes/acme/**'}]\n",
	}
	type result struct {
		who string
		rep policy.Reply
		err error
	}
	results := make(chan result, 2)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for who, v := range values {
		c := policy.NewClient(connectAs(t, n, who), "sharedos", 0)
		wg.Go(func() {
			<-start
			rep, err := c.Do(ctx(t), policy.OpPut, policy.Request{Key: key, Value: v, Revision: cur.Entry.Revision})
			results <- result{who, rep, err}
		})
	}
	close(start)
	wg.Wait()
	close(results)
	var won, lost []result
	for r := range results {
		if r.err == nil {
			won = append(won, r)
		} else {
			lost = append(lost, r)
		}
	}
	if len(won) != 1 || len(lost) != 1 {
		t.Fatalf("%d won, %d lost: %+v %+v", len(won), len(lost), won, lost)
	}
	var conflict *policy.ConflictReply
	if !errors.As(lost[0].err, &conflict) || !errors.Is(lost[0].err, reason.ErrPolicyConflict) || conflict.Current != won[0].rep.Entry.Revision {
		t.Fatalf("the loser: %v, want policy_conflict at revision %d", lost[0].err, won[0].rep.Entry.Revision)
	}
	e, _ := n.Policy().Get(ctx(t), policy.Key{Kind: policy.Grants, Tenant: "acme", Name: "bob"})
	if e.By != won[0].who || e.Revision != won[0].rep.Entry.Revision {
		t.Fatalf("stored %+v, the winner was %s", e, won[0].who)
	}
	data, evs := readAll(t, connectAs(t, n, "auditor"))
	var by []string
	for _, ev := range evs {
		if ev.Type == audit.PolicyChanged && ev.Policy.Key == key && ev.Policy.By != "cluster.yaml" {
			by = append(by, ev.Policy.By)
		}
	}
	if len(by) != 1 || by[0] != won[0].who {
		t.Fatalf("policy.changed by %v, want only the winner %s", by, won[0].who)
	}
	if rep := audit.Verify(data, true); !rep.OK() {
		t.Fatalf("verify: %+v", rep.Violations)
	}
}

// A tenant admin (role admin, tenants [acme]) reads and changes acme's
// keys and nothing else: on every admin subject, a key of another tenant
// or a cluster-wide key (providers, identities) is refused
// policy_forbidden and recorded as policy.refused; list and export answer
// only acme's keys; a diff or import of acme's part of the policy
// leaves every other key alone. Nothing it was refused was written, and
// the trail verifies.
func TestTenantAdminConfinedToItsTenants(t *testing.T) {
	cfg := sampleConfig(t, t.TempDir())
	cfg.Identities = append(cfg.Identities, config.Identity{Name: "admin-acme", Role: "admin", Tenants: []string{"acme"}})
	cfg.Principals = append(cfg.Principals, config.Principal{Tenant: "globex", Principal: "gus"})
	n, _ := startConnected(t, cfg)
	admin := policy.NewClient(connectAs(t, n, "admin-acme"), "sharedos", 0)
	mine := func(key string) bool {
		return strings.HasPrefix(key, "grants.acme.") || strings.HasPrefix(key, "credentials.acme.") || strings.HasPrefix(key, "approvals.acme.")
	}

	bob, err := admin.Do(ctx(t), policy.OpGet, policy.Request{Key: "grants.acme.bob"})
	if err != nil {
		t.Fatalf("its own tenant's key: %v", err)
	}
	bobValue := "tenant: acme\nprincipal: bob\ngrants: [{id: bob-read, capability: notes.get, resource: 'notes/acme/**'}]\n"
	if _, err := admin.Do(ctx(t), policy.OpPut, policy.Request{Key: "grants.acme.bob", Value: bobValue, Revision: bob.Entry.Revision}); err != nil {
		t.Fatalf("a put of its own tenant's key: %v", err)
	}
	list, err := admin.Do(ctx(t), policy.OpList, policy.Request{})
	if err != nil || len(list.Entries) == 0 {
		t.Fatalf("list: %+v %v", list, err)
	}
	for _, e := range list.Entries {
		if !mine(e.Key) {
			t.Fatalf("list answered %s", e.Key)
		}
	}
	exp, err := admin.Do(ctx(t), policy.OpExport, policy.Request{})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := policy.ParseDocument([]byte(exp.Document))
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Providers) != 0 || len(doc.Identities) != 0 || slices.ContainsFunc(doc.Principals, func(p config.Principal) bool { return p.Tenant != "acme" }) {
		t.Fatalf("export answered more than acme's keys:\n%s", exp.Document)
	}
	// acme's part with bob's grants changed back: the diff is that one
	// key, and the import writes it and nothing else.
	for i, p := range doc.Principals {
		if p.Principal == "bob" {
			doc.Principals[i].Grants = append(p.Grants, authority.GrantSpec{ID: "bob-search", Capability: "notes.search", Resource: "notes/acme/**"})
		}
	}
	own, err := doc.Marshal(false)
	if err != nil {
		t.Fatal(err)
	}
	diff, err := admin.Do(ctx(t), policy.OpDiff, policy.Request{Document: string(own)})
	var changed []string
	for _, c := range diff.Changes {
		changed = append(changed, string(c.Op)+" "+c.Key)
	}
	if err != nil || !slices.Equal(changed, []string{"change grants.acme.bob"}) {
		t.Fatalf("the diff of acme's part: %v %v", changed, err)
	}
	if imp, err := admin.Do(ctx(t), policy.OpImport, policy.Request{Document: string(own), Since: diff.Revision}); err != nil || len(imp.Changes) != 1 {
		t.Fatalf("the import of acme's part: %+v %v", imp.Changes, err)
	}

	before, err := n.Policy().List(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	type ask struct {
		op  string
		req policy.Request
	}
	var asks []ask
	for _, key := range []string{"grants.globex.gus", "providers.notes", "identities.runtime"} {
		asks = append(asks,
			ask{policy.OpGet, policy.Request{Key: key}},
			ask{policy.OpPut, policy.Request{Key: key, Value: "tenant: globex\nprincipal: gus\n", Revision: 1}},
			ask{policy.OpDelete, policy.Request{Key: key, Revision: 1}})
	}
	withGlobex, withProvider := doc, doc
	withGlobex.Principals = append(slices.Clone(doc.Principals), config.Principal{Tenant: "globex", Principal: "gus"})
	withProvider.Providers = []config.Provider{{ID: "extra", Kind: "nats"}}
	for _, other := range []policy.Document{withGlobex, withProvider} {
		d, err := other.Marshal(false)
		if err != nil {
			t.Fatal(err)
		}
		asks = append(asks, ask{policy.OpDiff, policy.Request{Document: string(d)}}, ask{policy.OpImport, policy.Request{Document: string(d)}})
	}
	for _, a := range asks {
		if _, err := admin.Do(ctx(t), a.op, a.req); !errors.Is(err, reason.ErrPolicyForbidden) {
			t.Fatalf("%s %s%s: %v, want policy_forbidden", a.op, a.req.Key, a.req.Document, err)
		}
	}
	after, err := n.Policy().List(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(before, after, func(a, b policy.Entry) bool { return a.Key == b.Key && a.Revision == b.Revision }) {
		t.Fatal("a refused operation wrote")
	}

	data, evs := readAll(t, connectAs(t, n, "auditor"))
	refused := map[string]int{}
	for _, ev := range evs {
		if ev.Type == audit.PolicyRefused {
			r := ev.PolicyRefusal
			if r.By != "admin-acme" || r.Code != string(reason.PolicyForbidden) || !slices.Equal(r.Tenants, []string{"acme"}) || ev.Tenant != audit.PolicyTenant {
				t.Fatalf("policy.refused %+v", r)
			}
			refused[r.Op+" "+r.Key]++
		}
	}
	want := map[string]int{}
	for _, key := range []string{"grants.globex.gus", "providers.notes", "identities.runtime"} {
		for _, op := range []string{policy.OpGet, policy.OpPut, policy.OpDelete} {
			want[op+" "+key] = 1
		}
	}
	want["diff grants.globex.gus"], want["import grants.globex.gus"] = 1, 1
	want["diff providers.extra"], want["import providers.extra"] = 1, 1
	if !maps.Equal(refused, want) {
		t.Fatalf("policy.refused recorded %v, want %v", refused, want)
	}
	if rep := audit.Verify(data, true); !rep.OK() {
		t.Fatalf("verify: %+v", rep.Violations)
	}
}
