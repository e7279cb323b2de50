package catalog_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/sharedos/sharedos/catalog"
)

// The alias rule of the package documentation, written out independently.

func identityHash(id catalog.Identity) string {
	h := sha256.New()
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(id.Provider))))
	h.Write([]byte(id.Provider + id.Name))
	return hex.EncodeToString(h.Sum(nil))[:20]
}

func sanitizeModel(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; strings.IndexByte("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", c) >= 0 {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

var (
	reservedShape = regexp.MustCompile(`__[0-9a-f]{20}(_[0-9]+)?$`)
	aliasShape    = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)

// preferredModel is the tool's preferred alias, or "" when it has none.
func preferredModel(t *catalog.Tool) string {
	p := sanitizeModel(t.Namespace + "_" + t.Identity.Name)
	if len(p) > 64 || reservedShape.MatchString(p) {
		return ""
	}
	return p
}

func hashedModel(id catalog.Identity) string {
	base := sanitizeModel(id.Provider + "_" + id.Name)
	return base[:min(len(base), 42)] + "__" + identityHash(id)
}

// aliasModel is the alias the rule gives t, given whether another tool in
// the set has the same preferred alias (no 80-bit hash collisions here).
func aliasModel(t *catalog.Tool, claimed bool) string {
	if p := preferredModel(t); p != "" && !claimed {
		return p
	}
	return hashedModel(t.Identity)
}

func claimedIn(t *catalog.Tool, set []*catalog.Tool) bool {
	p := preferredModel(t)
	for _, u := range set {
		if u != t && p != "" && preferredModel(u) == p {
			return true
		}
	}
	return false
}

// tool builds a Tool directly: Build reads only identity, namespace and
// revision, and direct construction lets the property test use identities
// Normalize would also accept without compiling thousands of schemas.
func tool(provider, ns, name string) *catalog.Tool {
	return &catalog.Tool{Identity: catalog.Identity{Provider: provider, Name: name}, Namespace: ns, Revision: "r"}
}

// adversarialSet draws identities crafted to collide: shared preferred
// aliases, names shaped like hashed aliases (real ones of other tools in
// the set, too), names that sanitize or truncate to the same string,
// non-ASCII, and the notion_search / 4f250e71 pair.
func adversarialSet(rng *rand.Rand) []*catalog.Tool {
	words := []string{"a", "b", "notion", "search", "notion_search", "4f250e71", "x.y", "x@y", "x_y", "é", "日本", "a-b", "a_b",
		"__0123456789abcdef0123", "q__0123456789abcdef0123_1", "q__0123456789abcdef0123_", "Z__0123456789ABCDEF0123"}
	word := func() string {
		switch rng.IntN(6) {
		case 0:
			return strings.Repeat(words[rng.IntN(len(words))], 128)[:1+rng.IntN(128)]
		case 1:
			return strings.Repeat("long", 15) + words[rng.IntN(len(words))]
		default:
			return words[rng.IntN(len(words))]
		}
	}
	seen := map[catalog.Identity]bool{}
	var set []*catalog.Tool
	add := func(t *catalog.Tool) {
		if t.Identity.Provider != "" && t.Identity.Name != "" && t.Namespace != "" && !seen[t.Identity] {
			seen[t.Identity] = true
			set = append(set, t)
		}
	}
	for range 2 + rng.IntN(30) {
		ns := word()
		if rng.IntN(3) == 0 {
			ns = "notion"
		}
		add(tool(word(), ns, word()))
	}
	// Names shaped exactly like other tools' hashed aliases, split at an '_'
	// so that namespace + "_" + name reproduces them.
	for _, t := range set[:len(set)/2] {
		h := hashedModel(t.Identity)
		if i := strings.IndexByte(h, '_'); i > 0 && i+1 < len(h) {
			add(tool(word(), h[:i], h[i+1:]))
		}
		add(tool(word(), "n", h))
	}
	rng.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
	return set
}

func checkRegistry(t *testing.T, set []*catalog.Tool) *catalog.Registry {
	t.Helper()
	r, err := catalog.Build(set)
	if err != nil {
		t.Fatalf("Build failed on distinct identities: %v", err)
	}
	if r.Len() != len(set) {
		t.Fatalf("Len = %d, want %d", r.Len(), len(set))
	}
	seen := map[string]catalog.Identity{}
	for i := range r.Len() {
		tl, alias := r.At(i)
		if !aliasShape.MatchString(alias) {
			t.Fatalf("alias %q of %v is not a valid tool name", alias, tl.Identity)
		}
		if other, dup := seen[alias]; dup {
			t.Fatalf("alias %q given to %v and %v", alias, other, tl.Identity)
		}
		seen[alias] = tl.Identity
		if got, ok := r.Lookup(alias); !ok || got != tl {
			t.Fatalf("Lookup(%q) = %v, %v; want %v", alias, got, ok, tl.Identity)
		}
		if r.Alias(tl.Identity) != alias {
			t.Fatalf("Alias(%v) = %q, want %q", tl.Identity, r.Alias(tl.Identity), alias)
		}
	}
	return r
}

// Property: on any set of distinct identities Build succeeds, aliases are
// valid, unique and exactly reversible, and each tool's alias is the
// documented function of its own identity and of whether another tool in
// the set claims its preferred alias — so it is the same in every subset
// (every combination of providers answering) that agrees on that bit.
func TestAliasRuleProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	hashed, preferred := 0, 0
	for trial := range 400 {
		set := adversarialSet(rng)
		r := checkRegistry(t, set)
		for _, tl := range set {
			want := aliasModel(tl, claimedIn(tl, set))
			if got := r.Alias(tl.Identity); got != want {
				t.Fatalf("trial %d: alias of %v (namespace %q) = %q, want %q", trial, tl.Identity, tl.Namespace, got, want)
			}
			if strings.HasSuffix(want, identityHash(tl.Identity)) {
				hashed++
			} else {
				preferred++
			}
		}
		// Any subset: the providers that answered this time.
		var sub []*catalog.Tool
		for _, tl := range set {
			if rng.IntN(2) == 0 {
				sub = append(sub, tl)
			}
		}
		rs := checkRegistry(t, sub)
		for _, tl := range sub {
			if claimedIn(tl, sub) == claimedIn(tl, set) && rs.Alias(tl.Identity) != r.Alias(tl.Identity) {
				t.Fatalf("trial %d: alias of %v changed with the set: %q -> %q", trial, tl.Identity, r.Alias(tl.Identity), rs.Alias(tl.Identity))
			}
		}
	}
	if hashed < 100 || preferred < 100 {
		t.Fatalf("generator too tame: %d hashed, %d preferred aliases", hashed, preferred)
	}
}

// Issue #10: a tool whose preferred alias is exactly another tool's
// fallback alias. It used to fail Build — and with it every turn's
// resolution — with "both map to alias".
func TestAliasFallbackCannotTakeAPreferredAlias(t *testing.T) {
	long := strings.Repeat("n", 70)
	victim := tool(long, long, "search") // preferred and provider aliases too long: hashed
	for _, fallback := range []string{
		hashedModel(victim.Identity),
		// The fallback the old rule gave it: provider_name cut to 55, "_", 8 hex digits.
		func() string {
			sum := sha256.Sum256([]byte(long + "\x00search"))
			return (long + "_search")[:55] + "_" + hex.EncodeToString(sum[:4])
		}(),
	} {
		i := strings.LastIndexByte(fallback[:len(fallback)-1], '_')
		squatter := tool("other", fallback[:i], fallback[i+1:])
		static := tool("static", "static", "echo")
		set := []*catalog.Tool{victim, squatter, static}
		r := checkRegistry(t, set)
		if r.Alias(static.Identity) != "static_echo" {
			t.Errorf("unrelated tool's alias is %q", r.Alias(static.Identity))
		}
		if r.Alias(victim.Identity) != hashedModel(victim.Identity) {
			t.Errorf("victim's alias is %q, want %q", r.Alias(victim.Identity), hashedModel(victim.Identity))
		}
	}
}

func TestAliasSanitizingAndTruncation(t *testing.T) {
	cases := []struct {
		tool *catalog.Tool
		want string
	}{
		{tool("p", "cal.v2", "find@now"), "cal_v2_find_now"},
		{tool("p", "é", "x"), "___x"}, // two bytes, two underscores
		{tool("p", "a-B_9", "Z"), "a-B_9_Z"},
		{tool("p", "n", strings.Repeat("x", 62)), "n_" + strings.Repeat("x", 62)}, // exactly 64
		{tool("p", "n", strings.Repeat("x", 63)), "p_" + strings.Repeat("x", 40) + "__" + identityHash(catalog.Identity{Provider: "p", Name: strings.Repeat("x", 63)})},
		{tool("p", "n", "x__0123456789abcdef0123"), "p_x__0123456789abcdef0123__" + identityHash(catalog.Identity{Provider: "p", Name: "x__0123456789abcdef0123"})},
		{tool("p", "n", "x__0123456789abcdef0123_7"), "p_x__0123456789abcdef0123_7__" + identityHash(catalog.Identity{Provider: "p", Name: "x__0123456789abcdef0123_7"})},
		// Not the reserved shape: 19 digits, upper case, "_" with no digits after, a single "_" before.
		{tool("p", "n", "x__0123456789abcdef012"), "n_x__0123456789abcdef012"},
		{tool("p", "n", "x__0123456789ABCDEF0123"), "n_x__0123456789ABCDEF0123"},
		{tool("p", "n", "x__0123456789abcdef0123_"), "n_x__0123456789abcdef0123_"},
		{tool("p", "n", "x_0123456789abcdef0123"), "n_x_0123456789abcdef0123"},
		{tool("p", "n", "x__0123456789abcdef0123_7a"), "n_x__0123456789abcdef0123_7a"},
	}
	for _, c := range cases {
		r := checkRegistry(t, []*catalog.Tool{c.tool})
		if got := r.Alias(c.tool.Identity); got != c.want {
			t.Errorf("%v in %q: alias %q, want %q", c.tool.Identity, c.tool.Namespace, got, c.want)
		}
	}
}

func TestNamespaceDefaultsToProvider(t *testing.T) {
	d := searchDef()
	d.Namespace = ""
	tl := mustTool(t, "notes", d)
	if tl.Namespace != "notes" {
		t.Fatalf("namespace = %q, want the provider id", tl.Namespace)
	}
	if a := mustRegistry(t, tl).Alias(tl.Identity); a != "notes_search" {
		t.Fatalf("alias = %q", a)
	}
	if tl.Definition().Namespace != "notes" {
		t.Fatal("Definition lost the namespace")
	}
}

func BenchmarkBuild(b *testing.B) {
	var tools []*catalog.Tool
	for i := range 200 {
		tools = append(tools, tool(fmt.Sprintf("p%d", i%7), "ns", fmt.Sprintf("t%d", i)))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := catalog.Build(tools); err != nil {
			b.Fatal(err)
		}
	}
}
