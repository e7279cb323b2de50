package catalog

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
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
// ^[a-zA-Z0-9_-]{1,64}$, and MCP tool names (which also allow '.') too.
const MaxAliasLen = 64

// aliasHashLen is how many hex digits of the identity's SHA-256 a hashed
// alias carries: 80 bits, so two identities share them only by a
// deliberate collision search of about 2^40 hashes among an attacker's own
// names, and a given tool's only by a second preimage (2^80).
const aliasHashLen = 20

// Build assembles a Registry from normalized tools. The only refusal is
// the same identity twice (ErrDuplicateIdentity): a caller's bug, since a
// provider's duplicate names are dropped before Build and provider ids are
// unique. Alias assignment never fails; see the package documentation for
// the rule.
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
			return nil, fmt.Errorf("%w: %s listed twice", ErrDuplicateIdentity, t.Identity)
		}
		r.byIdentity[t.Identity] = i
	}
	r.aliases = assignAliases(sorted)
	for i, a := range r.aliases {
		r.byAlias[a] = i
	}
	r.hash = catalogHash(sorted, r.aliases)
	return r, nil
}

// assignAliases gives each tool (in identity order, identities distinct)
// its alias. The three forms cannot produce each other's strings:
//
//	preferred  sanitize(namespace "_" name), never ending in "__" + 20 hex
//	           digits, optionally followed by "_" + digits
//	hashed     sanitize(provider "_" name)[:42] "__" hash
//	collided   sanitize(provider "_" name)[:n] "__" hash "_" index
//
// A preferred alias is used when it is at most MaxAliasLen, not of the
// reserved hashed shape, and no other tool's preferred alias is the same
// string; so preferred aliases are distinct, and distinct from the other
// two forms. hash is the identity's; a hashed alias ends in 20 hex digits
// after "__", a collided one in "_" and fewer than 20 digits, so they
// differ; hashed aliases with different hashes differ; collided aliases
// are read back from the right as (hash, index), and the index is the
// tool's rank among the hashed tools that share its hash.
func assignAliases(tools []*Tool) []string {
	aliases := make([]string, len(tools))
	preferred := make([]string, len(tools))
	claims := make(map[string]int, len(tools))
	for i, t := range tools {
		if p := sanitize(t.Namespace + "_" + t.Identity.Name); len(p) <= MaxAliasLen && !reservedAlias(p) {
			preferred[i] = p
			claims[p]++
		}
	}
	hashes := make([]string, len(tools))
	shared := map[string]int{}
	for i, t := range tools {
		if preferred[i] != "" && claims[preferred[i]] == 1 {
			aliases[i] = preferred[i]
			continue
		}
		hashes[i] = identityHash(t.Identity)
		shared[hashes[i]]++
	}
	rank := map[string]int{}
	for i, t := range tools {
		h := hashes[i]
		if h == "" {
			continue
		}
		base := sanitize(t.Identity.Provider + "_" + t.Identity.Name)
		suffix := "__" + h
		if shared[h] > 1 {
			rank[h]++
			suffix += "_" + strconv.Itoa(rank[h])
		}
		aliases[i] = base[:min(len(base), MaxAliasLen-len(suffix))] + suffix
	}
	return aliases
}

// identityHash is the first 80 bits, in hex, of SHA-256 over the identity
// (provider length-prefixed, so the pair is read back unambiguously). A
// variable so tests can force collisions.
var identityHash = func(id Identity) string {
	h := sha256.New()
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(id.Provider))))
	h.Write([]byte(id.Provider))
	h.Write([]byte(id.Name))
	return hex.EncodeToString(h.Sum(nil))[:aliasHashLen]
}

// reservedAlias reports whether a has the shape of a hashed or collided
// alias: "__", 20 lowercase hex digits, then optionally "_" and digits, at
// the end.
func reservedAlias(a string) bool {
	if i := strings.LastIndexByte(a, '_'); i >= 0 && i+1 < len(a) && strings.Trim(a[i+1:], "0123456789") == "" && hashTail(a[:i]) {
		return true
	}
	return hashTail(a)
}

func hashTail(a string) bool {
	n := len(a) - aliasHashLen
	return n >= 2 && a[n-2:n] == "__" && strings.Trim(a[n:], "0123456789abcdef") == ""
}

// sanitize maps every byte outside [A-Za-z0-9_-] to '_' (so a multi-byte
// character becomes several).
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
