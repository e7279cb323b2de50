package catalog

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// Two hashed tools whose identities share the 80 alias bits (forced here;
// a deliberate search costs about 2^40 hashes) still get distinct aliases:
// each appends its rank among them, and nothing they produce can equal a
// hashed or preferred alias.
func TestAliasHashCollisions(t *testing.T) {
	saved := identityHash
	defer func() { identityHash = saved }()
	identityHash = func(id Identity) string {
		if strings.HasPrefix(id.Name, "odd") {
			return saved(id)
		}
		return "0123456789abcdef0123"
	}
	mk := func(provider, ns, name string) *Tool {
		return &Tool{Identity: Identity{Provider: provider, Name: name}, Namespace: ns}
	}
	var tools []*Tool
	for i := range 12 {
		// Every pair claims the same preferred alias, so all are hashed.
		tools = append(tools, mk(fmt.Sprintf("p%02d", i), "ns", "t"), mk(fmt.Sprintf("p%02d", i), "ns2", "t2"))
	}
	long := strings.Repeat("L", 100)
	tools = append(tools,
		mk(long, "ns", "t"),                         // a long base, cut shorter to fit the rank
		mk("q", "ns", "odd"), mk("q2", "ns", "odd"), // hashed tools with their own hashes
		mk("q", "solo", "x"),                      // preferred
		mk("q", "q_t__0123456789abcdef0123", "1"), // preferred shaped like a collided alias: reserved, so hashed
	)
	r, err := Build(tools)
	if err != nil {
		t.Fatal(err)
	}
	shape := regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	seen := map[string]bool{}
	for i := range r.Len() {
		tl, a := r.At(i)
		if !shape.MatchString(a) || seen[a] {
			t.Fatalf("alias %q of %v: invalid or repeated", a, tl.Identity)
		}
		seen[a] = true
	}
	want := map[Identity]string{
		{long, "t"}:   strings.Repeat("L", 64-22-2) + "__0123456789abcdef0123_1", // identity order: "L" < "p"
		{"p00", "t"}:  "p00_t__0123456789abcdef0123_2",
		{"p00", "t2"}: "p00_t2__0123456789abcdef0123_3",
		{"p11", "t2"}: "p11_t2__0123456789abcdef0123_25",
		{"q", "odd"}:  "q_odd__" + saved(Identity{"q", "odd"}),
		{"q", "x"}:    "solo_x",
		{"q", "1"}:    "q_1__0123456789abcdef0123_26",
		{"q2", "odd"}: "q2_odd__" + saved(Identity{"q2", "odd"}),
	}
	for id, a := range want {
		if got := r.Alias(id); got != a {
			t.Errorf("Alias(%v) = %q, want %q", id, got, a)
		}
	}
}
