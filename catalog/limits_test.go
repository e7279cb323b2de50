package catalog_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sharedos/sharedos/catalog"
)

func schema(s string) func(d *catalog.Definition) {
	return func(d *catalog.Definition) { d.InputSchema = json.RawMessage(s) }
}

// props returns n properties "p0"…; the first is "workspace", which the
// requirement template needs.
func props(n int) string {
	parts := []string{`"workspace":{}`}
	for i := 1; i < n; i++ {
		parts = append(parts, fmt.Sprintf(`"p%d":{}`, i))
	}
	return strings.Join(parts, ",")
}

func branches(n int) string { return strings.TrimSuffix(strings.Repeat("{},", n), ",") }

// nested returns JSON nested exactly depth containers deep (the schema
// object itself is the first).
func nested(depth int) string {
	return `{"type":"object","properties":{"workspace":{}},"examples":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`
}

// refBomb: $defs d0…dn where each d(i+1) is allOf [d(i), d(i)]: n+1
// distinct small subschemas that one evaluation visits 2^n times.
func refBomb(n int) string {
	defs := []string{`"d0":{"type":"string"}`}
	for i := 1; i <= n; i++ {
		defs = append(defs, fmt.Sprintf(`"d%d":{"allOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]}`, i, i-1, i-1))
	}
	return fmt.Sprintf(`{"type":"object","properties":{"workspace":{"$ref":"#/$defs/d%d"}},"$defs":{%s}}`, n, strings.Join(defs, ","))
}

// Each input is refused by exactly one check, and the test asserts which:
// switching any one check off makes its row fail.
func TestEachLimitRefusesAlone(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(d *catalog.Definition)
		want   error
	}{
		{"schema depth 33", schema(nested(33)), catalog.ErrSchemaTooDeep},
		{"schema bytes", schema(`{"type":"object","properties":{"workspace":{}},"description":"` + strings.Repeat("x", 64<<10) + `"}`), catalog.ErrSchemaTooLarge},
		{"513 properties", schema(`{"type":"object","properties":{` + props(513) + `}}`), catalog.ErrSchemaProperties},
		{"513 properties over two objects", schema(`{"type":"object","properties":{` + props(500) + `},"allOf":[{"properties":{` + strings.ReplaceAll(props(13), `"workspace"`, `"w"`) + `}}]}`), catalog.ErrSchemaProperties},
		{"2049 nodes (anyOf)", schema(`{"type":"object","properties":{"workspace":{}},"anyOf":[` + branches(2047) + `]}`), catalog.ErrSchemaNodes},
		{"15000 anyOf branches", schema(`{"type":"object","properties":{"workspace":{}},"anyOf":[` + branches(15000) + `]}`), catalog.ErrSchemaNodes},
		{"nodes through $ref", schema(refBomb(8)), catalog.ErrSchemaNodes}, // 9 $defs, 3040 nodes visited
		{"other dialect", func(d *catalog.Definition) {
			d.InputSchema = json.RawMessage(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"workspace":{}}}`)
		}, catalog.ErrSchemaDialect},
		{"other dialect below the root", schema(`{"type":"object","properties":{"workspace":{"$schema":"http://json-schema.org/draft-04/schema#"}}}`), catalog.ErrSchemaDialect},
		{"not an object type", schema(`{"type":"string","properties":{"workspace":{}}}`), catalog.ErrSchemaNotObject},
		{"no type", schema(`{"properties":{"workspace":{}}}`), catalog.ErrSchemaNotObject},
		{"type list", schema(`{"type":["object"],"properties":{"workspace":{}}}`), catalog.ErrSchemaNotObject},
		{"remote ref", schema(`{"type":"object","properties":{"workspace":{"$ref":"https://evil.example/s.json"}}}`), catalog.ErrSchemaRef},
		{"empty ref", schema(`{"type":"object","properties":{"workspace":{"$ref":""}}}`), catalog.ErrSchemaRef},
		{"ref not a string", schema(`{"type":"object","properties":{"workspace":{"$ref":7}}}`), catalog.ErrSchemaRef},
		{"ref to nothing", schema(`{"type":"object","properties":{"workspace":{"$ref":"#/$defs/ghost"}}}`), catalog.ErrSchemaRef},
		{"ref past a leaf", schema(`{"type":"object","properties":{"workspace":{"$ref":"#/type/x"}}}`), catalog.ErrSchemaRef},
		{"ref bad index", schema(`{"type":"object","properties":{"workspace":{"$ref":"#/allOf/01"}},"allOf":[{},{}]}`), catalog.ErrSchemaRef},
		{"ref negative index", schema(`{"type":"object","properties":{"workspace":{"$ref":"#/allOf/-1"}},"allOf":[{},{}]}`), catalog.ErrSchemaRef},
		{"ref index out of range", schema(`{"type":"object","properties":{"workspace":{"$ref":"#/allOf/2"}},"allOf":[{},{}]}`), catalog.ErrSchemaRef},
		{"ref to a non-schema", schema(`{"type":"object","properties":{"workspace":{"$ref":"#/type"}}}`), catalog.ErrSchemaRef},
		{"ref bad escape", schema(`{"type":"object","properties":{"workspace":{"$ref":"#/%zz"}}}`), catalog.ErrSchemaRef},
		{"ref to the root", schema(`{"type":"object","properties":{"workspace":{}},"$ref":"#"}`), catalog.ErrSchemaRefCycle},
		{"recursive property", schema(`{"type":"object","properties":{"workspace":{},"child":{"$ref":"#"}}}`), catalog.ErrSchemaRefCycle},
		{"$defs cycle", schema(`{"type":"object","properties":{"workspace":{"$ref":"#/$defs/a"}},"$defs":{"a":{"allOf":[{"$ref":"#/$defs/b"}]},"b":{"$ref":"#/$defs/a"}}}`), catalog.ErrSchemaRefCycle},
		{"self ref", schema(`{"type":"object","properties":{"workspace":{"$ref":"#/properties/workspace"}}}`), catalog.ErrSchemaRefCycle},
		{"required, no properties", schema(`{"type":"object","properties":{"workspace":{"type":"object","required":["ghost"]}}}`), catalog.ErrSchemaRequired},
		{"required at the root", schema(`{"type":"object","properties":{"workspace":{}},"required":["workspace","ghost"]}`), catalog.ErrSchemaRequired},
		{"required in allOf", schema(`{"type":"object","properties":{"workspace":{}},"allOf":[{"required":["ghost"]}]}`), catalog.ErrSchemaRequired},
		{"required of a parent's property", schema(`{"type":"object","properties":{"workspace":{"type":"object","properties":{"a":{}},"required":["workspace"]}}}`), catalog.ErrSchemaRequired},
		{"required in a $def", schema(`{"type":"object","properties":{"workspace":{"$ref":"#/$defs/o"}},"$defs":{"o":{"required":["x"]}}}`), catalog.ErrSchemaRequired},
		{"required not a string", schema(`{"type":"object","properties":{"workspace":{}},"required":[1]}`), catalog.ErrSchemaRequired},
		{"dependentRequired key", schema(`{"type":"object","properties":{"workspace":{}},"dependentRequired":{"ghost":["workspace"]}}`), catalog.ErrSchemaRequired},
		{"dependentRequired value", schema(`{"type":"object","properties":{"workspace":{}},"dependentRequired":{"workspace":["ghost"]}}`), catalog.ErrSchemaRequired},
		{"$dynamicRef", schema(`{"type":"object","properties":{"workspace":{"$dynamicRef":"#x"}}}`), catalog.ErrSchemaUnsupported},
		{"$anchor", schema(`{"type":"object","properties":{"workspace":{"$anchor":"w"}}}`), catalog.ErrSchemaUnsupported},
		{"$dynamicAnchor", schema(`{"type":"object","properties":{"workspace":{"$dynamicAnchor":"w"}}}`), catalog.ErrSchemaUnsupported},
		{"ref to an anchor", schema(`{"type":"object","properties":{"workspace":{"$ref":"#w"}}}`), catalog.ErrSchemaUnsupported},
		{"nested $id", schema(`{"type":"object","properties":{"workspace":{"$id":"https://x.example/w"}}}`), catalog.ErrSchemaUnsupported},
		{"does not compile", schema(`{"type":"object","properties":{"workspace":{"minLength":"three"}}}`), catalog.ErrSchemaCompile},
		{"malformed", schema(`{"type":"object",`), catalog.ErrSchemaMalformed},
		{"duplicate keys", schema(`{"type":"object","type":"object","properties":{"workspace":{}}}`), catalog.ErrSchemaMalformed},
		{"invalid UTF-8", schema("{\"type\":\"object\",\"properties\":{\"workspace\":{}},\"title\":\"\xff\"}"), catalog.ErrSchemaMalformed},
		{"array", schema(`[{"type":"object"}]`), catalog.ErrSchemaMalformed},
		{"missing", func(d *catalog.Definition) { d.InputSchema = nil }, catalog.ErrSchemaMalformed},
		{"output not an object", func(d *catalog.Definition) { d.OutputSchema = json.RawMessage(`true`) }, catalog.ErrSchemaMalformed},
		{"output cycle", func(d *catalog.Definition) { d.OutputSchema = json.RawMessage(`{"$ref":"#"}`) }, catalog.ErrSchemaRefCycle},
		{"description 8193 bytes", func(d *catalog.Definition) { d.Description = strings.Repeat("x", 8<<10+1) }, catalog.ErrDescription},
		{"description not UTF-8", func(d *catalog.Definition) { d.Description = "caf\xe9" }, catalog.ErrDescription},
		{"name 129 bytes", func(d *catalog.Definition) { d.Name = strings.Repeat("n", 129) }, catalog.ErrName},
		{"name empty", func(d *catalog.Definition) { d.Name = "" }, catalog.ErrName},
		{"name with slash", func(d *catalog.Definition) { d.Name = "a/b" }, catalog.ErrName},
		{"name with space", func(d *catalog.Definition) { d.Name = "a b" }, catalog.ErrName},
		{"name with control", func(d *catalog.Definition) { d.Name = "a\x01b" }, catalog.ErrName},
		{"name with DEL", func(d *catalog.Definition) { d.Name = "a\x7fb" }, catalog.ErrName},
		{"name not UTF-8", func(d *catalog.Definition) { d.Name = "a\xffb" }, catalog.ErrName},
		{"namespace with slash", func(d *catalog.Definition) { d.Namespace = "a/b" }, catalog.ErrName},
		{"wildcard capability", func(d *catalog.Definition) { d.Capability = "notion.*" }, catalog.ErrCapability},
		{"empty capability", func(d *catalog.Definition) { d.Capability = "" }, catalog.ErrCapability},
		{"empty requirement", func(d *catalog.Definition) { d.Requirement = "" }, catalog.ErrRequirement},
		{"unknown placeholder", func(d *catalog.Definition) { d.Requirement = "notion/{ghost}" }, catalog.ErrRequirement},
		{"bad placeholder", func(d *catalog.Definition) { d.Requirement = "notion/{a b}" }, catalog.ErrRequirement},
		{"annotations an array", func(d *catalog.Definition) { d.Annotations = json.RawMessage(`[1]`) }, catalog.ErrAnnotations},
		{"annotations malformed", func(d *catalog.Definition) { d.Annotations = json.RawMessage(`{"a":`) }, catalog.ErrAnnotations},
		{"annotations duplicate keys", func(d *catalog.Definition) { d.Annotations = json.RawMessage(`{"a":1,"a":2}`) }, catalog.ErrAnnotations},
		{"annotations number out of range", func(d *catalog.Definition) { d.Annotations = json.RawMessage(`{"a":1e999}`) }, catalog.ErrAnnotations},
		{"schema number out of range", schema(`{"type":"object","properties":{"workspace":{}},"examples":[1e999]}`), catalog.ErrSchemaMalformed},
	}
	every := []error{catalog.ErrName, catalog.ErrDescription, catalog.ErrCapability, catalog.ErrRequirement, catalog.ErrAnnotations,
		catalog.ErrSchemaMalformed, catalog.ErrSchemaTooLarge, catalog.ErrSchemaTooDeep, catalog.ErrSchemaDialect, catalog.ErrSchemaNotObject,
		catalog.ErrSchemaNodes, catalog.ErrSchemaProperties, catalog.ErrSchemaRef, catalog.ErrSchemaRefCycle, catalog.ErrSchemaRequired,
		catalog.ErrSchemaUnsupported, catalog.ErrSchemaCompile, catalog.ErrDuplicateIdentity}
	for _, c := range cases {
		d := searchDef()
		c.mutate(&d)
		_, err := catalog.Normalize("notion", d, catalog.Limits{})
		if !errors.Is(err, c.want) || !errors.Is(err, catalog.ErrInvalidDefinition) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
			continue
		}
		for _, other := range every {
			if other != c.want && errors.Is(err, other) {
				t.Errorf("%s: err = %v also matches %v", c.name, err, other)
			}
		}
		if !strings.Contains(err.Error(), "notion/"+d.Name+": ") {
			t.Errorf("%s: err %q does not name the tool", c.name, err)
		}
	}
}

// At each limit exactly, the definition is accepted: together with the
// rows above (one over), this pins every boundary.
func TestLimitsAreInclusive(t *testing.T) {
	cases := map[string]func(d *catalog.Definition){
		"schema depth 32":         schema(nested(32)),
		"schema bytes":            nil, // filled below
		"512 properties":          schema(`{"type":"object","properties":{` + props(512) + `}}`),
		"2048 nodes":              schema(`{"type":"object","properties":{"workspace":{}},"anyOf":[` + branches(2046) + `]}`),
		"1507 nodes through $ref": schema(refBomb(7)),
		"description 8192 bytes":  func(d *catalog.Definition) { d.Description = " " + strings.Repeat("x", 8<<10) + "\r\n" },
		"name 128 bytes":          func(d *catalog.Definition) { d.Name = strings.Repeat("n", 128) },
		"non-ASCII name":          func(d *catalog.Definition) { d.Name = "recherche-é" },
		"2020-12 $schema":         schema(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"workspace":{}}}`),
		"root $id":                schema(`{"$id":"https://x.example/s","type":"object","properties":{"workspace":{"$ref":"#/$defs/w"}},"$defs":{"w":{"type":"string"}}}`),
		"shared $def, no cycle":   schema(`{"type":"object","properties":{"workspace":{"$ref":"#/$defs/s"},"b":{"$ref":"#/$defs/s"}},"$defs":{"s":{"type":"string"}}}`),
		"escaped pointer":         schema(`{"type":"object","properties":{"workspace":{"$ref":"#/$defs/a~1b~0c%20d"}},"$defs":{"a/b~c d":{"type":"string"}}}`),
		"ref into an array":       schema(`{"type":"object","properties":{"workspace":{"$ref":"#/allOf/1"}},"allOf":[{},{"type":"string"}]}`),
		"ref to index 0":          schema(`{"type":"object","properties":{"workspace":{"$ref":"#/allOf/0"}},"allOf":[{"type":"string"}]}`),
		"boolean in a group":      schema(`{"type":"object","properties":{"workspace":{}},"allOf":[true,{"properties":{"b":{}}}],"required":["b"]}`),
		"ref to a sibling":        schema(`{"type":"object","properties":{"workspace":{"type":"string"},"b":{"$ref":"#/properties/workspace"}}}`),
		"required across allOf":   schema(`{"type":"object","properties":{"workspace":{}},"allOf":[{"properties":{"b":{}}}],"required":["b"]}`),
		"required in oneOf":       schema(`{"type":"object","properties":{"workspace":{},"b":{}},"oneOf":[{"required":["workspace"]},{"required":["b"]}]}`),
		"required in then":        schema(`{"type":"object","properties":{"workspace":{},"b":{}},"if":{"required":["b"]},"then":{"required":["workspace"]}}`),
		"required through $ref":   schema(`{"type":"object","properties":{"workspace":{"$ref":"#/$defs/o"}},"$defs":{"o":{"type":"object","properties":{"x":{}},"required":["x"]}}}`),
		"required by $def props":  schema(`{"type":"object","properties":{"workspace":{}},"allOf":[{"$ref":"#/$defs/p"}],"required":["z"],"$defs":{"p":{"properties":{"z":{}}}}}`),
		"dependentRequired":       schema(`{"type":"object","properties":{"workspace":{},"b":{}},"dependentRequired":{"b":["workspace"]}}`),
		"boolean subschemas":      schema(`{"type":"object","properties":{"workspace":true,"b":false},"additionalProperties":false,"items":true,"not":false}`),
		"output schema, any type": func(d *catalog.Definition) {
			d.OutputSchema = json.RawMessage(`{"type":"array","items":{"$ref":"#/$defs/i"},"$defs":{"i":{"type":"string"}}}`)
		},
		"unknown keyword with a $ref inside": schema(`{"type":"object","properties":{"workspace":{}},"x-note":{"$ref":"https://not.followed/"},"default":{"$ref":"#/nope"}}`),
		"property named like keywords":       schema(`{"type":"object","properties":{"workspace":{},"$ref":{},"$id":{},"$schema":{},"required":{}},"required":["$ref"]}`),
	}
	base := searchDef()
	fill := 64<<10 - len(`{"type":"object","properties":{"workspace":{}},"description":""}`)
	cases["schema bytes"] = schema(`{"type":"object","properties":{"workspace":{}},"description":"` + strings.Repeat("x", fill) + `"}`)
	for name, mutate := range cases {
		d := base
		mutate(&d)
		if _, err := catalog.Normalize("notion", d, catalog.Limits{}); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}
}

// The limits are the ones configured, not the defaults.
func TestLimitsAreConfigurable(t *testing.T) {
	lim := catalog.Limits{MaxSchemaBytes: 100, MaxSchemaDepth: 4, MaxSchemaProperties: 2, MaxSchemaNodes: 4,
		MaxDescriptionBytes: 5, MaxNameBytes: 6}
	d := catalog.Definition{Name: "n", Description: "d", InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"items":{}},"b":{}}}`),
		Capability: "c", Requirement: "r"}
	if _, err := catalog.Normalize("p", d, lim); err != nil {
		t.Fatalf("at the limits: %v", err)
	}
	for name, c := range map[string]struct {
		mutate func(d *catalog.Definition)
		want   error
	}{
		"bytes":       {schema(`{"type":"object","description":"` + strings.Repeat("x", 80) + `"}`), catalog.ErrSchemaTooLarge},
		"depth":       {schema(`{"type":"object","properties":{"a":{"items":{"items":{}}}}}`), catalog.ErrSchemaTooDeep},
		"properties":  {schema(`{"type":"object","properties":{"a":{},"b":{},"c":{}}}`), catalog.ErrSchemaProperties},
		"nodes":       {schema(`{"type":"object","properties":{"a":{"items":{}},"b":{"not":{}}}}`), catalog.ErrSchemaNodes},
		"description": {func(d *catalog.Definition) { d.Description = "dddddd" }, catalog.ErrDescription},
		"name":        {func(d *catalog.Definition) { d.Name = "nnnnnnn" }, catalog.ErrName},
		"provider":    {func(d *catalog.Definition) { d.Namespace = "nsnsnsn" }, catalog.ErrName},
	} {
		d := d
		c.mutate(&d)
		if _, err := catalog.Normalize("p", d, lim); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", name, err, c.want)
		}
	}
	if _, err := catalog.Normalize("provider", d, lim); !errors.Is(err, catalog.ErrName) {
		t.Errorf("provider over MaxNameBytes: err = %v", err)
	}
	if got := catalog.DefaultLimits(); got != (catalog.Limits{MaxSchemaBytes: 64 << 10, MaxSchemaDepth: 32, MaxSchemaProperties: 512,
		MaxSchemaNodes: 2048, MaxDescriptionBytes: 8 << 10, MaxNameBytes: 128, MaxArgumentBytes: 256 << 10, MaxArgumentDepth: 32}) {
		t.Errorf("DefaultLimits() = %+v", got)
	}
}

func TestDescriptionIsTrimmedAndKept(t *testing.T) {
	d := searchDef()
	d.Description = "\n  Line one\r\nline two — ünïcode  \r\n"
	tl := mustTool(t, "notion", d)
	if tl.Description != "Line one\nline two — ünïcode" {
		t.Fatalf("description = %q", tl.Description)
	}
}
