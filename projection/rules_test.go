package projection_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"testing"

	"github.com/sharedos/sharedos/projection"
)

// openAIStrictKeywords are the keywords OpenAI's Structured Outputs guide
// ("Supported schemas") lists for strict mode, plus description.
var openAIStrictKeywords = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true, "items": true,
	"enum": true, "anyOf": true, "description": true, "pattern": true, "format": true,
	"multipleOf": true, "maximum": true, "exclusiveMaximum": true, "minimum": true, "exclusiveMinimum": true,
	"minItems": true, "maxItems": true,
}

var openAIFormats = []string{"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}

var openAIName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// checkOpenAIStrict reports the first way schema s breaks the published
// strict-mode rules: only the listed keywords; every object has
// additionalProperties false and lists every property in required; the
// root is an object and not an anyOf; at most 10 levels of objects.
func checkOpenAIStrict(s any, path string, root bool, objects int) error {
	m, ok := s.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: not a schema object", path)
	}
	for k := range m {
		if !openAIStrictKeywords[k] {
			return fmt.Errorf("%s: keyword %q is not supported in strict mode", path, k)
		}
	}
	if root && (m["type"] != "object" || m["anyOf"] != nil) {
		return fmt.Errorf("root must be an object and not anyOf")
	}
	if f, ok := m["format"]; ok && !slices.Contains(openAIFormats, f.(string)) {
		return fmt.Errorf("%s: format %v", path, f)
	}
	if props, ok := m["properties"].(map[string]any); ok || m["type"] == "object" {
		if objects++; objects > 10 {
			return fmt.Errorf("%s: more than 10 levels of objects", path)
		}
		if m["additionalProperties"] != false {
			return fmt.Errorf("%s: additionalProperties must be false", path)
		}
		req := m["required"].([]any)
		for name, p := range props {
			if !slices.Contains(req, any(name)) {
				return fmt.Errorf("%s: property %q not in required", path, name)
			}
			if err := checkOpenAIStrict(p, path+"/properties/"+name, false, objects); err != nil {
				return err
			}
		}
	}
	if it, ok := m["items"]; ok {
		if err := checkOpenAIStrict(it, path+"/items", false, objects); err != nil {
			return err
		}
	}
	for i, b := range asAnyList(m["anyOf"]) {
		if err := checkOpenAIStrict(b, fmt.Sprintf("%s/anyOf/%d", path, i), false, objects); err != nil {
			return err
		}
	}
	return nil
}

// TestOpenAIStrictFollowsPublishedRules checks every tool openai-strict
// emits for the fixture against the published rules, the envelope
// included (type function, strict true, a valid name).
func TestOpenAIStrictFollowsPublishedRules(t *testing.T) {
	proj, err := projection.Project(fixture(t), projection.OpenAIStrict, projection.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(proj.Tools) < 5 {
		t.Fatalf("only %d tools emitted", len(proj.Tools))
	}
	for _, tool := range proj.Tools {
		var env struct {
			Type     string `json:"type"`
			Function struct {
				Name       string         `json:"name"`
				Strict     bool           `json:"strict"`
				Parameters map[string]any `json:"parameters"`
			} `json:"function"`
		}
		if err := json.Unmarshal(tool.JSON, &env); err != nil {
			t.Fatal(err)
		}
		if env.Type != "function" || !env.Function.Strict || !openAIName.MatchString(env.Function.Name) || env.Function.Name != tool.Alias {
			t.Errorf("%s: envelope %s", tool.Alias, tool.JSON)
		}
		if err := checkOpenAIStrict(env.Function.Parameters, "", true, 0); err != nil {
			t.Errorf("%s: %v", tool.Alias, err)
		}
	}
	// The checker itself refuses what the rules refuse.
	for _, bad := range []string{
		`{"type":"object","properties":{"a":{"type":"string"}},"required":[],"additionalProperties":false}`,
		`{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`,
		`{"type":"object","properties":{"a":{"type":"string","minLength":1}},"required":["a"],"additionalProperties":false}`,
	} {
		var s any
		json.Unmarshal([]byte(bad), &s)
		if checkOpenAIStrict(s, "", true, 0) == nil {
			t.Errorf("checker accepts %s", bad)
		}
	}
}

// TestPassThroughIsVerbatim: the profiles whose schema field takes JSON
// Schema emit the held canonical schema byte for byte, refuse nothing,
// and carry what their shape has.
func TestPassThroughIsVerbatim(t *testing.T) {
	listed := fixture(t)
	for _, p := range []projection.Profile{projection.OpenAI, projection.Anthropic, projection.GeminiJSONSchema, projection.MCP} {
		proj, err := projection.Project(listed, p, projection.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(proj.Unrepresentable) != 0 || len(proj.Tools) != len(listed) {
			t.Fatalf("%s: %d emitted, unrepresentable %+v", p, len(proj.Tools), proj.Unrepresentable)
		}
		for i, tool := range proj.Tools {
			var raw map[string]json.RawMessage
			json.Unmarshal(tool.JSON, &raw)
			field := map[projection.Profile]string{projection.Anthropic: "input_schema", projection.GeminiJSONSchema: "parametersJsonSchema", projection.MCP: "inputSchema"}[p]
			got := raw[field]
			if p == projection.OpenAI {
				var fn map[string]json.RawMessage
				json.Unmarshal(raw["function"], &fn)
				got = fn["parameters"]
			}
			if string(got) != string(listed[i].Tool.InputSchema) {
				t.Errorf("%s/%s: schema %s, held %s", p, tool.Alias, got, listed[i].Tool.InputSchema)
			}
		}
	}
	proj, _ := projection.Project(listed, projection.MCP, projection.Options{})
	var first struct {
		Name         string          `json:"name"`
		Title        string          `json:"title"`
		OutputSchema json.RawMessage `json:"outputSchema"`
		Annotations  map[string]any  `json:"annotations"`
	}
	for _, tool := range proj.Tools {
		if tool.Identity.Provider == "github-work" {
			json.Unmarshal(tool.JSON, &first)
		}
	}
	if first.Title != "Create issue" || len(first.OutputSchema) == 0 || first.Annotations["destructiveHint"] != false {
		t.Errorf("mcp tool lacks title, outputSchema or annotations: %+v", first)
	}
}
