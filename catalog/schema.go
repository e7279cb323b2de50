package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/gowebpki/jcs"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

const draft2020 = "https://json-schema.org/draft/2020-12/schema"

// canonicalSchema bounds and decodes a schema, checks the discovery
// contract's limits, and returns its canonical bytes and decoded form.
func canonicalSchema(raw json.RawMessage, lim Limits, input bool) (json.RawMessage, any, error) {
	if len(raw) == 0 {
		return nil, nil, fmt.Errorf("missing")
	}
	doc, err := decodeJSON(raw, lim.MaxSchemaBytes, lim.MaxSchemaDepth)
	if err != nil {
		return nil, nil, err
	}
	root, ok := doc.(map[string]any)
	if !ok {
		return nil, nil, fmt.Errorf("must be a JSON object")
	}
	if s, ok := root["$schema"]; ok && s != draft2020 {
		return nil, nil, fmt.Errorf("unsupported dialect %v; only JSON Schema 2020-12", s)
	}
	if input && root["type"] != "object" {
		return nil, nil, fmt.Errorf(`type must be "object"`)
	}
	props := 0
	if err := walkSchema(doc, &props, lim.MaxSchemaProperties); err != nil {
		return nil, nil, err
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return nil, nil, err
	}
	return canon, doc, nil
}

// walkSchema checks every subschema: $ref stays inside the document,
// "required" names declared properties, and the property count is bounded.
func walkSchema(v any, props *int, maxProps int) error {
	switch x := v.(type) {
	case map[string]any:
		if ref, ok := x["$ref"].(string); ok && !strings.HasPrefix(ref, "#") {
			return fmt.Errorf("$ref %q leaves the document; only local references are allowed", ref)
		}
		if _, ok := x["$dynamicRef"]; ok {
			return fmt.Errorf("$dynamicRef is not supported")
		}
		if p, ok := x["properties"].(map[string]any); ok {
			*props += len(p)
			if *props > maxProps {
				return fmt.Errorf("more than %d properties", maxProps)
			}
			if req, ok := x["required"].([]any); ok {
				for _, r := range req {
					name, _ := r.(string)
					if _, declared := p[name]; !declared {
						return fmt.Errorf("required property %q is not declared", name)
					}
				}
			}
		}
		for _, child := range x {
			if err := walkSchema(child, props, maxProps); err != nil {
				return err
			}
		}
	case []any:
		for _, child := range x {
			if err := walkSchema(child, props, maxProps); err != nil {
				return err
			}
		}
	}
	return nil
}

// refuseLoader is the only loader the compiler gets: schemas never cause I/O.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("loading %q is not allowed", url)
}

const schemaURL = "sharedos:///tool-input.json"

func compileSchema(doc any) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refuseLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, err
	}
	return c.Compile(schemaURL)
}

// ParseArguments bounds, decodes and validates a call's arguments against
// the tool's held input schema and returns the argument object. Empty input
// means {}.
//
// The arguments must be I-JSON (RFC 7493): an object with the same key twice
// at any depth, invalid UTF-8 or an unpaired surrogate escape is refused.
// The node authorizes what it decoded and forwards the bytes unchanged, so
// the bytes must not decode to anything else in the provider's reader.
func (t *Tool) ParseArguments(raw []byte) (map[string]any, error) {
	if len(raw) == 0 {
		raw = []byte("{}")
	}
	v, err := decodeJSON(raw, t.limits.MaxArgumentBytes, t.limits.MaxArgumentDepth)
	if err != nil {
		var je *jsonError
		errors.As(err, &je)
		kind := [...]error{
			jsonSyntax: ErrArgumentsMalformed, jsonTooLarge: ErrArgumentsTooLarge, jsonTooDeep: ErrArgumentsTooDeep,
			jsonDuplicate: ErrArgumentsDuplicateKey, jsonEncoding: ErrArgumentsEncoding,
		}[je.kind]
		return nil, fmt.Errorf("%w: %v", kind, err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: arguments must be a JSON object", ErrArgumentsMalformed)
	}
	if err := t.schema.Validate(obj); err != nil {
		msg := err.Error()
		if len(msg) > 1024 {
			msg = msg[:1024] + "…"
		}
		return nil, fmt.Errorf("%w: %s", ErrArgumentsSchema, msg)
	}
	return obj, nil
}
