package node_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/internal/node"
	"github.com/sharedos/sharedos/internal/policy"
	"github.com/sharedos/sharedos/reason"
)

// The first start seeds the store from cluster.yaml; a revocation written
// to the store refuses a turn already open at its next call, new turns
// resolve the store's grants, and the change is a verifiable
// policy.changed. A restart with a file whose policy now differs is
// refused, naming node policy diff and import; with policy.source store it
// starts on the store's policy.
func TestPolicyStoreSeedsRevokesAndRulesRestarts(t *testing.T) {
	dir := t.TempDir()
	cfg := sampleConfig(t, dir)
	n := start(t, cfg)
	stopped := false
	defer func() {
		if !stopped {
			_ = n.Shutdown(context.Background())
		}
	}()
	nc := connectAs(t, n, "runtime")
	c := client.New(nc, nil)
	turn, err := c.Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notes"}})
	if err != nil {
		t.Fatal(err)
	}
	put := []byte(`{"space":"acme","title":"plan","body":"ship"}`)
	if _, err := turn.Invoke(ctx(t), "notes_put", put); err != nil {
		t.Fatalf("under the seeded grant: %v", err)
	}

	// Revoke ada-notes in the store.
	k := policy.Key{Kind: policy.Grants, Tenant: "acme", Name: "ada"}
	e, err := n.Policy().Get(ctx(t), k)
	if err != nil || e.By != node.SeedAuthor {
		t.Fatalf("seeded entry: %+v %v", e, err)
	}
	revoked := "tenant: acme\nprincipal: ada\ngrants:\n  - {id: ada-text, capability: 'text.*', resource: 'text/**'}\n"
	won, err := n.Policy().Put(ctx(t), k, []byte(revoked), e.Revision, "admin")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.PolicyView().WaitFor(ctx(t), won.Revision); err != nil {
		t.Fatal(err)
	}
	if _, err := turn.Invoke(ctx(t), "notes_put", put); !errors.Is(err, reason.ErrNotDiscoverable) {
		t.Fatalf("the open turn's next call after the revocation: %v, want not_discoverable", err)
	}
	if _, err := n.Policy().Put(ctx(t), k, []byte(revoked), e.Revision, "admin2"); !errors.Is(err, policy.ErrConflict) {
		t.Fatalf("a second admin at the old revision: %v", err)
	}
	_ = turn.Close(ctx(t))

	data, evs := readAll(t, connectAs(t, n, "auditor"))
	var changes []*audit.Event
	for _, ev := range evs {
		if ev.Type == audit.PolicyChanged {
			changes = append(changes, ev)
		}
	}
	last := changes[len(changes)-1]
	if len(changes) < 4 || last.Policy.Key != k.String() || last.Policy.By != "admin" || last.Policy.PrevRevision != e.Revision ||
		last.Policy.Revision != won.Revision || last.Policy.PrevHash != e.Hash() || last.Policy.Hash != won.Hash() || last.Tenant != audit.PolicyTenant {
		t.Fatalf("policy.changed events: %d, last %+v", len(changes), last.Policy)
	}
	if rep := audit.Verify(data, false); !rep.OK() || rep.PolicyChains != 2 {
		t.Fatalf("verify: %+v", rep)
	}
	if err := n.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped = true

	// The file still grants ada-notes: it disagrees with the store.
	_, err = node.Start(context.Background(), sampleConfig(t, dir), node.Options{Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "node policy diff") || !strings.Contains(err.Error(), "node policy import") || !strings.Contains(err.Error(), k.String()) {
		t.Fatalf("a restart with a file that disagrees: %v", err)
	}
	storeRules := sampleConfig(t, dir)
	storeRules.Policy.Source = config.PolicyFromStore
	n2 := start(t, storeRules)
	defer n2.Shutdown(context.Background())
	turn2, err := client.New(connectAs(t, n2, "runtime"), nil).Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notes", "text"}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := turn2.ListTools(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range l.Tools {
		if strings.HasPrefix(tool.Alias, "notes_") {
			t.Fatalf("the store's policy does not rule: %s listed", tool.Alias)
		}
	}
}

// An identity removed from the policy is disconnected from the bus and
// cannot connect again; an identity added is served at once (the bus
// takes its key, the NATS front its tenants).
func TestPolicyIdentityRemovedIsDisconnectedAddedIsServed(t *testing.T) {
	n, rt := startConnected(t, sampleConfig(t, t.TempDir()))
	gone := make(chan struct{})
	var once sync.Once
	reader, err := n.Connect("auditor-acme", nats.DisconnectErrHandler(func(*nats.Conn, error) { once.Do(func() { close(gone) }) }), nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	k := policy.Key{Kind: policy.Identities, Name: "auditor-acme"}
	e, err := n.Policy().Get(ctx(t), k)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Policy().Delete(ctx(t), k, e.Revision, "admin"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gone:
	case <-ctx(t).Done():
		t.Fatal("the removed identity is still connected")
	}
	// The disconnect happens inside the reload; connecting before the
	// reload returns would race nats-server's walk of its clients.
	waitIdentities(t, n, func(s *identity.Set) bool { _, ok := s.Lookup("auditor-acme"); return !ok })
	auth, err := identity.ConnectOptions(identity.SeedFile(n.CredentialsDir(), "auditor-acme"))
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(n.ClientURL(), append(auth, nats.MaxReconnects(0))...); err == nil {
		nc.Close()
		t.Fatal("the removed identity connected again")
	}

	if turn, err := client.New(rt, nil).Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notes"}}); err != nil {
		t.Fatalf("a runtime connected before the reload: %v", err)
	} else {
		_ = turn.Close(ctx(t))
	}
	fresh := connectAs(t, n, "runtime")
	if turn, err := client.New(fresh, nil).Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notes"}}); err != nil {
		t.Fatalf("a runtime connected after the reload: %v", err)
	} else {
		_ = turn.Close(ctx(t))
	}
	added := policy.Key{Kind: policy.Identities, Name: "runtime2"}
	if _, err := n.Policy().Put(ctx(t), added, []byte("name: runtime2\nrole: runtime\ntenants: [acme]\n"), 0, "admin"); err != nil {
		t.Fatal(err)
	}
	// The view applies the change, then the bus serves the new identity.
	waitIdentities(t, n, func(s *identity.Set) bool { _, ok := s.Lookup("runtime2"); return ok })
	nc, err := n.Connect("runtime2", nats.MaxReconnects(0))
	if err != nil {
		t.Fatalf("the added identity, once applied, does not connect: %v", err)
	}
	defer nc.Close()
	turn, err := client.New(nc, nil).Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notes"}})
	if err != nil {
		t.Fatalf("the added runtime's open: %v", err)
	}
	_ = turn.Close(ctx(t))
}

// A provider added to the policy is in new turns' catalogues and not in
// a turn already open; retired, it leaves new turns and the open turn
// that held it is refused provider_unavailable when it calls it.
func TestPolicyProviderAddedAndRetiredReachNewTurnsOnly(t *testing.T) {
	n, rt := startConnected(t, sampleConfig(t, t.TempDir()))
	c := client.New(rt, nil)
	access := client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notes", "extra"}}
	namespaces := func(tr *client.Turn) []string {
		t.Helper()
		ns, err := tr.ListNamespaces(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, x := range ns {
			out = append(out, x.Name)
		}
		return out
	}
	before, err := c.Open(ctx(t), access)
	if err != nil {
		t.Fatal(err)
	}
	_ = namespaces(before) // resolves its catalogue before the change
	k := policy.Key{Kind: policy.Providers, Name: "extra"}
	tool := "id: extra\nkind: static\ntools:\n  - {name: echo, namespace: extra, description: Echo., capability: extra.echo, requirement: extra/echo, handler: echo%s}\n"
	if _, err := n.Policy().Put(ctx(t), k, []byte(fmt.Sprintf(tool, "")), 0, "admin"); !errors.Is(err, policy.ErrInvalid) {
		t.Fatalf("a tool the node could not build (no input schema): %v", err)
	}
	e, err := n.Policy().Put(ctx(t), k, []byte(fmt.Sprintf(tool, ", input_schema: {type: object}")), 0, "admin")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.PolicyView().WaitFor(ctx(t), e.Revision); err != nil {
		t.Fatal(err)
	}
	after, err := c.Open(ctx(t), access)
	if err != nil {
		t.Fatal(err)
	}
	if got := namespaces(after); !slices.Contains(got, "extra") {
		t.Fatalf("a new turn's namespaces %v lack the added provider's", got)
	}
	if got := namespaces(before); slices.Contains(got, "extra") {
		t.Fatalf("the open turn's held catalogue gained the added provider: %v", got)
	}
	rev, err := n.Policy().Delete(ctx(t), k, e.Revision, "admin")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.PolicyView().WaitFor(ctx(t), rev); err != nil {
		t.Fatal(err)
	}
	later, err := c.Open(ctx(t), access)
	if err != nil {
		t.Fatal(err)
	}
	if got := namespaces(later); slices.Contains(got, "extra") {
		t.Fatalf("a new turn after the retirement still has it: %v", got)
	}
	if got := namespaces(after); !slices.Contains(got, "extra") {
		t.Fatalf("the turn that held the retired provider's tools lost them from its catalogue: %v", got)
	}
	for _, tr := range []*client.Turn{before, after, later} {
		_ = tr.Close(ctx(t))
	}
}

// Re-keying an identity: its seed file removed and its key put again (the
// same value), the node makes a new seed and reloads; a connection made
// with the old seed is closed and the old seed cannot connect again.
func TestPolicyIdentityRekeyed(t *testing.T) {
	n, _ := startConnected(t, sampleConfig(t, t.TempDir()))
	seed := identity.SeedFile(n.CredentialsDir(), "auditor")
	old, err := os.ReadFile(seed)
	if err != nil {
		t.Fatal(err)
	}
	gone := make(chan struct{})
	var once sync.Once
	nc, err := n.Connect("auditor", nats.DisconnectErrHandler(func(*nats.Conn, error) { once.Do(func() { close(gone) }) }), nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := os.Remove(seed); err != nil {
		t.Fatal(err)
	}
	k := policy.Key{Kind: policy.Identities, Name: "auditor"}
	e, err := n.Policy().Get(ctx(t), k)
	if err != nil {
		t.Fatal(err)
	}
	before := n.Identities() // replaced once the re-keyed set is applied
	if _, err := n.Policy().Put(ctx(t), k, e.Value, e.Revision, "admin"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gone:
	case <-ctx(t).Done():
		t.Fatal("the connection with the old seed is still open")
	}
	waitIdentities(t, n, func(s *identity.Set) bool { return s != before })
	fresh, err := os.ReadFile(seed)
	if err != nil || string(fresh) == string(old) {
		t.Fatalf("no new seed: %v", err)
	}
	oldFile := filepath.Join(t.TempDir(), "old.nk")
	if err := os.WriteFile(oldFile, old, 0o600); err != nil {
		t.Fatal(err)
	}
	auth, err := identity.ConnectOptions(oldFile)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := nats.Connect(n.ClientURL(), append(auth, nats.MaxReconnects(0))...); err == nil {
		c.Close()
		t.Fatal("the old seed connected after the re-key")
	}
	connectAs(t, n, "auditor") // the new seed does
}

// waitIdentities waits until the node's applied identity set satisfies
// done: the node sets it once the embedded server's reload has returned.
func waitIdentities(t *testing.T, n *node.Node, done func(*identity.Set) bool) {
	t.Helper()
	for !done(n.Identities()) {
		if ctx(t).Err() != nil {
			t.Fatal("the node never applied the policy's identities")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An identity's call rate changed in the policy applies to its next
// call, on the connection and in the turn it already has: lowered to one
// call in a thousand seconds, its first call runs and its second is
// refused rate_limited; raised again, its calls run. A change of another
// identity leaves its spent bucket as it is.
func TestPolicyIdentityRateChangesLive(t *testing.T) {
	n, rt := startConnected(t, sampleConfig(t, t.TempDir()))
	turn, err := client.New(rt, nil).Open(ctx(t), client.Access{Tenant: "acme", Principal: "ada", Namespaces: []string{"notes"}})
	if err != nil {
		t.Fatal(err)
	}
	defer turn.Close(ctx(t))
	get := []byte(`{"space":"acme","title":"plan"}`)
	call := func() error {
		_, err := turn.Invoke(ctx(t), "notes_get", get)
		if err != nil && !errors.Is(err, reason.ErrRateLimited) {
			t.Fatalf("a call: %v", err)
		}
		return err
	}
	k := policy.Key{Kind: policy.Identities, Name: "runtime"}
	e, err := n.Policy().Get(ctx(t), k)
	if err != nil {
		t.Fatal(err)
	}
	rate := "name: runtime\nrole: runtime\ntenants: [acme]\nopen_rate: {per_second: 1000, burst: 2000}\ncall_rate: {per_second: %s, burst: %d}\n"
	rev := putAndApply(t, n, k, fmt.Sprintf(rate, "0.001", 1), e.Revision)
	if err := call(); err != nil {
		t.Fatalf("the first call under the lowered rate: %v", err)
	}
	if err := call(); !errors.Is(err, reason.ErrRateLimited) {
		t.Fatalf("the second call under the lowered rate: %v, want rate_limited", err)
	}
	putAndApply(t, n, policy.Key{Kind: policy.Identities, Name: "runtime2"}, "name: runtime2\nrole: runtime\ntenants: [acme]\n", 0)
	if err := call(); !errors.Is(err, reason.ErrRateLimited) {
		t.Fatalf("after another identity changed: %v, want rate_limited still", err)
	}
	putAndApply(t, n, k, fmt.Sprintf(rate, "20000", 40000), rev)
	for range 3 {
		if err := call(); err != nil {
			t.Fatalf("a call under the raised rate: %v", err)
		}
	}
}
