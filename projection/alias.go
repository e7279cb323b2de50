package projection

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"

	"github.com/sharedos/sharedos/catalog"
)

// aliasHashLen is how many hex digits of the identity's SHA-256 a hashed
// alias carries (80 bits), as catalog's hashed aliases do.
const aliasHashLen = 20

// assignAliases gives each listed tool its model-facing name under rules,
// indexed as tools.
//
// A tool's candidate is its turn alias (catalog.Registry.Alias) with every
// byte the profile does not allow, at its position, replaced by '_'. It
// takes its candidate when that fits the length limit and no other listed
// tool has the same candidate. Otherwise it takes the hashed form: the
// same mapping of provider "_" name, cut so that "__" and the first 20 hex
// digits of SHA-256 over the identity fit. Where the turn's alias already
// follows the profile's rules (openai, anthropic, mcp: the catalogue's
// ^[A-Za-z0-9_-]{1,64}$ is within them) the candidate is that alias and,
// aliases being unique in the registry, the projection shows the turn's
// own names. Last, in identity order, any name already taken (the same
// identity listed twice, or two identities sharing 80 hash bits) takes
// "_" and the lowest number from 2 that makes it unique, base cut to fit:
// names are unique whatever the input, and a function of it alone.
func assignAliases(tools []Listed, r nameRules) []string {
	out := make([]string, len(tools))
	cand := make([]string, len(tools))
	claims := make(map[string]int, len(tools))
	for i, l := range tools {
		base := l.Alias
		if base == "" {
			base = l.Tool.Namespace + "_" + l.Tool.Identity.Name
		}
		if c := fit(base, r); len(c) <= r.max {
			cand[i] = c
			claims[c]++
		}
	}
	for i, l := range tools {
		if cand[i] != "" && claims[cand[i]] == 1 {
			out[i] = cand[i]
			continue
		}
		suffix := "__" + identityHash(l.Tool.Identity)
		base := fit(l.Tool.Identity.Provider+"_"+l.Tool.Identity.Name, r)
		out[i] = base[:min(len(base), r.max-len(suffix))] + suffix
	}
	order := make([]int, len(tools))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		x, y := tools[a].Tool.Identity, tools[b].Tool.Identity
		return cmp.Or(strings.Compare(x.Provider, y.Provider), strings.Compare(x.Name, y.Name))
	})
	taken := make(map[string]bool, len(tools))
	for _, i := range order {
		name := out[i]
		for k := 2; taken[name]; k++ {
			suffix := "_" + strconv.Itoa(k)
			name = out[i][:min(len(out[i]), r.max-len(suffix))] + suffix
		}
		taken[name] = true
		out[i] = name
	}
	return out
}

// fit replaces every byte r does not allow at its position with '_'
// (allowed first and after in every profile); an empty name becomes "_".
func fit(s string, r nameRules) string {
	if s == "" {
		return "_"
	}
	b := []byte(s)
	for i, c := range b {
		if !r.allow(c, i == 0) {
			b[i] = '_'
		}
	}
	return string(b)
}

// identityHash is the first 80 bits, in hex, of SHA-256 over the identity
// with the provider length-prefixed (catalog's hashed aliases use the same).
func identityHash(id catalog.Identity) string {
	h := sha256.New()
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(id.Provider))))
	h.Write([]byte(id.Provider))
	h.Write([]byte(id.Name))
	return hex.EncodeToString(h.Sum(nil))[:aliasHashLen]
}
