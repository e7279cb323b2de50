package authority_test

import (
	"testing"
	"time"

	"github.com/sharedos/sharedos/authority"
)

func TestPatternMatch(t *testing.T) {
	cases := []struct {
		cap     bool
		pattern string
		name    string
		want    bool
	}{
		{true, "notion.search", "notion.search", true},
		{true, "notion.search", "notion.searchx", false},
		{true, "notion.search", "notion.search.deep", false},
		{true, "notion.*", "notion.search", true},
		{true, "notion.*", "notion.pages.delete", false},
		{true, "notion.*", "notion", false},
		{true, "notion.**", "notion.pages.delete", true},
		{true, "notion.**", "notion", false},
		{true, "*.search", "github.search", true},
		{true, "notion.*", "notion.", false},
		{true, "**", "anything.at.all", true},
		{false, "notion/workspace/acme/**", "notion/workspace/acme/pages/1", true},
		{false, "notion/workspace/acme/**", "notion/workspace/acme", false},
		{false, "notion/workspace/acme/**", "notion/workspace/acmex/pages", false},
		{false, "notion/workspace/acme/**", "notion/workspace/evil/pages/1", false},
		{false, "notion/workspace/acme/**", "notion/workspace/acme//x", false},
		{false, "notion/workspace/*/pages", "notion/workspace/acme/pages", true},
		{false, "notion/workspace/*/pages", "notion/workspace//pages", false},
		{false, "notion/workspace/acme/**", "", false},
		// Empty segments never match: not leading, not trailing, not
		// doubled, not under *, not under **.
		{false, "notion/workspace/*/evil", "notion/workspace//evil", false},
		{false, "notion/workspace/*/evil", "notion/workspace/x/evil", true},
		{false, "notion/workspace/*", "notion/workspace/", false},
		{false, "notion/workspace/*", "notion/workspace//", false},
		{false, "notion/workspace", "notion/workspace/", false},
		{false, "notion/workspace", "/notion/workspace", false},
		{false, "*/workspace", "/workspace", false},
		{false, "notion/**", "notion/", false},
		{false, "notion/**", "notion//", false},
		{false, "notion/**", "notion//a", false},
		{false, "notion/**", "notion/a/", false},
		{false, "notion/**", "notion/a//b", false},
		{false, "notion/**", "notion/a/b", true},
		{false, "notion/**", "notion/a", true},
		{false, "**", "/", false},
		{false, "**", "a/", false},
		{false, "**", "/a", false},
		{false, "**", "a", true},
		{true, "notion.search", "notion.search.", false},
		{true, "notion.search", "notion.search", true},
		{true, "notion.search.*", "notion.search.", false},
		{true, "notion.*", "notion..", false},
		{true, "*", ".", false},
		{true, "*", "", false},
		{true, "*.search", ".search", false},
		{true, "notion.**", "notion..x", false},
		{true, "notion.**", "notion.x.", false},
		{true, "notion.**", "notion.x.y", true},
		{true, "notion.search", "notion/search", false},
		{false, "notion/search", "notion.search", false},
		{true, "a.b.c", "a.b", false},
		{true, "a.b", "a.b.c", false},
		{true, "a.*.c", "a.x.c", true},
		{true, "a.*.c", "a.x.d", false},
	}
	for _, c := range cases {
		parse := authority.ParseResourcePattern
		if c.cap {
			parse = authority.ParseCapabilityPattern
		}
		p, err := parse(c.pattern)
		if err != nil {
			t.Fatalf("parse %q: %v", c.pattern, err)
		}
		if got := p.Match(c.name); got != c.want {
			t.Errorf("%q.Match(%q) = %v, want %v", c.pattern, c.name, got, c.want)
		}
		if p.String() != c.pattern {
			t.Errorf("String() = %q, want %q", p.String(), c.pattern)
		}
	}
	for _, bad := range []string{"", "a..b", "a.**.b", "a.b*", "."} {
		if _, err := authority.ParseCapabilityPattern(bad); err == nil {
			t.Errorf("ParseCapabilityPattern(%q) accepted", bad)
		}
	}
	for _, bad := range []string{"/a", "a/", "a//b", "**/a", "a/b*", "*a", "/"} {
		if _, err := authority.ParseResourcePattern(bad); err == nil {
			t.Errorf("ParseResourcePattern(%q) accepted", bad)
		}
	}
	for _, good := range []string{"*", "**", "a/*/b", "a/**", "*/*"} {
		if _, err := authority.ParseResourcePattern(good); err != nil {
			t.Errorf("ParseResourcePattern(%q): %v", good, err)
		}
	}
	var zero authority.Pattern
	if zero.Match("x") {
		t.Error("zero pattern matched")
	}
}

func TestAuthorityEvaluatedAtTheInstant(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	g, err := authority.GrantSpec{ID: "g1", Capability: "notion.*", Resource: "notion/workspace/acme/**",
		NotBefore: t0, ExpiresAt: t0.Add(time.Minute)}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	a := authority.NewAuthority([]authority.Grant{g})
	if a.CanDiscover("notion.search", t0.Add(-time.Second)) {
		t.Error("discoverable before not_before")
	}
	if !a.CanDiscover("notion.search", t0) {
		t.Error("not discoverable inside window")
	}
	if id, ok := a.CanInvoke("notion.search", "notion/workspace/acme/p/1", t0.Add(30*time.Second)); !ok || id != "g1" {
		t.Errorf("CanInvoke inside window = %q %v", id, ok)
	}
	if _, ok := a.CanInvoke("notion.search", "notion/workspace/other/p/1", t0); ok {
		t.Error("invocable outside resource tree")
	}
	if _, ok := a.CanInvoke("notion.search", "notion/workspace/acme/p/1", t0.Add(time.Minute)); ok {
		t.Error("invocable at expires_at")
	}
	if _, err := (authority.GrantSpec{ID: "bad", Capability: "a", Resource: "b", NotBefore: t0, ExpiresAt: t0}).Compile(); err == nil {
		t.Error("empty window accepted")
	}
}

func TestTurnAuthorityKeyExcludesNowAndNamespaces(t *testing.T) {
	base := authority.AccessContext{Tenant: "acme", Principal: "ada", CredentialProfile: "p1", TurnID: "t1",
		Now: time.Unix(1, 0), EnabledNamespaces: []string{"notion"}, Attributes: map[string]string{"plan": "pro"}}
	k := authority.TurnAuthorityKey(base)
	same := base
	same.Now = time.Unix(99, 0)
	same.EnabledNamespaces = []string{"github", "notion"}
	same.Attributes = map[string]string{"plan": "pro"}
	if authority.TurnAuthorityKey(same) != k {
		t.Error("Now or EnabledNamespaces changed the key")
	}
	for name, mutate := range map[string]func(*authority.AccessContext){
		"tenant":     func(c *authority.AccessContext) { c.Tenant = "other" },
		"principal":  func(c *authority.AccessContext) { c.Principal = "bob" },
		"credential": func(c *authority.AccessContext) { c.CredentialProfile = "p2" },
		"turn":       func(c *authority.AccessContext) { c.TurnID = "t2" },
		"attribute":  func(c *authority.AccessContext) { c.Attributes = map[string]string{"plan": "free"} },
		"extra attr": func(c *authority.AccessContext) { c.Attributes = map[string]string{"plan": "pro", "x": ""} },
		"shift":      func(c *authority.AccessContext) { c.Tenant, c.Principal = "acmea", "da" },
	} {
		c := base
		mutate(&c)
		if authority.TurnAuthorityKey(c) == k {
			t.Errorf("changing %s kept the key", name)
		}
	}
}

func BenchmarkCanInvoke(b *testing.B) {
	var grants []authority.Grant
	for _, s := range []authority.GrantSpec{
		{ID: "a", Capability: "github.*", Resource: "github/**"},
		{ID: "b", Capability: "notion.*", Resource: "notion/workspace/acme/**"},
	} {
		g, _ := s.Compile()
		grants = append(grants, g)
	}
	a := authority.NewAuthority(grants)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := a.CanInvoke("notion.search", "notion/workspace/acme/pages/42", now); !ok {
			b.Fatal("denied")
		}
	}
}
