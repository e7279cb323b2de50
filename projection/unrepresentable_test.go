package projection_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/projection"
)

// one lists a single hand-built tool with the given input schema.
func one(schema string) []projection.Listed {
	return []projection.Listed{{Alias: "t_tool", Tool: &catalog.Tool{
		Identity: catalog.Identity{Provider: "t", Name: "tool"}, Namespace: "t",
		Description: "A tool.", InputSchema: json.RawMessage(schema), Annotations: json.RawMessage(`{}`),
	}}}
}

// TestUnrepresentableConstructs: each construct a subset profile cannot
// express is reported with its keyword, path and reason, and the tool is
// not emitted — never emitted without it.
func TestUnrepresentableConstructs(t *testing.T) {
	obj := func(props, required string) string {
		return `{"type":"object","properties":` + props + `,"required":` + required + `,"additionalProperties":false}`
	}
	cases := []struct {
		name     string
		profiles []projection.Profile
		schema   string
		want     projection.Reason
	}{
		{"oneOf", subsetProfiles, obj(`{"x":{"oneOf":[{"type":"string"},{"type":"integer"}]}}`, `["x"]`),
			projection.Reason{Keyword: "oneOf", Path: "/properties/x", Reason: projection.ReasonUnsupported}},
		{"not", subsetProfiles, obj(`{"x":{"type":"string","not":{"const":"a"}}}`, `["x"]`),
			projection.Reason{Keyword: "not", Path: "/properties/x", Reason: projection.ReasonUnsupported}},
		{"allOf", []projection.Profile{projection.OpenAIStrict, projection.Gemini}, obj(`{"x":{"allOf":[{"type":"string"}]}}`, `["x"]`),
			projection.Reason{Keyword: "allOf", Path: "/properties/x", Reason: projection.ReasonUnsupported}},
		{"if", subsetProfiles, obj(`{"x":{"type":"string","if":{"const":"a"},"then":{"minLength":2}}}`, `["x"]`),
			projection.Reason{Keyword: "if", Path: "/properties/x", Reason: projection.ReasonUnsupported}},
		{"patternProperties", subsetProfiles, obj(`{"x":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"patternProperties":{"^b":{"type":"string"}},"additionalProperties":false}}`, `["x"]`),
			projection.Reason{Keyword: "patternProperties", Path: "/properties/x", Reason: projection.ReasonUnsupported}},
		{"uniqueItems", subsetProfiles, obj(`{"x":{"type":"array","items":{"type":"string"},"uniqueItems":true}}`, `["x"]`),
			projection.Reason{Keyword: "uniqueItems", Path: "/properties/x", Reason: projection.ReasonUnsupported}},
		{"prefixItems", subsetProfiles, obj(`{"x":{"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"string"}}}`, `["x"]`),
			projection.Reason{Keyword: "prefixItems", Path: "/properties/x", Reason: projection.ReasonUnsupported}},
		{"minLength", []projection.Profile{projection.OpenAIStrict, projection.AnthropicStrict}, obj(`{"x":{"type":"string","minLength":1}}`, `["x"]`),
			projection.Reason{Keyword: "minLength", Path: "/properties/x", Reason: projection.ReasonUnsupported}},
		{"minimum", []projection.Profile{projection.AnthropicStrict}, obj(`{"x":{"type":"integer","minimum":1}}`, `["x"]`),
			projection.Reason{Keyword: "minimum", Path: "/properties/x", Reason: projection.ReasonUnsupported}},
		{"exclusiveMinimum", []projection.Profile{projection.AnthropicStrict, projection.Gemini}, obj(`{"x":{"type":"number","exclusiveMinimum":0}}`, `["x"]`),
			projection.Reason{Keyword: "exclusiveMinimum", Path: "/properties/x", Reason: projection.ReasonUnsupported}},
		{"multipleOf", []projection.Profile{projection.AnthropicStrict, projection.Gemini}, obj(`{"x":{"type":"number","multipleOf":2}}`, `["x"]`),
			projection.Reason{Keyword: "multipleOf", Path: "/properties/x", Reason: projection.ReasonUnsupported}},
		{"maxItems", []projection.Profile{projection.AnthropicStrict}, obj(`{"x":{"type":"array","items":{"type":"string"},"maxItems":3}}`, `["x"]`),
			projection.Reason{Keyword: "maxItems", Path: "/properties/x", Reason: projection.ReasonUnsupported}},
		{"minItems above 1", []projection.Profile{projection.AnthropicStrict}, obj(`{"x":{"type":"array","items":{"type":"string"},"minItems":2}}`, `["x"]`),
			projection.Reason{Keyword: "minItems", Path: "/properties/x", Reason: projection.ReasonValue}},
		{"lookahead pattern", []projection.Profile{projection.AnthropicStrict}, obj(`{"x":{"type":"string","pattern":"^(?=a)"}}`, `["x"]`),
			projection.Reason{Keyword: "pattern", Path: "/properties/x", Reason: projection.ReasonValue}},
		{"unknown format", subsetProfiles, obj(`{"x":{"type":"string","format":"iri-reference"}}`, `["x"]`),
			projection.Reason{Keyword: "format", Path: "/properties/x", Reason: projection.ReasonValue}},
		{"unknown keyword", subsetProfiles, obj(`{"x":{"type":"string","x-vendor-check":true}}`, `["x"]`),
			projection.Reason{Keyword: "x-vendor-check", Path: "/properties/x", Reason: projection.ReasonUnsupported}},
		{"recursive $ref", subsetProfiles, `{"type":"object","$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}},"required":["next"],"additionalProperties":false}},"properties":{"n":{"$ref":"#/$defs/n"}},"required":["n"],"additionalProperties":false}`,
			projection.Reason{Keyword: "$ref", Path: "/$defs/n/properties/next", Reason: projection.ReasonRecursiveRef}},
		{"$ref with siblings", subsetProfiles, `{"type":"object","$defs":{"s":{"type":"string"}},"properties":{"x":{"$ref":"#/$defs/s","maxLength":3}},"required":["x"],"additionalProperties":false}`,
			projection.Reason{Keyword: "$ref", Path: "/properties/x", Reason: projection.ReasonRefSiblings}},
		{"optional property", []projection.Profile{projection.OpenAIStrict}, obj(`{"x":{"type":"string"},"y":{"type":"string"}}`, `["x"]`),
			projection.Reason{Keyword: "required", Path: "/properties/y", Reason: projection.ReasonOptional}},
		{"additionalProperties schema", []projection.Profile{projection.OpenAIStrict, projection.AnthropicStrict}, `{"type":"object","properties":{"x":{"type":"string"}},"required":["x"],"additionalProperties":{"type":"string"}}`,
			projection.Reason{Keyword: "additionalProperties", Path: "", Reason: projection.ReasonOpenObject}},
		{"free-form object", []projection.Profile{projection.OpenAIStrict, projection.AnthropicStrict}, obj(`{"x":{"type":"object"}}`, `["x"]`),
			projection.Reason{Keyword: "additionalProperties", Path: "/properties/x", Reason: projection.ReasonOpenObject}},
		{"additionalProperties false", []projection.Profile{projection.Gemini}, obj(`{"x":{"type":"string"}}`, `["x"]`),
			projection.Reason{Keyword: "additionalProperties", Path: "", Reason: projection.ReasonUnsupported}},
		{"untyped", []projection.Profile{projection.OpenAIStrict, projection.AnthropicStrict}, obj(`{"x":{"description":"anything"}}`, `["x"]`),
			projection.Reason{Keyword: "type", Path: "/properties/x", Reason: projection.ReasonUntyped}},
		{"array without items", subsetProfiles, obj(`{"x":{"type":"array"}}`, `["x"]`),
			projection.Reason{Keyword: "items", Path: "/properties/x", Reason: projection.ReasonUntyped}},
		{"boolean schema", subsetProfiles, obj(`{"x":true}`, `["x"]`),
			projection.Reason{Keyword: "", Path: "/properties/x", Reason: projection.ReasonBoolean}},
		{"non-string enum", []projection.Profile{projection.Gemini}, `{"type":"object","properties":{"x":{"type":"integer","enum":[1,2]}},"required":["x"]}`,
			projection.Reason{Keyword: "enum", Path: "/properties/x", Reason: projection.ReasonValue}},
		{"object enum", []projection.Profile{projection.AnthropicStrict, projection.Gemini}, obj(`{"x":{"enum":[{"a":1}]}}`, `["x"]`),
			projection.Reason{Keyword: "enum", Path: "/properties/x", Reason: projection.ReasonValue}},
		{"two-type union", []projection.Profile{projection.Gemini}, `{"type":"object","properties":{"x":{"type":["string","integer"]}},"required":["x"]}`,
			projection.Reason{Keyword: "type", Path: "/properties/x", Reason: projection.ReasonValue}},
		{"parameter name", []projection.Profile{projection.Gemini}, `{"type":"object","properties":{"größe":{"type":"string"}},"required":["größe"]}`,
			projection.Reason{Keyword: "properties", Path: "/properties/größe", Reason: projection.ReasonName}},
		{"root anyOf", []projection.Profile{projection.OpenAIStrict}, `{"type":"object","anyOf":[{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false}],"properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false}`,
			projection.Reason{Keyword: "anyOf", Path: "", Reason: projection.ReasonUnsupported}},
		{"root oneOf", []projection.Profile{projection.OpenAI, projection.OpenAIStrict, projection.Anthropic, projection.AnthropicStrict},
			`{"type":"object","oneOf":[{"required":["a"]},{"required":["b"]}],"properties":{"a":{"type":"string"},"b":{"type":"string"}}}`,
			projection.Reason{Keyword: "oneOf", Path: "", Reason: projection.ReasonUnsupported}},
		{"root enum", []projection.Profile{projection.OpenAI, projection.OpenAIStrict},
			`{"type":"object","enum":[{}],"properties":{}}`,
			projection.Reason{Keyword: "enum", Path: "", Reason: projection.ReasonUnsupported}},
		{"allOf branch left open", []projection.Profile{projection.AnthropicStrict},
			obj(`{"x":{"allOf":[{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]},{"type":"object","properties":{"b":{"type":"string"}},"required":["b"]}]}}`, `["x"]`),
			projection.Reason{Keyword: "additionalProperties", Path: "/properties/x/allOf/0", Reason: projection.ReasonOpenObject}},
		{"anyOf branch beside properties", []projection.Profile{projection.OpenAIStrict, projection.AnthropicStrict},
			obj(`{"x":{"type":"object","properties":{"k":{"type":"string"},"a":{"type":"string"}},"required":["k","a"],"additionalProperties":false,"anyOf":[{"type":"object","properties":{"k":{"const":"x"}},"required":["k"]}]}}`, `["x"]`),
			projection.Reason{Keyword: "additionalProperties", Path: "/properties/x/anyOf/0", Reason: projection.ReasonOpenObject}},
		{"nullable enum", []projection.Profile{projection.Gemini},
			`{"type":"object","properties":{"x":{"type":["string","null"],"enum":["a"]}},"required":["x"]}`,
			projection.Reason{Keyword: "type", Path: "/properties/x", Reason: projection.ReasonValue}},
		{"object nesting", []projection.Profile{projection.OpenAIStrict}, nested(11),
			projection.Reason{Keyword: "properties", Path: strings.Repeat("/properties/o", 10), Reason: projection.ReasonLimit}},
		{"schema depth", subsetProfiles, nested(40),
			projection.Reason{Keyword: "", Path: "", Reason: projection.ReasonTooDeep}},
	}
	for _, c := range cases {
		for _, p := range c.profiles {
			t.Run(c.name+"/"+string(p), func(t *testing.T) {
				proj, err := projection.Project(one(c.schema), p, projection.Options{})
				if err != nil {
					t.Fatal(err)
				}
				if len(proj.Tools) != 0 || string(proj.Listing) != "[]" {
					t.Fatalf("emitted %s", proj.Listing)
				}
				if len(proj.Unrepresentable) != 1 {
					t.Fatalf("unrepresentable = %+v", proj.Unrepresentable)
				}
				u := proj.Unrepresentable[0]
				if u.Tool != (catalog.Identity{Provider: "t", Name: "tool"}) || !slices.Contains(u.Reasons, c.want) {
					t.Fatalf("reasons %+v do not include %+v", u.Reasons, c.want)
				}
			})
		}
	}
}

// nested is an object schema with n levels of objects, each with one
// required property "o".
func nested(n int) string {
	s := `{"type":"string"}`
	for range n {
		s = `{"type":"object","properties":{"o":` + s + `},"required":["o"],"additionalProperties":false}`
	}
	return s
}

// TestRepresentableTransformations: what the subset profiles rewrite,
// and only that — const to a one-value enum, ["T","null"] to nullable,
// $ref inlined, additionalProperties false added where the profile
// documents it.
func TestRepresentableTransformations(t *testing.T) {
	schema := `{"type":"object","$defs":{"k":{"type":"string","enum":["a","b"]}},"properties":{"c":{"const":"x"},"n":{"type":["integer","null"]},"k":{"$ref":"#/$defs/k","description":"kind"}},"required":["c","n","k"]}`
	want := map[projection.Profile]string{
		projection.OpenAIStrict:    `{"additionalProperties":false,"properties":{"c":{"enum":["x"]},"k":{"description":"kind","enum":["a","b"],"type":"string"},"n":{"type":["integer","null"]}},"required":["c","n","k"],"type":"object"}`,
		projection.AnthropicStrict: `{"additionalProperties":false,"properties":{"c":{"const":"x"},"k":{"description":"kind","enum":["a","b"],"type":"string"},"n":{"type":["integer","null"]}},"required":["c","n","k"],"type":"object"}`,
		projection.Gemini:          `{"properties":{"c":{"enum":["x"],"format":"enum","type":"STRING"},"k":{"description":"kind","enum":["a","b"],"format":"enum","type":"STRING"},"n":{"nullable":true,"type":"INTEGER"}},"required":["c","n","k"],"type":"OBJECT"}`,
	}
	for p, w := range want {
		proj, err := projection.Project(one(schema), p, projection.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(proj.Tools) != 1 {
			t.Fatalf("%s: %+v", p, proj.Unrepresentable)
		}
		got, _ := json.Marshal(parametersOf(t, p, proj.Tools[0].JSON))
		if p == projection.Gemini {
			var v map[string]any
			json.Unmarshal(proj.Tools[0].JSON, &v)
			got, _ = json.Marshal(v["parameters"])
		}
		if string(got) != w {
			t.Errorf("%s:\n got %s\nwant %s", p, got, w)
		}
	}
}

// TestMCPOutputSchemaIsAnObject: MCP's outputSchema is an object schema;
// a tool whose output schema is not one is reported for mcp only.
func TestMCPOutputSchemaIsAnObject(t *testing.T) {
	l := one(`{"type":"object"}`)
	l[0].Tool.OutputSchema = json.RawMessage(`{"type":"array"}`)
	proj, _ := projection.Project(l, projection.MCP, projection.Options{})
	want := projection.Reason{Keyword: "outputSchema", Path: "", Reason: projection.ReasonValue}
	if len(proj.Unrepresentable) != 1 || !slices.Contains(proj.Unrepresentable[0].Reasons, want) {
		t.Fatalf("%+v", proj.Unrepresentable)
	}
	if p, _ := projection.Project(l, projection.OpenAI, projection.Options{}); len(p.Tools) != 1 {
		t.Fatalf("openai: %+v", p.Unrepresentable)
	}
}
