package mcpprovider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// JSON Schema dialects. MCP's default is 2020-12; many servers (every one
// whose schemas come from zod-to-json-schema, the reference servers
// included) declare draft-07.
var draft07 = map[string]bool{
	"http://json-schema.org/draft-07/schema#": true, "http://json-schema.org/draft-07/schema": true,
	"https://json-schema.org/draft-07/schema#": true, "https://json-schema.org/draft-07/schema": true,
}

// maxAdaptDepth bounds the walk of a schema being adapted (the
// catalogue's own depth limit applies afterwards).
const maxAdaptDepth = 64

// adaptDialect returns schema as JSON Schema 2020-12 when it is declared
// draft-07 and reading it as 2020-12 means the same thing: the $schema
// declaration is dropped and nothing else changes. A draft-07 schema that
// uses what the two dialects read differently — "items" as an array,
// "additionalItems", "dependencies", "$ref" beside other keywords — is
// refused with the reason, never silently weakened. Any other schema is
// returned as it is (the catalogue refuses other dialects).
//
// schema is already bounded by the tool's byte limit.
func adaptDialect(schema json.RawMessage) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace(schema)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return schema, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &top); err != nil {
		return schema, nil // the catalogue reports it
	}
	var dialect string
	if raw, ok := top["$schema"]; !ok || json.Unmarshal(raw, &dialect) != nil || !draft07[dialect] {
		return schema, nil
	}
	var doc any
	if err := json.Unmarshal(trimmed, &doc); err != nil {
		return schema, nil
	}
	if err := sameIn2020(doc, "#", 0); err != nil {
		return nil, fmt.Errorf("draft-07 schema that 2020-12 reads differently: %w", err)
	}
	delete(top, "$schema")
	out, err := json.Marshal(top)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// sameIn2020 walks every subschema position (conservatively: every
// object value) and reports the first draft-07 construct 2020-12 reads
// differently.
func sameIn2020(v any, at string, depth int) error {
	if depth > maxAdaptDepth {
		return fmt.Errorf("nested deeper than %d at %s", maxAdaptDepth, at)
	}
	switch v := v.(type) {
	case map[string]any:
		if items, ok := v["items"].([]any); ok && items != nil {
			return fmt.Errorf(`"items" is an array (a tuple) at %s`, at)
		}
		for _, k := range []string{"additionalItems", "dependencies", "$recursiveRef"} {
			if _, ok := v[k]; ok {
				return fmt.Errorf("%q at %s", k, at)
			}
		}
		if _, ok := v["$ref"]; ok {
			for k := range v {
				if k != "$ref" && k != "$comment" && k != "description" && k != "title" {
					return fmt.Errorf(`"$ref" beside %q at %s (ignored in draft-07, applied in 2020-12)`, k, at)
				}
			}
		}
		for k, c := range v {
			if k == "enum" || k == "const" || k == "default" || k == "examples" {
				continue // values, not schemas
			}
			if err := sameIn2020(c, at+"/"+strings.ReplaceAll(k, "/", "~1"), depth+1); err != nil {
				return err
			}
		}
	case []any:
		for i, c := range v {
			if err := sameIn2020(c, fmt.Sprintf("%s/%d", at, i), depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}
