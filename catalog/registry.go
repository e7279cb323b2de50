package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Registry is a turn's held catalogue: immutable after Build and safe for
// concurrent reads. Tools are ordered by identity.
type Registry struct {
	tools      []*Tool
	byAlias    map[string]int
	byIdentity map[Identity]int
	aliases    []string // aliases[i] is tools[i]'s alias
	hash       string
}

// MaxAliasLen is the longest model-facing alias; most model APIs accept
// ^[a-zA-Z0-9_-]{1,64}$.
const MaxAliasLen = 64

// Build assembles a Registry from normalized tools. Duplicated identities
// are an error: a provider must not list a name twice.
//
// Aliases are assigned deterministically from the set, independent of
// order: a tool's alias is "<namespace>_<name>" made provider-safe; tools
// whose preferred aliases collide all take "<provider>_<name>" instead, and
// any that still collide (or are too long) get a suffix of their identity's
// hash. The reverse mapping is always exact.
func Build(tools []*Tool) (*Registry, error) {
	sorted := slices.Clone(tools)
	slices.SortFunc(sorted, func(a, b *Tool) int {
		if c := strings.Compare(a.Identity.Provider, b.Identity.Provider); c != 0 {
			return c
		}
		return strings.Compare(a.Identity.Name, b.Identity.Name)
	})
	r := &Registry{
		tools:      sorted,
		byIdentity: make(map[Identity]int, len(sorted)),
		byAlias:    make(map[string]int, len(sorted)),
	}
	for i, t := range sorted {
		if _, dup := r.byIdentity[t.Identity]; dup {
			return nil, fmt.Errorf("%w: %s listed twice", ErrInvalidDefinition, t.Identity)
		}
		r.byIdentity[t.Identity] = i
	}
	r.aliases = assignAliases(sorted)
	for i, a := range r.aliases {
		if j, taken := r.byAlias[a]; taken {
			return nil, fmt.Errorf("%w: %s and %s both map to alias %q", ErrInvalidDefinition, sorted[j].Identity, sorted[i].Identity, a)
		}
		r.byAlias[a] = i
	}
	r.hash = catalogHash(sorted, r.aliases)
	return r, nil
}

func assignAliases(tools []*Tool) []string {
	aliases := make([]string, len(tools))
	count := func(f func(int) string) map[string]int {
		m := map[string]int{}
		for i := range tools {
			m[f(i)]++
		}
		return m
	}
	preferred := func(i int) string { return sanitize(tools[i].Namespace + "_" + tools[i].Identity.Name) }
	byProvider := func(i int) string { return sanitize(tools[i].Identity.Provider + "_" + tools[i].Identity.Name) }
	pc, bc := count(preferred), count(byProvider)
	for i := range tools {
		switch a := preferred(i); {
		case pc[a] == 1 && len(a) <= MaxAliasLen:
			aliases[i] = a
		case bc[byProvider(i)] == 1 && len(byProvider(i)) <= MaxAliasLen && pc[byProvider(i)] == 0:
			aliases[i] = byProvider(i)
		default:
			sum := sha256.Sum256([]byte(tools[i].Identity.Provider + "\x00" + tools[i].Identity.Name))
			suffix := "_" + hex.EncodeToString(sum[:4])
			base := byProvider(i)
			if len(base)+len(suffix) > MaxAliasLen {
				base = base[:MaxAliasLen-len(suffix)]
			}
			aliases[i] = base + suffix
		}
	}
	return aliases
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

// catalogHash is SHA-256 over the canonical JSON
//
//	{"tools":[{"alias":A,"revision":R},...],"v":1}
//
// with tools in identity order. Each revision already covers its tool's
// whole canonical contract (identity included), so this is a hash of the
// whole registry and of the names the model is shown.
func catalogHash(tools []*Tool, aliases []string) string {
	type entry struct {
		Alias    string `json:"alias"`
		Revision string `json:"revision"`
	}
	doc := struct {
		Tools []entry `json:"tools"`
		V     int     `json:"v"`
	}{Tools: make([]entry, len(tools)), V: 1}
	for i, t := range tools {
		doc.Tools[i] = entry{Alias: aliases[i], Revision: t.Revision}
	}
	// Struct fields are in code-point order and all strings are plain
	// ASCII (aliases are sanitized, revisions hex), so encoding/json's
	// output is already the RFC 8785 form.
	b, _ := json.Marshal(doc)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Hash is the registry's catalogHash.
func (r *Registry) Hash() string { return r.hash }

// Len is the number of tools.
func (r *Registry) Len() int { return len(r.tools) }

// At returns the i-th tool (identity order) and its alias.
func (r *Registry) At(i int) (*Tool, string) { return r.tools[i], r.aliases[i] }

// Lookup finds a tool by its model-facing alias.
func (r *Registry) Lookup(alias string) (*Tool, bool) {
	i, ok := r.byAlias[alias]
	if !ok {
		return nil, false
	}
	return r.tools[i], true
}

// Alias returns the alias of the tool with identity id.
func (r *Registry) Alias(id Identity) string {
	if i, ok := r.byIdentity[id]; ok {
		return r.aliases[i]
	}
	return ""
}
