package identity_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sharedos/sharedos/internal/identity"
)

func TestPermits(t *testing.T) {
	rt := identity.Identity{Name: "rt", Role: identity.Runtime, Tenants: []string{"acme"}}
	narrow := identity.Identity{Name: "rt2", Role: identity.Runtime, Tenants: []string{"acme"}, Principals: []string{"acme/ada"}}
	all := identity.Identity{Name: "rt3", Role: identity.Runtime, Tenants: []string{identity.AllTenants}}
	for _, c := range []struct {
		id                identity.Identity
		tenant, principal string
		want              bool
	}{
		{rt, "acme", "ada", true},
		{rt, "acme", "bob", true},
		{rt, "globex", "ada", false},
		{rt, "", "ada", false},
		{narrow, "acme", "ada", true},
		{narrow, "acme", "bob", false},
		{narrow, "globex", "ada", false},
		{all, "globex", "gina", true},
		{identity.Identity{Name: "n", Role: identity.Node}, "any", "one", true},
		{identity.Identity{Name: "a", Role: identity.Audit, Tenants: []string{"acme"}}, "acme", "ada", false},
		{identity.Identity{Name: "p", Role: identity.Provider, Provider: "x"}, "acme", "ada", false},
	} {
		if got := c.id.Permits(c.tenant, c.principal); got != c.want {
			t.Errorf("%s.Permits(%q, %q) = %v, want %v", c.id.Name, c.tenant, c.principal, got, c.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		id   identity.Identity
	}{
		{"bad name", identity.Identity{Name: "a.b", Role: identity.Node}},
		{"unknown role", identity.Identity{Name: "x", Role: "root"}},
		{"an admin bound to every tenant", identity.Identity{Name: "x", Role: identity.Admin, Tenants: []string{"*"}}},
		{"an admin bound to a wildcard", identity.Identity{Name: "x", Role: identity.Admin, Tenants: []string{"a.>"}}},
		{"principals on an admin", identity.Identity{Name: "x", Role: identity.Admin, Principals: []string{"a/ada"}}},
		{"runtime without tenants", identity.Identity{Name: "x", Role: identity.Runtime}},
		{"audit without tenants", identity.Identity{Name: "x", Role: identity.Audit}},
		{"provider without provider", identity.Identity{Name: "x", Role: identity.Provider}},
		{"provider field on a runtime", identity.Identity{Name: "x", Role: identity.Runtime, Tenants: []string{"a"}, Provider: "p"}},
		{"principal not tenant/principal", identity.Identity{Name: "x", Role: identity.Runtime, Tenants: []string{"a"}, Principals: []string{"ada"}}},
		{"principal of an unbound tenant", identity.Identity{Name: "x", Role: identity.Runtime, Tenants: []string{"a"}, Principals: []string{"b/ada"}}},
		{"principals on an audit reader", identity.Identity{Name: "x", Role: identity.Audit, Tenants: []string{"a"}, Principals: []string{"a/ada"}}},
		{"a tenant of two tokens", identity.Identity{Name: "x", Role: identity.Audit, Tenants: []string{"acme.seg"}}},
		{"a tenant that is a wildcard", identity.Identity{Name: "x", Role: identity.Audit, Tenants: []string{">"}}},
		{"a runtime tenant with a space", identity.Identity{Name: "x", Role: identity.Runtime, Tenants: []string{"a b"}}},
		{"an empty tenant", identity.Identity{Name: "x", Role: identity.Runtime, Tenants: []string{""}}},
		{"a principal of a dotted tenant", identity.Identity{Name: "x", Role: identity.Runtime, Tenants: []string{identity.AllTenants}, Principals: []string{"a.b/ada"}}},
		{"a credential of a dotted tenant", identity.Identity{Name: "x", Role: identity.Runtime, Tenants: []string{identity.AllTenants}, Credentials: []string{"a.*/gh"}}},
	} {
		if err := c.id.Validate(); !errors.Is(err, identity.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, err)
		}
	}
	// No tenant name is reserved: each is behind a kind token in every
	// audit subject.
	for _, tn := range []string{"seg", "checkpoint", "live", "audit"} {
		if err := (identity.Identity{Name: "x", Role: identity.Audit, Tenants: []string{tn}}).Validate(); err != nil {
			t.Errorf("tenant %s: %v", tn, err)
		}
	}
	if _, err := identity.NewSet([]identity.Identity{{Name: "n", Role: identity.Node}, {Name: "n", Role: identity.Node}}); !errors.Is(err, identity.ErrInvalid) {
		t.Errorf("duplicate names: %v", err)
	}
}

// The rendered configuration is what nats-server takes: each runtime an
// account importing the turn subjects, everyone else a user of
// the node account.
func TestServerConfigIsValidNATSConfiguration(t *testing.T) {
	dir := t.TempDir()
	ids := []identity.Identity{
		{Name: "node", Role: identity.Node},
		{Name: "rt", Role: identity.Runtime, Tenants: []string{"acme"}},
		{Name: "p", Role: identity.Provider, Provider: "calendar"},
		{Name: "a", Role: identity.Audit, Tenants: []string{"acme", "seg"}},
		{Name: "all", Role: identity.Audit, Tenants: []string{identity.AllTenants}},
	}
	conf, err := identity.Provision(dir, identity.Bus{Prefix: "sharedos", Stream: "S"}, ids)
	if err != nil {
		t.Fatal(err)
	}
	var o server.Options
	if err := o.ProcessConfigString(conf); err != nil {
		t.Fatalf("nats-server refuses it: %v\n%s", err, conf)
	}
	if len(o.Nkeys) != 5 {
		t.Fatalf("%d nkey users, want 5", len(o.Nkeys))
	}
	for _, want := range []string{`"account": "SHAREDOS"`, `"sharedos.turn.>"`, `"sharedos.provider.calendar.>"`,
		`"$JS.API.CONSUMER.CREATE.S.*.sharedos.audit.seg.acme"`, `"$JS.API.CONSUMER.CREATE.S.*.sharedos.audit.seg.seg"`,
		`"sharedos.audit.live.seg.>"`, `"_INBOX_a.>"`, `"response_type": "stream"`} {
		if !strings.Contains(conf, want) {
			t.Errorf("configuration lacks %s", want)
		}
	}
	// Each reader is an account of its own; the nodes' account holds
	// the nodes and the providers.
	accounts := map[string]int{}
	for _, acc := range o.Accounts {
		for _, nk := range o.Nkeys {
			if nk.Account == acc {
				accounts[acc.Name]++
			}
		}
	}
	if accounts["a"] != 1 || accounts["all"] != 1 || accounts["rt"] != 1 || accounts[identity.NodeAccount] != 2 {
		t.Fatalf("users per account %v", accounts)
	}
	// A tenant that is not one token is refused, not rendered.
	if _, err := identity.Provision(dir, identity.Bus{Prefix: "sharedos", Stream: "S"},
		[]identity.Identity{{Name: "b", Role: identity.Audit, Tenants: []string{"acme.>"}}}); !errors.Is(err, identity.ErrInvalid) {
		t.Fatalf("a tenant acme.>: %v", err)
	}
	// A runtime named like the nodes' account is refused.
	if _, err := identity.Provision(dir, identity.Bus{Prefix: "sharedos", Stream: "S"},
		append(ids, identity.Identity{Name: identity.NodeAccount, Role: identity.Runtime, Tenants: []string{"acme"}})); err == nil {
		t.Fatal("a runtime account named like the nodes' was accepted")
	}
	// Provisioning again keeps the seeds.
	before, _ := os.ReadFile(identity.SeedFile(dir, "rt"))
	if _, err := identity.Provision(dir, identity.Bus{Prefix: "sharedos", Stream: "S"}, ids); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(identity.SeedFile(dir, "rt")); string(after) != string(before) {
		t.Fatal("provisioning replaced an existing seed")
	}
}

func TestSeedFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	path := identity.SeedFile(dir, "rt")
	kp, err := identity.LoadOrCreateSeed(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("seed file mode %v %v", st.Mode(), err)
	}
	if d, _ := os.Stat(dir); d.Mode().Perm() != 0o700 {
		t.Fatalf("creds dir mode %v", d.Mode())
	}
	again, err := identity.LoadSeed(path)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := kp.PublicKey()
	b, _ := again.PublicKey()
	if a != b || !strings.HasPrefix(a, "U") {
		t.Fatalf("keys %s %s", a, b)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := identity.LoadSeed(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a world-readable seed: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "junk.nk"), []byte("not a seed"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := identity.LoadSeed(filepath.Join(dir, "junk.nk")); err == nil {
		t.Fatal("junk accepted as a seed")
	}
	if identity.NameOfSeedFile(path) != "rt" {
		t.Fatal(identity.NameOfSeedFile(path))
	}
}

// Credentials: a file given is used (and must be good); without one, the
// generated seed if it is there; else none (an unauthenticated bus).
func TestCredentials(t *testing.T) {
	dir := t.TempDir()
	seed := identity.SeedFile(dir, "rt")
	if opts, err := identity.Credentials("", seed); err != nil || opts != nil {
		t.Fatalf("no file, no seed: %v %v", opts, err)
	}
	if _, err := identity.LoadOrCreateSeed(seed); err != nil {
		t.Fatal(err)
	}
	if opts, err := identity.Credentials("", seed); err != nil || len(opts) == 0 {
		t.Fatalf("the generated seed: %v %v", opts, err)
	}
	if _, err := identity.Credentials(filepath.Join(dir, "missing.nk"), seed); err == nil {
		t.Fatal("a named file that does not exist fell back to the generated seed")
	}
}

// The route secret is made once (0600), read back the same, and refused
// when others may read it or it is too short to be a secret.
func TestRouteSecret(t *testing.T) {
	dir := t.TempDir()
	s1, err := identity.LoadOrCreateRouteSecret(dir)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := identity.LoadOrCreateRouteSecret(dir)
	if err != nil || s2 != s1 || len(s1) != 64 {
		t.Fatalf("second read %q, %v; first %q", s2, err, s1)
	}
	path := identity.RouteSecretFile(dir)
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode: %v %v", st, err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := identity.LoadOrCreateRouteSecret(dir); err == nil {
		t.Fatal("a route secret others may read was taken")
	}
	if err := os.WriteFile(path, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := identity.LoadOrCreateRouteSecret(dir); err == nil {
		t.Fatal("a short route secret was taken")
	}
}

// An admin's account publishes only the policy subjects, imported from
// the nodes' account; no other role's rendering names them.
func TestAdminAloneHasThePolicySubjects(t *testing.T) {
	ids := []identity.Identity{
		{Name: "node", Role: identity.Node}, {Name: "admin", Role: identity.Admin},
		{Name: "runtime", Role: identity.Runtime, Tenants: []string{"acme"}},
		{Name: "auditor", Role: identity.Audit, Tenants: []string{identity.AllTenants}},
		{Name: "p", Role: identity.Provider, Provider: "calendar"},
	}
	keys := identity.Keys{}
	for _, id := range ids {
		keys[id.Name] = "U" + strings.Repeat("A", 55)
	}
	out, err := identity.ServerConfig(identity.Bus{Prefix: "sharedos", Stream: "S"}, ids, keys)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Accounts map[string]json.RawMessage `json:"accounts"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	ps := identity.PolicySubjects("sharedos")
	for name, acc := range doc.Accounts {
		has := strings.Contains(string(acc), `"`+ps+`"`)
		switch name {
		case "admin":
			if !has || strings.Contains(string(acc), "sharedos.turn.") || strings.Contains(string(acc), "$JS.") {
				t.Errorf("the admin's account is not the policy subjects alone: %s", acc)
			}
		case "SHAREDOS":
			// The export, to the admin's account only.
			if !strings.Contains(string(acc), `"service": "`+ps+`"`) {
				t.Errorf("the nodes' account does not export %s", ps)
			}
		default:
			if has {
				t.Errorf("account %s names the policy subjects: %s", name, acc)
			}
		}
	}
	if err := (identity.Identity{Name: "admin", Role: identity.Admin}).Validate(); err != nil {
		t.Errorf("an admin: %v", err)
	}
}

// An approver's account has the approvals service and its own tenants'
// announcements, nothing else; no other role has the approvals subjects.
func TestApproverAloneHasTheApprovalSubjects(t *testing.T) {
	ids := []identity.Identity{
		{Name: "node", Role: identity.Node}, {Name: "admin", Role: identity.Admin},
		{Name: "runtime", Role: identity.Runtime, Tenants: []string{"acme"}},
		{Name: "auditor", Role: identity.Audit, Tenants: []string{identity.AllTenants}},
		{Name: "carol", Role: identity.Approver, Tenants: []string{"acme"}, Principals: []string{"acme/carol"}},
	}
	keys := identity.Keys{}
	for _, id := range ids {
		keys[id.Name] = "U" + strings.Repeat("A", 55)
	}
	out, err := identity.ServerConfig(identity.Bus{Prefix: "sharedos", Stream: "S"}, ids, keys)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Accounts map[string]json.RawMessage `json:"accounts"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	for name, acc := range doc.Accounts {
		has := strings.Contains(string(acc), `"sharedos.approvals.>"`)
		switch name {
		case "carol":
			if !has || !strings.Contains(string(acc), `"sharedos.approval.requested.acme"`) ||
				strings.Contains(string(acc), "sharedos.turn.") || strings.Contains(string(acc), "$JS.") || strings.Contains(string(acc), "sharedos.policy.") {
				t.Errorf("the approver's account is not the approval subjects alone: %s", acc)
			}
		case "SHAREDOS":
		default:
			if has || strings.Contains(string(acc), "sharedos.approval.requested") {
				t.Errorf("account %s names the approval subjects: %s", name, acc)
			}
		}
	}
	if err := (identity.Identity{Name: "x", Role: identity.Approver}).Validate(); err == nil {
		t.Error("an approver bound to no tenant was accepted")
	}
	if !ids[4].Approves("acme") || ids[4].Approves("globex") || ids[2].Approves("acme") {
		t.Error("Approves")
	}
}
