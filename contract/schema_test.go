package contract_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/sharedos/sharedos/contract"
)

// The generators build schemas from a small vocabulary (every keyword
// CompareSchemas understands) and instances from a small value pool, so
// that random instances hit the schemas' edges often. Each property runs
// a fixed number of seeded cases: bounded, fast and reproducible.

const cases = 200

var names = []string{"a", "b", "c", "d"}

type gen struct{ r *rand.Rand }

func newGen(seed uint64) *gen { return &gen{rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))} }

func (g *gen) chance(n int) bool { return g.r.IntN(n) == 0 }

// schema is a random subschema (a JSON object as map[string]any).
func (g *gen) schema(depth int) map[string]any {
	s := map[string]any{}
	kinds := []string{"string", "integer", "number", "boolean", "array", "object"}
	if depth <= 0 {
		kinds = kinds[:4]
	}
	k := kinds[g.r.IntN(len(kinds))]
	switch {
	case g.chance(6):
		s["type"] = []any{k, "null"}
	case g.chance(10): // no type
	default:
		s["type"] = k
	}
	if g.chance(5) {
		s["description"] = fmt.Sprintf("field %d", g.r.IntN(3))
	}
	switch k {
	case "string":
		if g.chance(3) {
			s["minLength"] = g.r.IntN(3)
		}
		if g.chance(3) {
			s["maxLength"] = 1 + g.r.IntN(4)
		}
		if g.chance(4) {
			s["enum"] = g.pick([]any{"x", "y", "xy", "zzzzz"})
		}
		if g.chance(6) {
			s["pattern"] = "^x"
		}
	case "integer", "number":
		for _, kw := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
			if g.chance(4) {
				s[kw] = g.r.IntN(7) - 3
			}
		}
		if g.chance(6) {
			s["multipleOf"] = []any{1, 2, 4}[g.r.IntN(3)]
		}
		if g.chance(5) {
			s["enum"] = g.pick([]any{-2, 0, 1, 2, 3})
		}
	case "array":
		if g.chance(2) {
			s["items"] = g.schema(depth - 1)
		}
		if g.chance(3) {
			s["minItems"] = g.r.IntN(2)
		}
		if g.chance(3) {
			s["maxItems"] = 1 + g.r.IntN(3)
		}
		if g.chance(4) {
			s["uniqueItems"] = true
		}
	case "object":
		g.object(s, depth)
	}
	return s
}

func (g *gen) object(s map[string]any, depth int) {
	props := map[string]any{}
	var req []any
	for _, n := range names {
		if g.chance(2) {
			props[n] = g.schema(depth - 1)
			if g.chance(2) {
				req = append(req, n)
			}
		}
	}
	s["properties"] = props
	if len(req) > 0 {
		s["required"] = req
	}
	switch g.r.IntN(4) {
	case 0:
		s["additionalProperties"] = false
	case 1:
		s["additionalProperties"] = g.schema(0)
	case 2:
		s["additionalProperties"] = true
	}
}

func (g *gen) pick(pool []any) []any {
	var out []any
	for _, v := range pool {
		if g.chance(2) {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		out = pool[:1]
	}
	return out
}

// root is a random input schema: an object.
func (g *gen) root() map[string]any {
	s := map[string]any{"type": "object"}
	g.object(s, 2)
	return s
}

// value is a random instance.
func (g *gen) value(depth int) any {
	n := 7
	if depth <= 0 {
		n = 5
	}
	switch g.r.IntN(n) {
	case 0:
		return nil
	case 1:
		return g.chance(2)
	case 2:
		return json.Number(fmt.Sprint(g.r.IntN(9) - 4))
	case 3:
		return json.Number([]string{"0.5", "-1.5", "2.25"}[g.r.IntN(3)])
	case 4:
		return []string{"", "x", "xy", "y", "zzzzz"}[g.r.IntN(5)]
	case 5:
		a := []any{}
		for range g.r.IntN(4) {
			a = append(a, g.value(depth-1))
		}
		return a
	}
	return g.instance(depth - 1)
}

func (g *gen) instance(depth int) map[string]any {
	o := map[string]any{}
	for _, n := range append(slices.Clone(names), "e") {
		if g.chance(2) {
			o[n] = g.value(depth)
		}
	}
	return o
}

func clone(v any) any {
	b, _ := json.Marshal(v)
	var out any
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	_ = d.Decode(&out)
	return out
}

// widen changes s (in place, somewhere) so that it accepts every value it
// accepted before, by one operation CompareSchemas understands; it
// reports false when it found nothing to widen.
func (g *gen) widen(s map[string]any, depth int) bool {
	var ops []func() bool
	if req, ok := s["required"].([]any); ok && len(req) > 0 {
		ops = append(ops, func() bool {
			i := g.r.IntN(len(req))
			s["required"] = slices.Delete(slices.Clone(req), i, i+1)
			return true
		})
	}
	if e, ok := s["enum"].([]any); ok {
		ops = append(ops, func() bool {
			s["enum"] = append(slices.Clone(e), "added-"+fmt.Sprint(len(e)))
			return true
		}, func() bool { delete(s, "enum"); return true })
	}
	for _, kw := range []string{"minimum", "exclusiveMinimum", "minLength", "minItems"} {
		if v, ok := s[kw]; ok {
			ops = append(ops, func() bool {
				if n := num(v) - 1; n >= 0 || kw == "minimum" || kw == "exclusiveMinimum" {
					s[kw] = n
				} else {
					delete(s, kw)
				}
				return true
			}, func() bool { delete(s, kw); return true })
		}
	}
	for _, kw := range []string{"maximum", "exclusiveMaximum", "maxLength", "maxItems"} {
		if v, ok := s[kw]; ok {
			ops = append(ops, func() bool { s[kw] = num(v) + 1; return true }, func() bool { delete(s, kw); return true })
		}
	}
	for _, kw := range []string{"pattern", "uniqueItems", "multipleOf", "type"} {
		if _, ok := s[kw]; ok {
			ops = append(ops, func() bool { delete(s, kw); return true })
		}
	}
	if t, ok := s["type"].(string); ok && t != "object" {
		ops = append(ops, func() bool { s["type"] = []any{t, "null"}; return true })
	}
	if t, ok := s["type"].(string); ok && t == "integer" {
		ops = append(ops, func() bool { s["type"] = "number"; return true })
	}
	if ap, ok := s["additionalProperties"]; ok && ap == false {
		props, _ := s["properties"].(map[string]any)
		ops = append(ops, func() bool { s["additionalProperties"] = true; return true })
		if props != nil && len(props) < len(names) {
			// An optional property where none was allowed.
			ops = append(ops, func() bool {
				for _, n := range names {
					if _, ok := props[n]; !ok {
						props[n] = g.schema(0)
						return true
					}
				}
				return false
			})
		}
	}
	if props, ok := s["properties"].(map[string]any); ok && depth < 3 {
		for _, n := range names {
			if sub, ok := props[n].(map[string]any); ok {
				ops = append(ops, func() bool { return g.widen(sub, depth+1) })
			}
		}
	}
	if items, ok := s["items"].(map[string]any); ok && depth < 3 {
		ops = append(ops, func() bool { return g.widen(items, depth+1) })
	}
	g.r.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
	for _, op := range ops {
		if op() {
			return true
		}
	}
	return false
}

func num(v any) int {
	switch n := v.(type) {
	case int:
		return n
	case json.Number:
		i, _ := n.Int64()
		return int(i)
	case float64:
		return int(n)
	}
	return 0
}

func raw(t *testing.T, s any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func compile(t *testing.T, s json.RawMessage) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(s)))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("s.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("s.json")
	if err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return sch
}

// counterexample finds an instance a accepts and b refuses, if the random
// instances hit one.
func counterexample(t *testing.T, g *gen, a, b json.RawMessage) any {
	t.Helper()
	sa, sb := compile(t, a), compile(t, b)
	for range 150 {
		v := clone(g.instance(2))
		if sa.Validate(v) == nil && sb.Validate(v) != nil {
			return v
		}
	}
	return nil
}

func TestIdenticalIsSame(t *testing.T) {
	g := newGen(1)
	for range cases {
		s := raw(t, g.root())
		if r, ds := contract.CompareSchemas(s, s); r != contract.Same || len(ds) != 0 {
			t.Fatalf("%s against itself: %s %v", s, r, ds)
		}
		// Key order and whitespace are not meaning.
		var v any
		_ = json.Unmarshal(s, &v)
		pretty, _ := json.MarshalIndent(v, "", "  ")
		if r, _ := contract.CompareSchemas(s, pretty); r != contract.Same {
			t.Fatalf("%s reformatted: %s", s, r)
		}
	}
}

// A schema is never classified narrowed against a strict superset of it:
// every widening operation is Wider, its reverse Narrower, and the random
// instances confirm the generator (nothing the first accepts is refused
// by the widened one).
func TestWideningIsWiderAndItsReverseNarrower(t *testing.T) {
	g := newGen(2)
	done, strictN := 0, 0
	for range cases {
		s := g.root()
		w := clone(s).(map[string]any)
		if !g.widen(w, 0) {
			continue
		}
		rs, rw := raw(t, s), raw(t, w)
		if string(rs) == string(rw) {
			continue
		}
		done++
		if v := counterexample(t, g, rs, rw); v != nil {
			t.Fatalf("generator bug: %s widened to %s refuses %v", rs, rw, v)
		}
		// A witness that the widened schema accepts more makes it a
		// strict superset: then only widened will do.
		strict := counterexample(t, g, rw, rs) != nil
		if strict {
			strictN++
		}
		r, ds := contract.CompareSchemas(rs, rw)
		if r != contract.Wider && (strict || r != contract.Same) {
			t.Fatalf("%s → %s (strict superset: %v): %s, want widened %v", rs, rw, strict, r, ds)
		}
		if inv, ds := contract.CompareSchemas(rw, rs); inv != r.Inverse() {
			t.Fatalf("%s → %s: %s, want %s %v", rw, rs, inv, r.Inverse(), ds)
		}
	}
	if done < cases/2 || strictN < done/4 {
		t.Fatalf("only %d of %d cases widened, %d strictly", done, cases, strictN)
	}
}

// Soundness on unrelated pairs: whatever CompareSchemas says of two
// random schemas is never contradicted by an instance, and swapping them
// gives the inverse.
func TestVerdictsAreSoundOnRandomPairs(t *testing.T) {
	g := newGen(3)
	seen := map[contract.Relation]int{}
	for i := range cases {
		a := g.root()
		b := clone(a).(map[string]any)
		// Related pairs: a few widenings of one, a few of the other.
		for range g.r.IntN(3) {
			g.widen(b, 0)
		}
		if i%2 == 0 {
			a, b = b, a
		}
		if i%5 == 0 {
			b = g.root()
		}
		ra, rb := raw(t, a), raw(t, b)
		r, _ := contract.CompareSchemas(ra, rb)
		seen[r]++
		if inv, _ := contract.CompareSchemas(rb, ra); inv != r.Inverse() {
			t.Fatalf("%s vs %s: %s, swapped %s", ra, rb, r, inv)
		}
		switch r {
		case contract.Same:
			if v := counterexample(t, g, ra, rb); v != nil {
				t.Fatalf("same, but %s accepts %v and %s refuses it", ra, v, rb)
			}
			if v := counterexample(t, g, rb, ra); v != nil {
				t.Fatalf("same, but %s accepts %v and %s refuses it", rb, v, ra)
			}
		case contract.Wider:
			if v := counterexample(t, g, ra, rb); v != nil {
				t.Fatalf("widened, but %s accepts %v and %s refuses it", ra, v, rb)
			}
		case contract.Narrower:
			if v := counterexample(t, g, rb, ra); v != nil {
				t.Fatalf("narrowed, but %s accepts %v and %s refuses it", rb, v, ra)
			}
		}
	}
	for _, r := range []contract.Relation{contract.Wider, contract.Narrower, contract.Changed} {
		if seen[r] == 0 {
			t.Errorf("no pair was %s: the generator does not reach it (%v)", r, seen)
		}
	}
}

func TestSchemaExamples(t *testing.T) {
	obj := func(props, extra string) string {
		return `{"type":"object","properties":{` + props + `}` + extra + `}`
	}
	for _, tc := range []struct {
		name, prev, cur string
		want            contract.Relation
	}{
		{"optional property added, closed object", obj(`"a":{"type":"string"}`, `,"additionalProperties":false`),
			obj(`"a":{"type":"string"},"b":{"type":"integer"}`, `,"additionalProperties":false`), contract.Wider},
		{"optional property added, open object constrains it", obj(`"a":{"type":"string"}`, ``),
			obj(`"a":{"type":"string"},"b":{"type":"integer"}`, ``), contract.Narrower},
		{"required property added", obj(`"a":{"type":"string"}`, ``),
			obj(`"a":{"type":"string"},"b":{"type":"integer"}`, `,"required":["b"]`), contract.Narrower},
		{"integer to number", obj(`"n":{"type":"integer"}`, ``), obj(`"n":{"type":"number"}`, ``), contract.Wider},
		{"amount to amount_cents (the article's example)",
			obj(`"amount":{"type":"number"}`, `,"required":["amount"],"additionalProperties":false`),
			obj(`"amount_cents":{"type":"integer"},"currency":{"type":"string"}`, `,"required":["amount_cents","currency"],"additionalProperties":false`),
			contract.Changed},
		{"description only", obj(`"a":{"type":"string","description":"x"}`, ``), obj(`"a":{"type":"string","description":"y"}`, ``), contract.Same},
		{"exclusive to inclusive minimum", obj(`"n":{"exclusiveMinimum":0}`, ``), obj(`"n":{"minimum":0}`, ``), contract.Wider},
		{"anyOf changed", obj(`"n":{"anyOf":[{"type":"string"}]}`, ``), obj(`"n":{"anyOf":[{"type":"string"},{"type":"null"}]}`, ``), contract.Changed},
		{"$ref into $defs that changed", `{"type":"object","$defs":{"x":{"type":"string"}},"properties":{"a":{"$ref":"#/$defs/x"}}}`,
			`{"type":"object","$defs":{"x":{"type":"integer"}},"properties":{"a":{"$ref":"#/$defs/x"}}}`, contract.Changed},
		{"$ref into equal $defs, property added", `{"type":"object","$defs":{"x":{"type":"string"}},"properties":{"a":{"$ref":"#/$defs/x"}},"additionalProperties":false}`,
			`{"type":"object","$defs":{"x":{"type":"string"}},"properties":{"a":{"$ref":"#/$defs/x"},"b":{}},"additionalProperties":false}`, contract.Wider},
		{"multipleOf 4 to 2", obj(`"n":{"multipleOf":4}`, ``), obj(`"n":{"multipleOf":2}`, ``), contract.Wider},
		{"enum value removed", obj(`"s":{"enum":["x","y"]}`, ``), obj(`"s":{"enum":["x"]}`, ``), contract.Narrower},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ds := contract.CompareSchemas(json.RawMessage(tc.prev), json.RawMessage(tc.cur))
			if r != tc.want {
				t.Fatalf("%s, want %s; details %v", r, tc.want, ds)
			}
			if r != contract.Same && len(ds) == 0 {
				t.Fatal("a change with no detail")
			}
		})
	}
}
