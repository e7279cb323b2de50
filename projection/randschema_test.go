package projection_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sharedos/sharedos/projection"
)

// schemaGen draws random schemas from the keywords the profiles differ
// on, with shared $defs, so the never-weaken check runs on shapes no one
// wrote by hand.
type schemaGen struct {
	rng  *rand.Rand
	defs map[string]any
}

func (g *schemaGen) pick(n int) int { return g.rng.IntN(n) }

func (g *schemaGen) schema(depth int) map[string]any {
	if depth > 3 {
		return g.scalar()
	}
	switch g.pick(9) {
	case 0, 1, 2:
		return g.object(depth)
	case 3:
		s := map[string]any{"type": "array", "items": g.schema(depth + 1)}
		if g.pick(2) == 0 {
			s["minItems"] = g.pick(3)
		}
		if g.pick(2) == 0 {
			s["maxItems"] = 1 + g.pick(4)
		}
		return s
	case 4:
		return map[string]any{"anyOf": []any{g.schema(depth + 1), g.schema(depth + 1)}}
	case 5:
		name := fmt.Sprintf("d%d", g.pick(3))
		if _, ok := g.defs[name]; !ok {
			g.defs[name] = g.scalar()
		}
		s := map[string]any{"$ref": "#/$defs/" + name}
		if g.pick(3) == 0 {
			s["description"] = "a reference"
		}
		return s
	case 6:
		return map[string]any{"allOf": []any{g.scalar(), g.scalar()}}
	}
	return g.scalar()
}

func (g *schemaGen) object(depth int) map[string]any {
	props := map[string]any{}
	var req []any
	for i := range 1 + g.pick(3) {
		name := []string{"a", "b", "c", "größe"}[i]
		props[name] = g.schema(depth + 1)
		if g.pick(3) != 0 {
			req = append(req, name)
		}
	}
	s := map[string]any{"type": "object", "properties": props, "required": req}
	if req == nil {
		s["required"] = []any{}
	}
	switch g.pick(4) {
	case 0:
		s["additionalProperties"] = false
	case 1:
		s["additionalProperties"] = g.scalar()
	}
	return s
}

func (g *schemaGen) scalar() map[string]any {
	switch g.pick(10) {
	case 0:
		return map[string]any{"type": "string", "minLength": 1 + g.pick(3)}
	case 1:
		return map[string]any{"type": "string", "format": []string{"email", "date-time", "uuid", "uri", "date"}[g.pick(5)]}
	case 2:
		return map[string]any{"type": "string", "pattern": []string{"^a", "b$", "^[a-z]+$"}[g.pick(3)]}
	case 3:
		return map[string]any{"type": "integer", "minimum": g.pick(3), "maximum": 3 + g.pick(40)}
	case 4:
		return map[string]any{"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.5}
	case 5:
		return map[string]any{"enum": []any{"up", "down", 3, nil}[:1+g.pick(4)]}
	case 6:
		return map[string]any{"const": []any{"core", 1, true}[g.pick(3)]}
	case 7:
		return map[string]any{"type": []any{"string", "null"}}
	case 8:
		return map[string]any{"type": "boolean"}
	}
	return map[string]any{"type": "string"}
}

// TestNeverWeakensRandomSchemas: random schemas, every subset profile:
// each emitted tool accepts no generated instance its held schema refuses.
func TestNeverWeakensRandomSchemas(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 42))
	emitted, accepts := map[projection.Profile]int{}, map[projection.Profile]int{}
	for i := range 1500 {
		g := &schemaGen{rng: rng, defs: map[string]any{}}
		root := g.object(0)
		if len(g.defs) > 0 {
			root["$defs"] = g.defs
		}
		raw, _ := json.Marshal(root)
		original := decodeNumber(t, raw)
		for _, p := range subsetProfiles {
			proj, err := projection.Project(one(string(raw)), p, projection.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(proj.Tools) == 0 {
				continue
			}
			emitted[p]++
			accepted, counter := widening(t, parametersOf(t, p, proj.Tools[0].JSON), original, uint64(i), 300)
			if counter != nil {
				b, _ := json.Marshal(counter)
				t.Fatalf("%s: schema %s\nprojected %s\naccepts %s, which the held schema refuses", p, raw, proj.Tools[0].JSON, b)
			}
			accepts[p] += accepted
		}
	}
	for _, p := range subsetProfiles {
		t.Logf("%s: %d of 1500 random schemas emitted, %d generated instances accepted by their projections", p, emitted[p], accepts[p])
		if emitted[p] < 40 || accepts[p] < 100*emitted[p]/10 {
			t.Errorf("%s: %d schemas emitted, %d instances accepted; the check is close to vacuous", p, emitted[p], accepts[p])
		}
	}
}
