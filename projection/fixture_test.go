package projection_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/projection"
)

// def is one fixture tool: provider, definition fields, and the schema.
type def struct {
	provider, name, namespace, description, annotations, schema, output string
}

// fixtureDefs exercise what the profiles differ on: nested objects,
// enums, optional vs required, anyOf/oneOf/allOf, $ref/$defs, formats,
// patternProperties, const and nullable types, numeric and string bounds,
// very long and colliding names, a name starting with a digit, unicode.
var fixtureDefs = []def{
	{provider: "notion", name: "search", description: "Search pages in a Notion workspace by free text.",
		annotations: `{"readOnlyHint":true,"title":"Search pages"}`,
		schema:      `{"type":"object","properties":{"workspace":{"type":"string","description":"Workspace id"},"query":{"type":"string","minLength":1},"limit":{"type":"integer","minimum":1,"maximum":50,"default":10}},"required":["workspace","query"],"additionalProperties":false}`},
	{provider: "github-work", name: "create_issue", namespace: "github", description: "Create an issue in a repository.",
		annotations: `{"destructiveHint":false,"title":"Create issue"}`,
		schema:      `{"type":"object","properties":{"repo":{"type":"string","pattern":"^[a-z0-9-]+/[a-z0-9-]+$"},"title":{"type":"string"},"labels":{"type":"array","items":{"type":"string","enum":["bug","feature","docs"]},"maxItems":5},"due":{"type":["string","null"],"format":"date-time"},"assignee":{"type":"object","properties":{"login":{"type":"string"},"team":{"type":"string","const":"core"}},"required":["login","team"],"additionalProperties":false}},"required":["repo","title","labels","due","assignee"],"additionalProperties":false}`,
		output:      `{"type":"object","properties":{"number":{"type":"integer"}}}`},
	{provider: "github-personal", name: "search", namespace: "github", description: "Search issues in personal repositories.",
		schema: `{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`},
	{provider: "gitlab", name: "search", namespace: "github", description: "Search merge requests.",
		schema: `{"type":"object","properties":{"q":{"type":"string"}},"required":["q"],"additionalProperties":false}`},
	{provider: "shapes", name: "draw", description: "Draw a shape: a circle or a rectangle.",
		schema: `{"type":"object","properties":{"shape":{"anyOf":[{"type":"object","properties":{"r":{"type":"number","exclusiveMinimum":0}},"required":["r"],"additionalProperties":false},{"type":"object","properties":{"w":{"type":"number"},"h":{"type":"number"}},"required":["w","h"],"additionalProperties":false}]}},"required":["shape"],"additionalProperties":false}`},
	{provider: "shapes", name: "pick", description: "Pick exactly one option.",
		schema: `{"type":"object","properties":{"choice":{"oneOf":[{"type":"string"},{"type":"integer"}]}},"required":["choice"],"additionalProperties":false}`},
	{provider: "shapes", name: "merge", description: "Both constraints apply.",
		schema: `{"type":"object","properties":{"v":{"allOf":[{"type":"string"},{"minLength":2}]}},"required":["v"],"additionalProperties":false}`},
	{provider: "crm", name: "upsert_contact", description: "Create or update a contact.",
		schema: `{"type":"object","$defs":{"address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"}},"required":["street","city"],"additionalProperties":false},"unused":{"not":{}}},"properties":{"home":{"$ref":"#/$defs/address","description":"Home address"},"work":{"$ref":"#/$defs/address"},"email":{"type":"string","format":"email"}},"required":["home","work","email"],"additionalProperties":false}`},
	{provider: "files", name: "stat", description: "Stat a file by URL.",
		schema: `{"type":"object","properties":{"url":{"type":"string","format":"uri"},"id":{"type":"string","format":"uuid"}},"required":["url","id"],"additionalProperties":false}`},
	{provider: "kv", name: "put_many", description: "Store labelled values.",
		schema: `{"type":"object","properties":{"values":{"type":"object","patternProperties":{"^x-":{"type":"string"}}}},"required":["values"],"additionalProperties":false}`},
	{provider: "1password", name: "get_item", description: "Read an item from a vault.",
		schema: `{"type":"object","properties":{"vault":{"type":"string"},"tags":{"type":"array","items":{"type":"string"},"minItems":1,"uniqueItems":true}},"required":["vault","tags"],"additionalProperties":false}`},
	{provider: "very-long-provider-name-for-testing", name: strings.Repeat("extraordinarily_long_tool_name_", 3) + "end", description: "A tool whose alias must be shortened.",
		schema: `{"type":"object","properties":{"x":{"type":"boolean"}},"required":["x"],"additionalProperties":false}`},
	{provider: "wörterbuch", name: "nachschlagen", namespace: "wörterbuch", description: "Schlägt ein Wort nach — 辞書で単語を調べる。",
		annotations: `{"title":"Wörterbuch"}`,
		schema:      `{"type":"object","properties":{"wort":{"type":"string","maxLength":64},"größe":{"type":"integer","enum":[1,2,3]}},"required":["wort","größe"],"additionalProperties":false}`},
	{provider: "open", name: "echo", description: "Echo any JSON object back.",
		schema: `{"type":"object"}`},
	{provider: "weather", name: "forecast", description: "Forecast the weather for a city.",
		annotations: `{"readOnlyHint":true,"title":"Forecast"}`,
		schema:      `{"type":"object","$defs":{"kind":{"enum":["daily","hourly"]}},"properties":{"city":{"type":"string","title":"City","minLength":1,"maxLength":80},"units":{"const":"metric"},"days":{"type":"integer","minimum":1,"maximum":14},"when":{"type":["string","null"],"format":"date-time"},"kind":{"$ref":"#/$defs/kind"},"tags":{"type":"array","items":{"type":"string"},"minItems":1,"maxItems":3},"loc":{"anyOf":[{"type":"string"},{"type":"number"}]}},"required":["city","units","days","when","kind","tags","loc"]}`},
	{provider: "math", name: "scale", description: "Scale a number.",
		schema: `{"type":"object","properties":{"x":{"type":"number","multipleOf":0.5,"minimum":-10,"maximum":10},"mode":{"enum":["up","down",null]}},"required":["x","mode"],"additionalProperties":false}`},
}

func fixtureTools(t testing.TB) []*catalog.Tool {
	t.Helper()
	var tools []*catalog.Tool
	for _, d := range fixtureDefs {
		cd := catalog.Definition{Name: d.name, Namespace: d.namespace, Description: d.description,
			InputSchema: json.RawMessage(d.schema), Capability: "fixture.use", Requirement: "fixture/any"}
		if d.annotations != "" {
			cd.Annotations = json.RawMessage(d.annotations)
		}
		if d.output != "" {
			cd.OutputSchema = json.RawMessage(d.output)
		}
		tool, err := catalog.Normalize(d.provider, cd, catalog.Limits{})
		if err != nil {
			t.Fatalf("%s/%s: %v", d.provider, d.name, err)
		}
		tools = append(tools, tool)
	}
	return append(tools, recursiveTool())
}

// recursiveTool is built by hand: the catalogue refuses recursive schemas,
// so a held registry never has one, but Project must still report it.
func recursiveTool() *catalog.Tool {
	schema := `{"$defs":{"node":{"properties":{"children":{"items":{"$ref":"#/$defs/node"},"type":"array"},"name":{"type":"string"}},"required":["name","children"],"type":"object"}},"additionalProperties":false,"properties":{"tree":{"$ref":"#/$defs/node"}},"required":["tree"],"type":"object"}`
	return &catalog.Tool{
		Identity: catalog.Identity{Provider: "trees", Name: "walk"}, Namespace: "trees",
		Revision:    "0000000000000000000000000000000000000000000000000000000000000001",
		Description: "Walk a tree.", InputSchema: json.RawMessage(schema), Annotations: json.RawMessage(`{}`),
	}
}

// fixture is the fixture catalogue as a turn lists it: in registry
// (identity) order, with the registry's aliases.
func fixture(t testing.TB) []projection.Listed {
	t.Helper()
	tools := fixtureTools(t)
	reg, err := catalog.Build(tools)
	if err != nil {
		t.Fatal(err)
	}
	listed := make([]projection.Listed, reg.Len())
	for i := range reg.Len() {
		tool, alias := reg.At(i)
		listed[i] = projection.Listed{Alias: alias, Tool: tool}
	}
	return listed
}
