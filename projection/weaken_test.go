package projection_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/sharedos/sharedos/projection"
)

// subsetProfiles are the profiles that translate schemas; the others emit
// the held schema byte for byte (TestPassThroughIsVerbatim).
var subsetProfiles = []projection.Profile{projection.OpenAIStrict, projection.AnthropicStrict, projection.Gemini}

func compile(t testing.TB, doc any) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// Formats are asserted: the projection must not widen what a
	// validator that checks them accepts.
	c.AssertFormat()
	if err := c.AddResource("mem:///s.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("mem:///s.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func decodeNumber(t testing.TB, raw []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// parametersOf digs the input schema out of a profile's tool JSON and
// reads it as JSON Schema 2020-12: Gemini's OpenAPI form is mapped back
// (upper-case types to lower case, nullable to a type with "null", the
// marker format "enum" dropped), which is how its meaning is defined.
func parametersOf(t testing.TB, p projection.Profile, raw []byte) any {
	t.Helper()
	v := decodeNumber(t, raw).(map[string]any)
	switch p {
	case projection.OpenAI, projection.OpenAIStrict:
		return v["function"].(map[string]any)["parameters"]
	case projection.Anthropic, projection.AnthropicStrict:
		return v["input_schema"]
	case projection.GeminiJSONSchema:
		return v["parametersJsonSchema"]
	case projection.MCP:
		return v["inputSchema"]
	}
	return fromOpenAPI(v["parameters"])
}

func fromOpenAPI(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			switch k {
			case "properties":
				m := map[string]any{}
				for name, s := range e.(map[string]any) {
					m[name] = fromOpenAPI(s)
				}
				out[k] = m
			case "items":
				out[k] = fromOpenAPI(e)
			case "anyOf":
				var l []any
				for _, s := range e.([]any) {
					l = append(l, fromOpenAPI(s))
				}
				out[k] = l
			case "type":
				out[k] = strings.ToLower(e.(string))
			case "nullable", "format":
			default:
				out[k] = e
			}
		}
		if f, ok := x["format"]; ok && f != "enum" {
			out["format"] = f
		}
		if x["nullable"] == true {
			out["type"] = []any{out["type"], "null"}
		}
		return out
	}
	return v
}

// gen makes an instance guided by schema s: mostly what s describes, with
// boundary values and, now and then, something else entirely — so both
// sides of every constraint are tried.
type gen struct{ rng *rand.Rand }

var sampleStrings = []string{"", "a", "ab", "abc", "core", "bug", "up", "owner/repo", "x-1", "2024-01-02T03:04:05Z", "2024-01-02",
	"ada@example.com", "https://example.com/a", "0f8fad5b-d9cb-469f-a165-70867728950e", "127.0.0.1", strings.Repeat("z", 70), "größe", "検索"}

var formatSamples = map[string]string{"date-time": "2024-01-02T03:04:05Z", "date": "2024-01-02", "email": "ada@example.com",
	"uri": "https://example.com/a", "uuid": "0f8fad5b-d9cb-469f-a165-70867728950e", "ipv4": "127.0.0.1"}

var sampleNumbers = []string{"0", "1", "-1", "0.5", "0.25", "2", "10", "10.5", "-10", "-11", "50", "51", "3", "1e3"}

func (g gen) any(depth int) any {
	switch g.rng.IntN(7) {
	case 0:
		return nil
	case 1:
		return g.rng.IntN(2) == 0
	case 2:
		return json.Number(sampleNumbers[g.rng.IntN(len(sampleNumbers))])
	case 3:
		return sampleStrings[g.rng.IntN(len(sampleStrings))]
	case 4:
		if depth > 2 {
			return nil
		}
		return []any{g.any(depth + 1)}
	case 5:
		if depth > 2 {
			return "x"
		}
		return map[string]any{"k": g.any(depth + 1)}
	}
	return json.Number("7")
}

func (g gen) instance(s any, depth int) any {
	m, ok := s.(map[string]any)
	if !ok || depth > 12 || g.rng.IntN(20) == 0 {
		return g.any(depth)
	}
	if e, ok := m["enum"].([]any); ok && g.rng.IntN(8) != 0 {
		return e[g.rng.IntN(len(e))]
	}
	if c, ok := m["const"]; ok && g.rng.IntN(8) != 0 {
		return c
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		if l, ok := m[kw].([]any); ok {
			return g.instance(l[g.rng.IntN(len(l))], depth+1)
		}
	}
	if l, ok := m["allOf"].([]any); ok && len(l) > 0 {
		return g.instance(l[g.rng.IntN(len(l))], depth+1)
	}
	types := []string{}
	switch ty := m["type"].(type) {
	case string:
		types = append(types, ty)
	case []any:
		for _, e := range ty {
			types = append(types, e.(string))
		}
	}
	if len(types) == 0 {
		if m["properties"] != nil {
			types = []string{"object"}
		} else {
			return g.any(depth)
		}
	}
	switch types[g.rng.IntN(len(types))] {
	case "null":
		return nil
	case "boolean":
		return g.rng.IntN(2) == 0
	case "integer":
		return json.Number([]string{"0", "1", "-1", "2", "3", "10", "50", "51", "-10", "100"}[g.rng.IntN(10)])
	case "number":
		return json.Number(sampleNumbers[g.rng.IntN(len(sampleNumbers))])
	case "string":
		if f, ok := formatSamples[fmt.Sprint(m["format"])]; ok && g.rng.IntN(4) != 0 {
			return f
		}
		if m["pattern"] != nil && g.rng.IntN(2) == 0 {
			return "owner/repo"
		}
		return sampleStrings[g.rng.IntN(len(sampleStrings))]
	case "array":
		n := g.rng.IntN(7)
		out := make([]any, n)
		for i := range out {
			out[i] = g.instance(m["items"], depth+1)
		}
		if n > 1 && g.rng.IntN(4) == 0 {
			out[1] = out[0]
		}
		return out
	case "object":
		out := map[string]any{}
		req := map[string]bool{}
		for _, r := range asAnyList(m["required"]) {
			req[r.(string)] = true
		}
		props, _ := m["properties"].(map[string]any)
		for _, name := range sortedNames(props) {
			if req[name] || g.rng.IntN(3) != 0 {
				out[name] = g.instance(props[name], depth+1)
			}
		}
		if g.rng.IntN(6) == 0 {
			out["x-extra"] = g.any(depth + 1)
		}
		return out
	}
	return g.any(depth)
}

func asAnyList(v any) []any { l, _ := v.([]any); return l }

func sortedNames(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// widening generates n instances guided by the projected schema and
// returns how many it accepts and the first of those the original
// refuses (nil when none).
func widening(t testing.TB, projectedDoc, originalDoc any, seed uint64, n int) (int, any) {
	t.Helper()
	projected, original := compile(t, projectedDoc), compile(t, originalDoc)
	g := gen{rand.New(rand.NewPCG(1, seed))}
	accepted := 0
	for range n {
		inst := g.instance(projectedDoc, 0)
		if projected.Validate(inst) != nil {
			continue
		}
		accepted++
		if original.Validate(inst) != nil {
			return accepted, inst
		}
	}
	return accepted, nil
}

// TestNeverWeakens: for every subset profile and every emitted fixture
// tool, every generated instance the projected schema accepts is
// accepted by the held schema — the projection may only narrow. The run
// must also find accepted instances, or it proves nothing.
func TestNeverWeakens(t *testing.T) {
	listed := fixture(t)
	byIdentity := map[string][]byte{}
	for _, l := range listed {
		byIdentity[l.Tool.Identity.String()] = l.Tool.InputSchema
	}
	for _, p := range subsetProfiles {
		proj, err := projection.Project(listed, p, projection.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(proj.Tools) < 2 {
			t.Fatalf("%s: %d tools emitted; the check would be close to vacuous", p, len(proj.Tools))
		}
		for _, tool := range proj.Tools {
			t.Run(fmt.Sprintf("%s/%s", p, tool.Alias), func(t *testing.T) {
				const n = 3000
				accepted, counter := widening(t, parametersOf(t, p, tool.JSON), decodeNumber(t, byIdentity[tool.Identity.String()]), uint64(len(tool.Alias)), n)
				if counter != nil {
					b, _ := json.Marshal(counter)
					t.Fatalf("projected schema accepts %s, the held schema refuses it", b)
				}
				if accepted < n/100 {
					t.Fatalf("only %d of %d generated instances accepted by the projection", accepted, n)
				}
			})
		}
	}
}

// TestWideningIsDetected: the check above finds a counterexample when a
// projection does drop a constraint (here each of several in turn), so
// its passing means something.
func TestWideningIsDetected(t *testing.T) {
	original := `{"type":"object","properties":{"x":{"type":"integer","minimum":1,"maximum":50},"s":{"type":"string","minLength":1,"format":"email"},"e":{"enum":["a","b"]},"l":{"type":"array","items":{"type":"string"},"maxItems":2,"uniqueItems":true}},"required":["x","s","e","l"],"additionalProperties":false}`
	weakened := []string{
		`{"type":"object","properties":{"x":{"type":"integer"},"s":{"type":"string","minLength":1,"format":"email"},"e":{"enum":["a","b"]},"l":{"type":"array","items":{"type":"string"},"maxItems":2,"uniqueItems":true}},"required":["x","s","e","l"],"additionalProperties":false}`,
		`{"type":"object","properties":{"x":{"type":"integer","minimum":1,"maximum":50},"s":{"type":"string","minLength":1},"e":{"enum":["a","b"]},"l":{"type":"array","items":{"type":"string"},"maxItems":2,"uniqueItems":true}},"required":["x","s","e","l"],"additionalProperties":false}`,
		`{"type":"object","properties":{"x":{"type":"integer","minimum":1,"maximum":50},"s":{"type":"string","minLength":1,"format":"email"},"e":{"type":"string"},"l":{"type":"array","items":{"type":"string"},"maxItems":2,"uniqueItems":true}},"required":["x","s","e","l"],"additionalProperties":false}`,
		`{"type":"object","properties":{"x":{"type":"integer","minimum":1,"maximum":50},"s":{"type":"string","minLength":1,"format":"email"},"e":{"enum":["a","b"]},"l":{"type":"array","items":{"type":"string"},"maxItems":2}},"required":["x","s","e","l"],"additionalProperties":false}`,
		`{"type":"object","properties":{"x":{"type":"integer","minimum":1,"maximum":50},"s":{"type":"string","minLength":1,"format":"email"},"e":{"enum":["a","b"]},"l":{"type":"array","items":{"type":"string"},"maxItems":2,"uniqueItems":true}},"required":["x","s","e","l"]}`,
		`{"type":"object","properties":{"x":{"type":"integer","minimum":1,"maximum":50},"s":{"type":"string","minLength":1,"format":"email"},"e":{"enum":["a","b"]},"l":{"type":"array","items":{"type":"string"},"maxItems":2,"uniqueItems":true}},"required":["x","s","e"],"additionalProperties":false}`,
	}
	for i, w := range weakened {
		_, counter := widening(t, decodeNumber(t, []byte(w)), decodeNumber(t, []byte(original)), uint64(i), 3000)
		if counter == nil {
			t.Errorf("weakened schema %d: no counterexample found", i)
		}
	}
}
