package projection

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// Why a tool is not representable in a profile. Reason.Reason is one of
// these; Reason.Keyword names the keyword and Reason.Path the JSON pointer
// (into the tool's input schema) of the schema that holds it.
const (
	// ReasonUnsupported: the profile has no way to say what the keyword
	// constrains; dropping it would let the model send what the tool
	// refuses.
	ReasonUnsupported = "unsupported"
	// ReasonValue: the keyword exists in the profile, but not with this
	// value (a format it does not know, an enum of non-strings, minItems
	// above 1, a pattern with lookaround, …).
	ReasonValue = "unsupported value"
	// ReasonRecursiveRef: a $ref that reaches itself; the profile's form
	// has every $ref inlined, which a cycle cannot be.
	ReasonRecursiveRef = "recursive $ref"
	// ReasonRef: a $ref that is not a pointer into the document, or
	// points at nothing.
	ReasonRef = "unresolvable $ref"
	// ReasonRefSiblings: a $ref next to other assertions (JSON Schema
	// 2020-12 applies both); inlining would have to merge them.
	ReasonRefSiblings = "$ref with sibling keywords"
	// ReasonOptional: a property not listed in required, under a profile
	// where every property must be.
	ReasonOptional = "optional property under strict"
	// ReasonOpenObject: an object that allows keys it does not name
	// (additionalProperties true or a schema, or no properties at all)
	// under a profile that requires additionalProperties false.
	ReasonOpenObject = "open object under strict"
	// ReasonUntyped: a schema that accepts any value (no type, enum,
	// const or anyOf), or an array with no items schema, under a profile
	// that needs each to be stated.
	ReasonUntyped = "unconstrained schema"
	// ReasonBoolean: a boolean schema (true or false) where the profile
	// takes only schema objects.
	ReasonBoolean = "boolean schema"
	// ReasonName: a parameter name outside the profile's rules; renaming
	// it would change the arguments' keys.
	ReasonName = "parameter name not allowed"
	// ReasonLimit: over a limit the profile documents (object nesting,
	// properties, enum values, optional or union parameters).
	ReasonLimit = "over profile limit"
	// ReasonTooLarge, ReasonTooDeep: the schema is over this package's
	// own bounds (Options.MaxSchemaBytes, MaxSchemaDepth, MaxSchemaNodes).
	ReasonTooLarge = "too large"
	ReasonTooDeep  = "too deep"
	// ReasonMalformed: not a JSON object schema whose type is "object".
	ReasonMalformed = "malformed"
)

// maxReasons bounds the reasons kept for one tool.
const maxReasons = 32

// Reason is one machine-readable cause of a tool being unrepresentable.
type Reason struct {
	Keyword string `json:"keyword"`
	Path    string `json:"path"`
	Reason  string `json:"reason"`
}

type bounds struct {
	maxBytes, maxDepth, maxNodes int
}

// checkShape bounds raw JSON before anything decodes it: at most maxBytes,
// valid JSON, containers nested at most maxDepth.
func checkShape(raw []byte, b bounds) *Reason {
	if len(raw) > b.maxBytes {
		return &Reason{Path: "", Reason: ReasonTooLarge}
	}
	if !json.Valid(raw) {
		return &Reason{Path: "", Reason: ReasonMalformed}
	}
	depth, inStr, esc := 0, false, false
	for _, c := range raw {
		switch {
		case inStr:
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			if depth++; depth > b.maxDepth {
				return &Reason{Path: "", Reason: ReasonTooDeep}
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return nil
}

func decode(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

// translator rewrites one input schema into a subset profile's form,
// collecting every reason it cannot.
type translator struct {
	p       *profileRules
	b       bounds
	root    any
	reasons []Reason
	nodes   int
	inline  []string // $ref targets being inlined, innermost last
	// keepOpen is set for the next schema translated when it applies in
	// place with others that may name other keys (an allOf branch, or an
	// anyOf branch beside properties): closing it would refuse those
	// keys, so the strict profiles refuse it instead of adding false.
	keepOpen bool

	props, enums, chars, optional, unions int
}

// refuse records a reason once: a definition inlined at several places
// is reported where it is defined, a single time.
func (t *translator) refuse(kw, path, why string) {
	r := Reason{Keyword: kw, Path: path, Reason: why}
	if len(t.reasons) < maxReasons && !slices.Contains(t.reasons, r) {
		t.reasons = append(t.reasons, r)
	}
}

// translated is one schema in a subset profile's form, with the counts
// request-wide limits are checked on, or the reasons it has no such form.
type translated struct {
	schema           any
	optional, unions int
	reasons          []Reason
}

func translate(p *profileRules, raw []byte, b bounds) translated {
	if r := checkShape(raw, b); r != nil {
		return translated{reasons: []Reason{*r}}
	}
	root, err := decode(raw)
	obj, ok := root.(map[string]any)
	if err != nil || !ok || obj["type"] != "object" {
		return translated{reasons: []Reason{{Keyword: "type", Path: "", Reason: ReasonMalformed}}}
	}
	t := &translator{p: p, b: b, root: root}
	out := t.schema("", root, 0, 0)
	t.limits()
	if len(t.reasons) > 0 {
		return translated{reasons: t.reasons}
	}
	return translated{schema: out, optional: t.optional, unions: t.unions}
}

func (t *translator) limits() {
	p := t.p
	over := func(kw string, n, max int) {
		if max > 0 && n > max {
			t.refuse(kw, "", ReasonLimit)
		}
	}
	over("properties", t.props, p.maxProperties)
	over("enum", t.enums, p.maxEnumValues)
	over("enum", t.chars, p.maxStringChars)
	over("required", t.optional, p.maxOptional)
	over("anyOf", t.unions, p.maxUnions)
}

func child(ptr string, tokens ...string) string {
	for _, tok := range tokens {
		ptr += "/" + strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
	}
	return ptr
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// schema translates the subschema v found at ptr. depth is its nesting in
// subschemas (inlined $refs included), objDepth the objects above it.
func (t *translator) schema(ptr string, v any, depth, objDepth int) any {
	if depth > t.b.maxDepth {
		t.refuse("", ptr, ReasonTooDeep)
		return nil
	}
	if t.nodes++; t.nodes > t.b.maxNodes {
		if t.nodes == t.b.maxNodes+1 {
			t.refuse("", ptr, ReasonTooLarge)
		}
		return nil
	}
	keepOpen := t.keepOpen
	t.keepOpen = false
	obj, ok := v.(map[string]any)
	if !ok {
		if _, isBool := v.(bool); isBool {
			t.refuse("", ptr, ReasonBoolean)
		} else {
			t.refuse("", ptr, ReasonMalformed)
		}
		return nil
	}
	if ref, ok := obj["$ref"]; ok {
		t.keepOpen = keepOpen
		return t.ref(ptr, obj, ref, depth, objDepth)
	}
	p := t.p
	out := make(map[string]any, len(obj)+1)
	types := typeList(obj["type"])
	isObject := slices.Contains(types, "object") || obj["properties"] != nil
	if isObject {
		objDepth++
		if p.maxObjectDepth > 0 && objDepth > p.maxObjectDepth {
			t.refuse("properties", ptr, ReasonLimit)
		}
	}
	for _, kw := range sortedKeys(obj) {
		val := obj[kw]
		switch p.keywords[kw] {
		case refuse:
			t.refuse(kw, ptr, ReasonUnsupported)
		case drop:
		case keep:
			t.checkValue(kw, ptr, val)
			out[kw] = val
		case subOne:
			out[kw] = t.schema(child(ptr, kw), val, depth+1, objDepth)
		case subList:
			list, _ := val.([]any)
			if list == nil {
				t.refuse(kw, ptr, ReasonMalformed)
				continue
			}
			if kw == "anyOf" {
				t.unions++
			}
			outList := make([]any, len(list))
			for i, e := range list {
				t.keepOpen = kw == "allOf" || obj["properties"] != nil
				outList[i] = t.schema(child(ptr, kw, strconv.Itoa(i)), e, depth+1, objDepth)
			}
			out[kw] = outList
		case subDict:
			m, _ := val.(map[string]any)
			if m == nil {
				t.refuse(kw, ptr, ReasonMalformed)
				continue
			}
			outMap := make(map[string]any, len(m))
			for _, name := range sortedKeys(m) {
				if kw == "properties" {
					t.props++
					t.chars += len(name)
					if ptr == "" && p.topLevelNames != nil && !p.topLevelNames(name) {
						t.refuse(kw, child(ptr, kw, name), ReasonName)
					}
				}
				outMap[name] = t.schema(child(ptr, kw, name), m[name], depth+1, objDepth)
			}
			out[kw] = outMap
		case special:
			t.special(kw, ptr, obj, val, out)
		}
	}
	t.object(ptr, obj, out, isObject, keepOpen)
	if slices.Contains(types, "array") && obj["items"] == nil {
		t.refuse("items", ptr, ReasonUntyped)
	}
	if p.needsType && out["type"] == nil && out["enum"] == nil && out["const"] == nil && out["anyOf"] == nil && out["allOf"] == nil {
		t.refuse("type", ptr, ReasonUntyped)
	}
	return out
}

// ref inlines the subschema a $ref points at. A description beside it
// replaces the target's; other annotations beside it are dropped; any
// assertion beside it is refused.
func (t *translator) ref(ptr string, obj map[string]any, ref any, depth, objDepth int) any {
	for _, kw := range sortedKeys(obj) {
		if kw != "$ref" && !slices.Contains(annotations, kw) && kw != "description" && kw != "$defs" && kw != "definitions" {
			t.refuse("$ref", ptr, ReasonRefSiblings)
			return nil
		}
	}
	target, v, ok := resolve(t.root, ref)
	if !ok {
		t.refuse("$ref", ptr, ReasonRef)
		return nil
	}
	if slices.Contains(t.inline, target) {
		t.refuse("$ref", ptr, ReasonRecursiveRef)
		return nil
	}
	t.inline = append(t.inline, target)
	out := t.schema(target, v, depth+1, objDepth)
	t.inline = t.inline[:len(t.inline)-1]
	if m, ok := out.(map[string]any); ok {
		if d, ok := obj["description"]; ok {
			cp := make(map[string]any, len(m)+1)
			for k, v := range m {
				cp[k] = v
			}
			cp["description"] = d
			out = cp
		}
	}
	return out
}

// resolve follows a local JSON-pointer $ref from the document root.
func resolve(root, ref any) (string, any, bool) {
	s, ok := ref.(string)
	if !ok || !strings.HasPrefix(s, "#") {
		return "", nil, false
	}
	frag := s[1:]
	if frag != "" && frag[0] != '/' {
		return "", nil, false
	}
	ptr, v := "", root
	if frag == "" {
		return "", root, true
	}
	for _, tok := range strings.Split(frag[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := v.(map[string]any)
		if !ok {
			return "", nil, false
		}
		if v, ok = m[tok]; !ok {
			return "", nil, false
		}
		ptr = child(ptr, tok)
	}
	return ptr, v, true
}

func typeList(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func (t *translator) special(kw, ptr string, obj map[string]any, val any, out map[string]any) {
	p := t.p
	switch kw {
	case "$defs", "definitions":
		// Every $ref is inlined, so definitions are not emitted; one no
		// $ref reaches is never evaluated, and leaving it out changes
		// nothing.
	case "type":
		types := typeList(val)
		if len(types) == 0 {
			t.refuse(kw, ptr, ReasonMalformed)
			return
		}
		if len(types) > 1 {
			t.unions++
		}
		if !p.openAPITypes {
			out[kw] = val
			return
		}
		var nonNull []string
		for _, ty := range types {
			if ty != "null" {
				nonNull = append(nonNull, ty)
			}
		}
		if len(nonNull) != 1 {
			t.refuse(kw, ptr, ReasonValue)
			return
		}
		out[kw] = strings.ToUpper(nonNull[0])
		if len(nonNull) < len(types) {
			// OpenAPI 3.0 readers differ on whether nullable admits null
			// past an enum; a nullable enum is refused rather than guessed.
			if obj["enum"] != nil || obj["const"] != nil {
				t.refuse(kw, ptr, ReasonValue)
				return
			}
			out["nullable"] = true
		}
	case "enum":
		list, _ := val.([]any)
		if len(list) == 0 {
			t.refuse(kw, ptr, ReasonMalformed)
			return
		}
		t.enums += len(list)
		if !t.enumValues(kw, ptr, list) {
			return
		}
		if c, ok := obj["const"]; ok && p.constToEnum {
			// Both apply: the accepted set is the const if the enum
			// holds it; the const branch below emits it.
			if !slices.ContainsFunc(list, func(e any) bool { return jsonEqual(e, c) }) {
				t.refuse(kw, ptr, ReasonValue)
			}
			return
		}
		out[kw] = list
		t.openAPIEnum(obj, out)
	case "const":
		t.enums++
		if !t.enumValues(kw, ptr, []any{val}) {
			return
		}
		if p.constToEnum {
			out["enum"] = []any{val}
			t.openAPIEnum(obj, out)
		} else {
			out[kw] = val
		}
	case "required":
		list, ok := val.([]any)
		if !ok {
			t.refuse(kw, ptr, ReasonMalformed)
			return
		}
		out[kw] = list
	case "additionalProperties":
		switch {
		case val == false:
			if p.openAPITypes {
				t.refuse(kw, ptr, ReasonUnsupported)
				return
			}
			out[kw] = false
		case p.strictObjects:
			t.refuse(kw, ptr, ReasonOpenObject)
		case p.openAPITypes && val == true:
			// OpenAPI objects are open: true says what absence says.
		default:
			t.refuse(kw, ptr, ReasonUnsupported)
		}
	}
}

// openAPIEnum marks a string enum the way Gemini's Schema documents
// (type STRING, format enum); every value is a string, so neither changes
// the accepted set.
func (t *translator) openAPIEnum(obj map[string]any, out map[string]any) {
	if !t.p.openAPITypes {
		return
	}
	if obj["type"] == nil {
		out["type"] = "STRING"
	}
	if obj["format"] == nil {
		out["format"] = "enum"
	}
}

func (t *translator) enumValues(kw, ptr string, list []any) bool {
	for _, e := range list {
		switch x := e.(type) {
		case string:
			t.chars += len(x)
			continue
		case map[string]any, []any:
			if t.p.enumPrimitives || t.p.enumStringsOnly {
				t.refuse(kw, ptr, ReasonValue)
				return false
			}
		default:
			if t.p.enumStringsOnly {
				t.refuse(kw, ptr, ReasonValue)
				return false
			}
		}
	}
	return true
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func (t *translator) checkValue(kw, ptr string, val any) {
	p := t.p
	switch kw {
	case "format":
		if s, _ := val.(string); p.formats != nil && !p.formats[s] {
			t.refuse(kw, ptr, ReasonValue)
		}
	case "minItems":
		if n, _ := val.(json.Number); p.minItems01 && n != "0" && n != "1" {
			t.refuse(kw, ptr, ReasonValue)
		}
	case "pattern":
		if s, _ := val.(string); p.simplePattern && !simpleRegex(s) {
			t.refuse(kw, ptr, ReasonValue)
		}
	}
}

// simpleRegex reports whether a pattern avoids backreferences, lookaround
// and word boundaries.
func simpleRegex(s string) bool {
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s):
			if c := s[i+1]; c >= '1' && c <= '9' || c == 'b' || c == 'B' || c == 'k' {
				return false
			}
			i++
		case strings.HasPrefix(s[i:], "(?=") || strings.HasPrefix(s[i:], "(?!") ||
			strings.HasPrefix(s[i:], "(?<=") || strings.HasPrefix(s[i:], "(?<!"):
			return false
		}
	}
	return true
}

// object applies the profile's object rules to a translated schema.
func (t *translator) object(ptr string, obj, out map[string]any, isObject, keepOpen bool) {
	p := t.p
	props, _ := obj["properties"].(map[string]any)
	req := map[string]bool{}
	for _, r := range asList(obj["required"]) {
		if s, ok := r.(string); ok {
			req[s] = true
		}
	}
	for _, name := range sortedKeys(props) {
		if !req[name] {
			t.optional++
			if p.allRequired {
				t.refuse("required", child(ptr, "properties", name), ReasonOptional)
			}
		}
	}
	if !isObject || !p.strictObjects {
		return
	}
	ap, hasAP := obj["additionalProperties"]
	switch {
	case hasAP && ap == false:
	case hasAP:
		// Refused in special.
	case len(props) == 0 || keepOpen:
		t.refuse("additionalProperties", ptr, ReasonOpenObject)
	default:
		// The documented narrowing: keys the schema does not name are
		// no longer sent; every instance still accepted was accepted.
		out["additionalProperties"] = false
	}
}

func asList(v any) []any { l, _ := v.([]any); return l }
