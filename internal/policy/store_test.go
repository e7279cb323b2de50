package policy_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/config"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
	"github.com/sharedos/sharedos/internal/policy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const baseYAML = `
node: {id: n1}
principals:
  - tenant: acme
    principal: ada
    grants:
      - {id: ada-notion, capability: "notion.*", resource: "notion/workspace/acme/**"}
  - tenant: acme
    principal: "ada@acme.example"
    grants: []
credential_profiles:
  - {tenant: acme, profile: acme-notion-work, principals: [ada]}
providers:
  - id: util
    kind: static
    tools:
      - {name: echo, namespace: util, description: "Echo <b>it</b> & more", capability: util.echo, requirement: util/echo, handler: echo,
         input_schema: {type: object, properties: {text: {type: string}}}}
`

func baseConfig(t *testing.T) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(baseYAML))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// recorder journals every operation's changes; ops counts the operations
// ended.
type recorder struct {
	changes []policy.Changed
	ops     int
}

type journal struct{ r *recorder }

func (j journal) Record(_ context.Context, c policy.Changed) error {
	j.r.changes = append(j.r.changes, c)
	return nil
}

func (j journal) End(context.Context) error {
	j.r.ops++
	return nil
}

func (r *recorder) journal() policy.Journal { return journal{r} }

func openStore(t *testing.T, base *config.Config, rec *recorder) (*policy.Store, jetstream.JetStream) {
	t.Helper()
	_, nc := natstest.Start(t, true)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := policy.Open(ctx, js, policy.Options{Bucket: "POLICY", Check: func(d policy.Document) error { return d.Validate() }, Journal: rec.journal})
	if err != nil {
		t.Fatal(err)
	}
	return s, js
}

func TestKeysRoundTrip(t *testing.T) {
	for _, k := range []policy.Key{
		{Kind: policy.Grants, Tenant: "acme", Name: "ada"},
		{Kind: policy.Grants, Tenant: "acme", Name: "ada@acme.example"},
		{Kind: policy.Credentials, Tenant: "acme", Name: "acme.work:1"},
		{Kind: policy.Providers, Name: "util"},
		{Kind: policy.Identities, Name: "runtime"},
	} {
		got, err := policy.ParseKey(k.String())
		if err != nil || got != k {
			t.Errorf("%+v: %q parsed as %+v, %v", k, k.String(), got, err)
		}
		if strings.Count(k.String(), ".") != map[bool]int{true: 2, false: 1}[k.Kind == policy.Grants || k.Kind == policy.Credentials] {
			t.Errorf("%q: a name's dots leaked into the key", k)
		}
	}
	for _, bad := range []string{"", "grants", "grants.acme", "grants.acme.ada.x", "other.x", "providers.=", "providers.a b", "providers.=YQ", strings.Repeat("a", 600)} {
		if _, err := policy.ParseKey(bad); !errors.Is(err, policy.ErrInvalidKey) {
			t.Errorf("ParseKey(%q) = %v, want ErrInvalidKey", bad, err)
		}
	}
}

// Seeding, reading back, the YAML comparison, and an item's value in
// canonical form whatever form it was written in.
func TestSeedExportDiff(t *testing.T) {
	base := baseConfig(t)
	rec := &recorder{}
	s, _ := openStore(t, base, rec)
	ctx := context.Background()
	doc := policy.FromConfig(base)
	if wrote, err := s.Seed(ctx, doc, "seed"); err != nil || !wrote {
		t.Fatalf("seed: %v %v", wrote, err)
	}
	if len(rec.changes) != 4 || rec.ops != 1 {
		t.Fatalf("%d changes recorded in %d operations, want 4 in one", len(rec.changes), rec.ops)
	}
	if wrote, err := s.Seed(ctx, doc, "seed"); err != nil || wrote {
		t.Fatalf("a second seed wrote: %v %v", wrote, err)
	}
	diff, err := s.Diff(ctx, doc)
	if err != nil || len(diff) != 0 {
		t.Fatalf("the seeded store differs from its seed: %+v %v", diff, err)
	}
	got, entries, err := s.Export(ctx)
	if err != nil || len(entries) != 4 {
		t.Fatalf("export: %d entries, %v", len(entries), err)
	}
	if diff, _ := s.Diff(ctx, got); len(diff) != 0 {
		t.Fatalf("the export differs from the store: %+v", diff)
	}
	out, err := got.Marshal(false)
	if err != nil {
		t.Fatal(err)
	}
	again, err := policy.ParseDocument(out)
	if err != nil {
		t.Fatal(err)
	}
	if diff, _ := s.Diff(ctx, again); len(diff) != 0 {
		t.Fatalf("the exported YAML read back differs: %+v\n%s", diff, out)
	}
	if !strings.Contains(string(entries[3].Value), "Echo <b>it</b> & more") || entries[3].Key.Kind != policy.Providers {
		t.Fatalf("a value's text was rewritten: %s", entries[3].Value)
	}

	// A changed document: one grant revoked, one binding gone, one added.
	changed := policy.FromConfig(base)
	changed.Principals = append([]config.Principal(nil), changed.Principals...)
	changed.Principals[0].Grants = nil
	changed.CredentialProfiles = []config.CredentialProfile{{Tenant: "acme", Profile: "acme-shared"}}
	diff, err = s.Diff(ctx, changed)
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, d := range diff {
		ops = append(ops, string(d.Op)+" "+d.Key.String())
	}
	want := "remove credentials.acme.acme-notion-work,add credentials.acme.acme-shared,change grants.acme.ada"
	if strings.Join(ops, ",") != want {
		t.Fatalf("diff = %v, want %s", ops, want)
	}
	done, err := s.Import(ctx, changed, "admin")
	if err != nil || len(done) != 3 {
		t.Fatalf("import: %d written, %v", len(done), err)
	}
	if diff, _ := s.Diff(ctx, changed); len(diff) != 0 {
		t.Fatalf("after import the store differs: %+v", diff)
	}
	last := rec.changes[len(rec.changes)-1]
	if last.By != "admin" || last.Key.String() != "grants.acme.ada" || last.Op != policy.Change || last.PrevHash == "" || last.Hash == "" || last.PrevHash == last.Hash || last.Revision <= last.PrevRevision {
		t.Fatalf("recorded change %+v", last)
	}
}

// Two writers at one revision: one wins, the other is told the current
// revision; a delete names its revision too; an invalid value or a change
// leaving the policy invalid is refused before anything is written.
func TestOptimisticConcurrencyAndValidation(t *testing.T) {
	base := baseConfig(t)
	rec := &recorder{}
	s, _ := openStore(t, base, rec)
	ctx := context.Background()
	if _, err := s.Seed(ctx, policy.FromConfig(base), "seed"); err != nil {
		t.Fatal(err)
	}
	k := policy.Key{Kind: policy.Grants, Tenant: "acme", Name: "ada"}
	e, err := s.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	v1 := []byte("tenant: acme\nprincipal: ada\ngrants: [{id: a, capability: notion.search, resource: notion/**}]\n")
	v2 := []byte(`{"tenant":"acme","principal":"ada","grants":[{"id":"b","capability":"notion.search","resource":"notion/**"}]}`)
	won, err := s.Put(ctx, k, v1, e.Revision, "alice")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Put(ctx, k, v2, e.Revision, "bob")
	var conflict *policy.ConflictError
	if !errors.As(err, &conflict) || !errors.Is(err, policy.ErrConflict) || conflict.Current != won.Revision || conflict.Expected != e.Revision {
		t.Fatalf("second writer: %v, want a conflict naming revision %d", err, won.Revision)
	}
	if got, _ := s.Get(ctx, k); got.By != "alice" || got.Revision != won.Revision {
		t.Fatalf("the loser overwrote the winner: %+v", got)
	}
	if _, err := s.Put(ctx, policy.Key{Kind: policy.Grants, Tenant: "acme", Name: "eve"}, v1, 0, "x"); !errors.Is(err, policy.ErrInvalid) {
		t.Fatalf("a value naming another key: %v", err)
	}
	for name, v := range map[string]string{
		"bad capability": "tenant: acme\nprincipal: ada\ngrants: [{id: a, capability: 'a..b', resource: x}]\n",
		"unknown field":  "tenant: acme\nprincipal: ada\ngrantz: []\n",
		"too large":      strings.Repeat("#", policy.MaxValueBytes+1),
	} {
		if _, err := s.Put(ctx, k, []byte(v), won.Revision, "x"); !errors.Is(err, policy.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	// Removing ada's grants would leave a binding naming a principal that
	// is not among principals: refused as cluster.yaml would be.
	if _, err := s.Delete(ctx, k, won.Revision, "x"); !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), "not among principals") {
		t.Fatalf("delete leaving the policy invalid: %v", err)
	}
	bk := policy.Key{Kind: policy.Credentials, Tenant: "acme", Name: "acme-notion-work"}
	be, _ := s.Get(ctx, bk)
	if _, err := s.Delete(ctx, bk, be.Revision+100, "x"); !errors.Is(err, policy.ErrConflict) {
		t.Fatalf("delete at a wrong revision: %v", err)
	}
	rev, err := s.Delete(ctx, bk, be.Revision, "carol")
	if err != nil || rev <= be.Revision {
		t.Fatalf("delete: %d %v", rev, err)
	}
	if _, err := s.Get(ctx, bk); !errors.Is(err, policy.ErrNotFound) {
		t.Fatalf("deleted key: %v", err)
	}
	last := rec.changes[len(rec.changes)-1]
	if last.Op != policy.Remove || last.Revision != rev || last.PrevRevision != be.Revision || last.By != "carol" || last.Hash != "" {
		t.Fatalf("recorded removal %+v", last)
	}
}

// The view applies each change to Live as it arrives, so an Authority a
// turn already holds sees a revocation at its next decision.
func TestViewRevocationReachesOpenTurns(t *testing.T) {
	base := baseConfig(t)
	s, _ := openStore(t, base, &recorder{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := s.Seed(ctx, policy.FromConfig(base), "seed"); err != nil {
		t.Fatal(err)
	}
	live, _ := authority.NewLive(nil, nil)
	v, err := s.Watch(ctx, live, policy.ViewOptions{MaxStaleness: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	now := time.Now()
	held, _ := live.Resolve(ctx, authority.AccessContext{Tenant: "acme", Principal: "ada", CredentialProfile: "acme-notion-work"})
	if !held.CanDiscover("notion.search", now) || !held.CredentialInForce() {
		t.Fatal("the seeded grant is not in force")
	}
	k := policy.Key{Kind: policy.Grants, Tenant: "acme", Name: "ada"}
	e, _ := s.Get(ctx, k)
	won, err := s.Put(ctx, k, []byte("tenant: acme\nprincipal: ada\ngrants: [{id: other, capability: 'notes.*', resource: 'notes/**'}]\n"), e.Revision, "admin")
	if err != nil {
		t.Fatal(err)
	}
	if err := v.WaitFor(ctx, won.Revision); err != nil {
		t.Fatal(err)
	}
	if held.CanDiscover("notion.search", now) {
		t.Fatal("the revoked grant still allows the open turn")
	}
	if held.CanDiscover("notes.put", now) {
		t.Fatal("a grant added after the turn resolved widened it")
	}
	d, entries, err := v.Document()
	if err != nil || len(d.Principals) != 2 || entries[k].By != "admin" {
		t.Fatalf("view document: %+v %v", d.Principals, err)
	}
}

// A view whose bucket stops answering goes stale within MaxStaleness and
// decisions on it are refused; it does not keep honouring what it last
// heard.
func TestViewGoesStaleWithoutTheBucket(t *testing.T) {
	base := baseConfig(t)
	srv, nc := natstest.Start(t, true)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := policy.Open(ctx, js, policy.Options{Bucket: "POLICY"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Seed(ctx, policy.FromConfig(base), "seed"); err != nil {
		t.Fatal(err)
	}
	live, _ := authority.NewLive(nil, nil)
	v, err := s.Watch(ctx, live, policy.ViewOptions{MaxStaleness: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop()
	held, _ := live.Resolve(ctx, authority.AccessContext{Tenant: "acme", Principal: "ada"})
	for held.Stale(time.Now()) { // the first probe's answer confirms it
		if ctx.Err() != nil {
			t.Fatal("never confirmed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	srv.Shutdown()
	for !held.Stale(time.Now()) {
		if ctx.Err() != nil {
			t.Fatal("still confirmed with the server gone")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if c := live.Confirmed(); time.Since(c) < 200*time.Millisecond {
		t.Fatalf("stale although confirmed at %s", c)
	}
}
