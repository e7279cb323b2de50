package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/gowebpki/jcs"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

const draft2020 = "https://json-schema.org/draft/2020-12/schema"

// refusal is a check's verdict before Normalize names the tool: kind is
// the sentinel (ErrSchemaNodes, …), detail what exactly was wrong.
type refusal struct {
	kind   error
	detail string
}

func (r *refusal) Error() string { return r.detail }
func (r *refusal) Unwrap() error { return r.kind }

func refuse(kind error, format string, args ...any) error {
	return &refusal{kind: kind, detail: fmt.Sprintf(format, args...)}
}

// schemaJSON maps a decodeJSON failure to the schema sentinels.
func schemaJSON(err error) error {
	var je *jsonError
	errors.As(err, &je)
	switch je.kind {
	case jsonTooLarge:
		return refuse(ErrSchemaTooLarge, "%v", err)
	case jsonTooDeep:
		return refuse(ErrSchemaTooDeep, "%v", err)
	}
	return refuse(ErrSchemaMalformed, "%v", err)
}

// canonicalSchema bounds and decodes a schema, checks the discovery
// contract's limits, and returns its canonical bytes and decoded form.
func canonicalSchema(raw json.RawMessage, lim Limits, input bool) (json.RawMessage, any, error) {
	if len(raw) == 0 {
		return nil, nil, refuse(ErrSchemaMalformed, "missing")
	}
	doc, err := decodeJSON(raw, lim.MaxSchemaBytes, lim.MaxSchemaDepth)
	if err != nil {
		return nil, nil, schemaJSON(err)
	}
	root, ok := doc.(map[string]any)
	if !ok {
		return nil, nil, refuse(ErrSchemaMalformed, "must be a JSON object")
	}
	if input && root["type"] != "object" {
		return nil, nil, refuse(ErrSchemaNotObject, `type must be "object"`)
	}
	if err := checkSchema(doc, lim); err != nil {
		return nil, nil, err
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return nil, nil, refuse(ErrSchemaMalformed, "%v", err)
	}
	return canon, doc, nil
}

// The keywords whose values are subschemas: a schema, a list of schemas or
// an object of schemas; applying to the same instance (in place), to a part
// of it (starting a new object, for "required"), or to nothing until a
// $ref points there ($defs).
type (
	kwShape uint8
	kwRole  uint8
)

const (
	shapeOne kwShape = iota
	shapeList
	shapeDict
)

const (
	roleInPlace kwRole = iota
	rolePart
	roleDefs
)

var subschemaKeywords = map[string]struct {
	shape kwShape
	role  kwRole
}{
	"allOf": {shapeList, roleInPlace}, "anyOf": {shapeList, roleInPlace}, "oneOf": {shapeList, roleInPlace},
	"not": {shapeOne, roleInPlace}, "if": {shapeOne, roleInPlace}, "then": {shapeOne, roleInPlace},
	"else": {shapeOne, roleInPlace}, "dependentSchemas": {shapeDict, roleInPlace},

	"properties": {shapeDict, rolePart}, "patternProperties": {shapeDict, rolePart},
	"additionalProperties": {shapeOne, rolePart}, "propertyNames": {shapeOne, rolePart},
	"unevaluatedProperties": {shapeOne, rolePart}, "items": {shapeOne, rolePart},
	"prefixItems": {shapeList, rolePart}, "contains": {shapeOne, rolePart},
	"unevaluatedItems": {shapeOne, rolePart}, "contentSchema": {shapeOne, rolePart},

	"$defs": {shapeDict, roleDefs}, "definitions": {shapeDict, roleDefs},
}

var subschemaOrder = func() []string {
	ks := make([]string, 0, len(subschemaKeywords))
	for k := range subschemaKeywords {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}()

// unsupportedKeywords change how references resolve in ways checkSchema
// does not follow; a schema using them is refused rather than half-checked.
var unsupportedKeywords = []string{"$anchor", "$dynamicAnchor", "$dynamicRef"}

const (
	unvisited uint8 = iota
	visiting
	visited
)

// schemaChecker walks a schema as the validator will: every subschema
// under the keywords above, and every $ref followed to the subschema it
// points at. Subschemas are named by their JSON pointer.
type schemaChecker struct {
	root  any
	lim   Limits
	state map[string]uint8
	size  map[string]int // nodes an evaluation may visit, $refs expanded
	nodes map[string]*schemaNode
	parts []string // subschemas that start a new instance: root, properties/*, items, …
	props int
}

type schemaNode struct {
	obj     map[string]any
	inPlace []string // in-place subschemas, $ref target included
}

// checkSchema enforces the discovery contract on a decoded schema:
//
//   - dialect: every $schema is JSON Schema 2020-12;
//   - references: every $ref is a JSON pointer into this document ("#",
//     "#/…") that resolves to a schema; anchors, dynamic references and $id
//     below the root are refused;
//   - no recursion: the graph of subschemas and the $refs between them has
//     no cycle — any recursive schema is refused, even one a finite
//     instance would bottom out of;
//   - node budget: counting every subschema, and each $ref as the whole
//     subschema it points at (what one evaluation can visit), at most
//     MaxSchemaNodes;
//   - at most MaxSchemaProperties "properties" entries in all;
//   - every name in "required" (and in "dependentRequired") is declared by
//     "properties" of the same object: in the subschema itself or any
//     subschema applying in place with it (allOf, anyOf, oneOf, not, if,
//     then, else, dependentSchemas, $ref — transitively, from where the
//     object starts).
func checkSchema(doc any, lim Limits) error {
	c := &schemaChecker{root: doc, lim: lim, state: map[string]uint8{}, size: map[string]int{}, nodes: map[string]*schemaNode{}}
	if _, err := c.visit("", doc, true); err != nil {
		return err
	}
	return c.checkRequired()
}

func (c *schemaChecker) visit(ptr string, v any, part bool) (int, error) {
	if part {
		c.parts = append(c.parts, ptr)
	}
	switch c.state[ptr] {
	case visiting:
		return 0, refuse(ErrSchemaRefCycle, "$ref cycle through %q; recursive schemas are not supported", "#"+ptr)
	case visited:
		return c.size[ptr], nil
	}
	c.state[ptr] = visiting
	size := 1
	if obj, ok := v.(map[string]any); ok {
		n := &schemaNode{obj: obj}
		c.nodes[ptr] = n
		if err := c.checkKeywords(ptr, obj); err != nil {
			return 0, err
		}
		add := func(child string, cv any, role kwRole) error {
			s, err := c.visit(child, cv, role == rolePart)
			if err != nil {
				return err
			}
			if role == roleInPlace {
				n.inPlace = append(n.inPlace, child)
			}
			// Every visited subschema is in the root's expansion, so this
			// also bounds the distinct ones, and the work done here.
			if size += s; size > c.lim.MaxSchemaNodes {
				return refuse(ErrSchemaNodes, "more than %d subschemas, counting each $ref as what it points at", c.lim.MaxSchemaNodes)
			}
			return nil
		}
		for _, kw := range subschemaOrder {
			val, ok := obj[kw]
			if !ok {
				continue
			}
			k := subschemaKeywords[kw]
			base := ptr + "/" + escapeToken(kw)
			var err error
			switch k.shape {
			case shapeOne:
				err = add(base, val, k.role)
			case shapeList:
				for i, e := range asList(val) {
					if err = add(base+"/"+strconv.Itoa(i), e, k.role); err != nil {
						break
					}
				}
			case shapeDict:
				m, _ := val.(map[string]any)
				for _, name := range sortedKeys(m) {
					if err = add(base+"/"+escapeToken(name), m[name], k.role); err != nil {
						break
					}
				}
			}
			if err != nil {
				return 0, err
			}
		}
		if ref, ok := obj["$ref"]; ok {
			target, tv, err := c.resolve(ref)
			if err != nil {
				return 0, err
			}
			if err := add(target, tv, roleInPlace); err != nil {
				return 0, err
			}
		}
	}
	c.state[ptr] = visited
	c.size[ptr] = size
	return size, nil
}

func (c *schemaChecker) checkKeywords(ptr string, obj map[string]any) error {
	if s, ok := obj["$schema"]; ok && s != draft2020 {
		return refuse(ErrSchemaDialect, "unsupported dialect %v at %q; only JSON Schema 2020-12", s, "#"+ptr)
	}
	for _, kw := range unsupportedKeywords {
		if _, ok := obj[kw]; ok {
			return refuse(ErrSchemaUnsupported, "%s is not supported (at %q)", kw, "#"+ptr)
		}
	}
	if _, ok := obj["$id"]; ok && ptr != "" {
		return refuse(ErrSchemaUnsupported, "$id below the root is not supported (at %q)", "#"+ptr)
	}
	if p, ok := obj["properties"].(map[string]any); ok {
		if c.props += len(p); c.props > c.lim.MaxSchemaProperties {
			return refuse(ErrSchemaProperties, "more than %d properties", c.lim.MaxSchemaProperties)
		}
	}
	return nil
}

// resolve finds what a $ref points at: its JSON pointer (in the form visit
// names subschemas by) and value.
func (c *schemaChecker) resolve(ref any) (string, any, error) {
	s, ok := ref.(string)
	if !ok || !strings.HasPrefix(s, "#") {
		return "", nil, refuse(ErrSchemaRef, "$ref %v leaves the document; only local references are allowed", ref)
	}
	frag, err := url.PathUnescape(s[1:])
	if err != nil {
		return "", nil, refuse(ErrSchemaRef, "$ref %q: %v", s, err)
	}
	if frag != "" && frag[0] != '/' {
		return "", nil, refuse(ErrSchemaUnsupported, "$ref %q names an anchor; only JSON pointers are supported", s)
	}
	ptr, v := "", c.root
	if frag != "" {
		for _, tok := range strings.Split(frag[1:], "/") {
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			found := false
			switch x := v.(type) {
			case map[string]any:
				v, found = x[tok]
			case []any:
				if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(x) && strconv.Itoa(i) == tok {
					v, found = x[i], true
				}
			}
			if !found {
				return "", nil, refuse(ErrSchemaRef, "$ref %q points at nothing", s)
			}
			ptr += "/" + escapeToken(tok)
		}
	}
	switch v.(type) {
	case map[string]any, bool:
		return ptr, v, nil
	}
	return "", nil, refuse(ErrSchemaRef, "$ref %q does not point at a schema", s)
}

func (c *schemaChecker) checkRequired() error {
	// Each location is visited structurally once, so parts has no repeats.
	for _, part := range c.parts {
		var members []*schemaNode
		inGroup := map[string]bool{part: true}
		for queue := []string{part}; len(queue) > 0; queue = queue[1:] {
			n := c.nodes[queue[0]]
			if n == nil {
				continue // a boolean schema
			}
			members = append(members, n)
			for _, next := range n.inPlace {
				if !inGroup[next] {
					inGroup[next] = true
					queue = append(queue, next)
				}
			}
		}
		declared := map[string]bool{}
		for _, n := range members {
			if p, ok := n.obj["properties"].(map[string]any); ok {
				for name := range p {
					declared[name] = true
				}
			}
		}
		check := func(names any) error {
			list, _ := names.([]any)
			for _, r := range list {
				if name, _ := r.(string); !declared[name] {
					return refuse(ErrSchemaRequired, "required property %v is not declared in properties (at %q)", r, "#"+part)
				}
			}
			return nil
		}
		for _, n := range members {
			if err := check(n.obj["required"]); err != nil {
				return err
			}
			dr, _ := n.obj["dependentRequired"].(map[string]any)
			for _, name := range sortedKeys(dr) {
				if err := check(append([]any{name}, asList(dr[name])...)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func asList(v any) []any { l, _ := v.([]any); return l }

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func escapeToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
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
