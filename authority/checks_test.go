package authority_test

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/sharedos/sharedos/authority"
)

// Every attribute name is part of the key, not only the values.
func TestTurnAuthorityKeyCoversAttributeNames(t *testing.T) {
	base := authority.AccessContext{Tenant: "acme", Principal: "ada", TurnID: "t1"}
	keys := map[string]string{}
	for name, attrs := range map[string]map[string]string{
		"none":         nil,
		"plan=pro":     {"plan": "pro"},
		"tier=pro":     {"tier": "pro"},
		"plan=tier":    {"plan": "tier"},
		"pro=plan":     {"pro": "plan"},
		"plan=,pro=":   {"plan": "", "pro": ""},
		"planpro=":     {"planpro": ""},
		"=planpro":     {"": "planpro"},
		"a=b,c=d":      {"a": "b", "c": "d"},
		"a=d,c=b":      {"a": "d", "c": "b"},
		"empty name":   {"": ""},
		"one, shifted": {"1": ""},
	} {
		c := base
		c.Attributes = attrs
		k := authority.TurnAuthorityKey(c)
		if other, ok := keys[k]; ok {
			t.Errorf("attributes %s and %s give one key", name, other)
		}
		keys[k] = name
	}
	// The key does not depend on map order or on nil versus empty.
	a := base
	a.Attributes = map[string]string{}
	if authority.TurnAuthorityKey(a) != authority.TurnAuthorityKey(base) {
		t.Error("empty and nil attributes differ")
	}
}

// Each field is length-prefixed with its full 64-bit length: a prefix that
// kept only the low byte would let a 256-byte tenant that spells out the
// prefixes of the following fields collide with a context whose fields are
// shifted by one. These two contexts have the same bytes under such a
// truncated prefix and must not have the same key.
func TestTurnAuthorityKeyLongFieldsDoNotCollide(t *testing.T) {
	prefix := func(n int) string {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(n))
		return string(b[:])
	}
	p2 := strings.Repeat("x", 240)
	t1 := prefix(len(p2)) + p2 + prefix(0) // 256 bytes: its length's low byte is 0
	if len(t1) != 256 {
		t.Fatalf("tenant is %d bytes", len(t1))
	}
	c1 := authority.AccessContext{Tenant: t1, Principal: "t", CredentialProfile: "1", TurnID: "k"}
	c2 := authority.AccessContext{Tenant: "", Principal: p2, CredentialProfile: "", TurnID: "t", Attributes: map[string]string{"k": "0"}}
	if authority.TurnAuthorityKey(c1) == authority.TurnAuthorityKey(c2) {
		t.Fatal("a 256-byte field collided with shifted fields")
	}
	// Lengths differing only above the low byte give different keys.
	for _, n := range []int{1, 257, 65537} {
		a := authority.AccessContext{Tenant: strings.Repeat("a", n)}
		b := authority.AccessContext{Tenant: strings.Repeat("a", n-1)}
		if authority.TurnAuthorityKey(a) == authority.TurnAuthorityKey(b) {
			t.Errorf("tenants of %d and %d bytes collide", n, n-1)
		}
	}
	// The key is hex SHA-256.
	if k := authority.TurnAuthorityKey(c1); len(k) != 64 || strings.Trim(k, "0123456789abcdef") != "" {
		t.Errorf("key %q is not hex SHA-256", k)
	}
}

func TestGrantWindowAndCompile(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		spec      authority.GrantSpec
		ok        bool
		validAt   []time.Time
		invalidAt []time.Time
	}{
		{"open both sides", authority.GrantSpec{ID: "g", Capability: "a", Resource: "b"}, true,
			[]time.Time{{}, t0, t0.Add(1000 * time.Hour)}, nil},
		{"only not_before", authority.GrantSpec{ID: "g", Capability: "a", Resource: "b", NotBefore: t0}, true,
			[]time.Time{t0, t0.Add(1000 * time.Hour)}, []time.Time{t0.Add(-time.Nanosecond)}},
		{"only expires_at", authority.GrantSpec{ID: "g", Capability: "a", Resource: "b", ExpiresAt: t0}, true,
			[]time.Time{t0.Add(-time.Nanosecond), t0.Add(-1000 * time.Hour)}, []time.Time{t0, t0.Add(time.Nanosecond)}},
		{"one nanosecond window", authority.GrantSpec{ID: "g", Capability: "a", Resource: "b", NotBefore: t0, ExpiresAt: t0.Add(time.Nanosecond)}, true,
			[]time.Time{t0}, []time.Time{t0.Add(-time.Nanosecond), t0.Add(time.Nanosecond)}},
		{"empty window", authority.GrantSpec{ID: "g", Capability: "a", Resource: "b", NotBefore: t0, ExpiresAt: t0}, false, nil, nil},
		{"inverted window", authority.GrantSpec{ID: "g", Capability: "a", Resource: "b", NotBefore: t0, ExpiresAt: t0.Add(-time.Second)}, false, nil, nil},
		{"bad capability", authority.GrantSpec{ID: "g", Capability: "a..b", Resource: "b"}, false, nil, nil},
		{"bad resource", authority.GrantSpec{ID: "g", Capability: "a", Resource: "b//c"}, false, nil, nil},
	} {
		g, err := tc.spec.Compile()
		if (err == nil) != tc.ok {
			t.Errorf("%s: compile error %v", tc.name, err)
			continue
		}
		if !tc.ok {
			if !strings.Contains(err.Error(), `grant "g"`) {
				t.Errorf("%s: error %q does not name the grant", tc.name, err)
			}
			continue
		}
		if g.ID != "g" || g.Capability.String() != "a" || g.Resource.String() != "b" || !g.NotBefore.Equal(tc.spec.NotBefore) || !g.ExpiresAt.Equal(tc.spec.ExpiresAt) {
			t.Errorf("%s: compiled %+v", tc.name, g)
		}
		for _, at := range tc.validAt {
			if !g.ValidAt(at) {
				t.Errorf("%s: not valid at %s", tc.name, at)
			}
		}
		for _, at := range tc.invalidAt {
			if g.ValidAt(at) {
				t.Errorf("%s: valid at %s", tc.name, at)
			}
		}
	}
}

// CanInvoke needs one grant covering capability and resource together;
// two grants each covering one of them are not enough.
func TestCanInvokeNeedsOneGrantForBoth(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	compile := func(s authority.GrantSpec) authority.Grant {
		g, err := s.Compile()
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	a := authority.NewAuthority([]authority.Grant{
		compile(authority.GrantSpec{ID: "cap-only", Capability: "notion.search", Resource: "github/**"}),
		compile(authority.GrantSpec{ID: "res-only", Capability: "github.*", Resource: "notion/**"}),
		compile(authority.GrantSpec{ID: "expired", Capability: "notion.**", Resource: "notion/**", ExpiresAt: t0}),
	})
	if id, ok := a.CanInvoke("notion.search", "notion/p", t0); ok {
		t.Fatalf("allowed by %q", id)
	}
	if id, ok := a.CanInvoke("notion.search", "notion/p", t0.Add(-time.Second)); !ok || id != "expired" {
		t.Fatalf("before expiry: %q %v", id, ok)
	}
	if !a.CanDiscover("notion.search", t0) || !a.CanDiscover("github.x", t0) || a.CanDiscover("notion.pages.get", t0) {
		t.Fatal("discovery judged on the wrong grants")
	}
	if !a.CanDiscover("notion.pages.get", t0.Add(-time.Second)) {
		t.Fatal("discovery ignores a grant valid at the instant")
	}
	if id, ok := a.CanInvoke("github.search", "notion/x", t0); !ok || id != "res-only" {
		t.Fatalf("res-only: %q %v", id, ok)
	}
	if len(a.Grants()) != 3 {
		t.Fatalf("%d grants", len(a.Grants()))
	}
	var none authority.Authority
	if _, ok := none.CanInvoke("a", "b", t0); ok || none.CanDiscover("a", t0) {
		t.Fatal("empty authority allows")
	}
}

func TestStaticSource(t *testing.T) {
	s, err := authority.NewStaticSource(map[[2]string][]authority.GrantSpec{
		{"acme", "ada"}: {{ID: "g1", Capability: "a", Resource: "b"}, {ID: "g2", Capability: "c", Resource: "d"}},
		{"acme", "bob"}: {{ID: "g3", Capability: "a", Resource: "b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Resolve(context.Background(), authority.AccessContext{Tenant: "acme", Principal: "ada"})
	if err != nil || len(a.Grants()) != 2 || a.Grants()[0].ID != "g1" || a.Grants()[1].ID != "g2" {
		t.Fatalf("ada: %+v %v", a.Grants(), err)
	}
	a, _ = s.Resolve(context.Background(), authority.AccessContext{Tenant: "globex", Principal: "ada"})
	if len(a.Grants()) != 0 {
		t.Fatalf("another tenant's ada got %+v", a.Grants())
	}
	if _, err := authority.NewStaticSource(map[[2]string][]authority.GrantSpec{{"acme", "ada"}: {{ID: "bad", Capability: "", Resource: "b"}}}); err == nil {
		t.Fatal("a bad grant was accepted")
	}
}
