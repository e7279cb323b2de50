package projection

import "slices"

// Profile names a model API's view of a tool listing.
type Profile string

// The profiles. Each one's table is in profiles below and in
// docs/model-facing.md.
const (
	OpenAI           Profile = "openai"            // Chat Completions / Responses function calling, non-strict
	OpenAIStrict     Profile = "openai-strict"     // function calling with strict: true (Structured Outputs' subset)
	Anthropic        Profile = "anthropic"         // Messages API tool use
	AnthropicStrict  Profile = "anthropic-strict"  // tool use with strict: true (structured outputs' subset)
	Gemini           Profile = "gemini"            // functionDeclarations[].parameters (OpenAPI 3.0 subset)
	GeminiJSONSchema Profile = "gemini-jsonschema" // functionDeclarations[].parametersJsonSchema (JSON Schema)
	MCP              Profile = "mcp"               // what an MCP server's tools/list serves
)

// Profiles returns every profile, sorted by name.
func Profiles() []Profile {
	ps := make([]Profile, 0, len(profiles))
	for p := range profiles {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// Valid reports whether p is a known profile.
func (p Profile) Valid() bool { _, ok := profiles[p]; return ok }

// exact reports whether the profile's tokens are counted exactly with an
// OpenAI encoding (otherwise by the documented estimate).
func (p Profile) exact() bool { return p == OpenAI || p == OpenAIStrict }

// keywordAction is what a subset profile does with one JSON Schema keyword.
type keywordAction uint8

const (
	// refuse: the keyword constrains instances and the profile cannot say
	// it; the tool is unrepresentable. Every keyword not in a table is
	// refused, so an unknown keyword can never be dropped silently.
	refuse keywordAction = iota
	// keep: copied as is (after checkValue, when the profile has one).
	keep
	// drop: a pure annotation; dropping it changes no accepted instance.
	drop
	// subOne, subList, subDict: the value is a schema, a list of schemas
	// or an object of schemas, each translated in turn.
	subOne
	subList
	subDict
	// special: handled by the translator itself ($ref, $defs, type,
	// const, additionalProperties, required, enum).
	special
)

// nameRules are a profile's rules for a model-facing tool name.
type nameRules struct {
	max   int
	allow func(c byte, first bool) bool
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

var (
	// ^[a-zA-Z0-9_-]{1,64}$: OpenAI function names and Anthropic tool names.
	names64 = nameRules{max: 64, allow: func(c byte, _ bool) bool { return alnum(c) || c == '_' || c == '-' }}
	// Gemini: starts with a letter or an underscore; then a-z, A-Z, 0-9,
	// underscores, dots and dashes; at most 64.
	namesGemini = nameRules{max: 64, allow: func(c byte, first bool) bool {
		if first {
			return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
		}
		return alnum(c) || c == '_' || c == '.' || c == '-'
	}}
	// MCP (2025-11-25): 1 to 128 of A-Z, a-z, 0-9, '_', '-', '.'.
	namesMCP = nameRules{max: 128, allow: func(c byte, _ bool) bool { return alnum(c) || c == '_' || c == '-' || c == '.' }}
)

// requestLimits bound what one request may carry in all: tools, optional
// properties, and anyOf or type-array schemas; 0 is no bound.
type requestLimits struct {
	tools, optional, unions int
}

// profileRules is one profile's table.
type profileRules struct {
	names nameRules
	// subset is false for profiles whose schema field takes JSON Schema
	// 2020-12 as the catalogue holds it: the schema is emitted byte for
	// byte (canonical) and only rootForbids and outputObject refuse. The
	// fields from keywords to maxUnions apply to subset profiles only.
	subset bool
	// keywords: the action for each keyword; absent means refuse.
	keywords map[string]keywordAction
	// strictObjects: every object must end up with additionalProperties
	// false. Absent on an object with properties, it is added — the one
	// narrowing these profiles document (the model may send less: no key
	// the schema does not name); true or a schema is refused, and so is an
	// object that names no properties (adding false would leave only {}).
	strictObjects bool
	// allRequired: every property must be listed in required (OpenAI
	// strict); an optional property is refused.
	allRequired bool
	// constToEnum: const v is emitted as enum [v] (same accepted set).
	constToEnum bool
	// openAPITypes: type is emitted in the OpenAPI upper-case form, a
	// ["T","null"] type as type T with nullable true; additionalProperties
	// does not exist (objects are open), so false or a schema is refused.
	openAPITypes bool
	// enumStringsOnly, enumPrimitives: enum (and const) values must be
	// strings (Gemini) or not objects or arrays (Anthropic strict).
	enumStringsOnly bool
	enumPrimitives  bool
	// formats: the values "format" may take; any other is refused.
	formats map[string]bool
	// minItems01: minItems must be 0 or 1 (Anthropic strict).
	minItems01 bool
	// simplePattern: patterns may not use backreferences, lookaround or
	// \b (Anthropic strict).
	simplePattern bool
	// needsType: every schema must say what it accepts (type, enum,
	// const, anyOf or allOf); an unconstrained schema is refused.
	needsType bool
	// topLevelNames: rules for the names of the root's properties (the
	// function's parameters), nil when any name goes.
	topLevelNames func(string) bool
	// Documented size limits of one schema, 0 when none: object nesting,
	// properties in all, enum values in all, characters of property names
	// and enum and const strings in all, optional properties, anyOf or
	// type-array schemas.
	maxObjectDepth, maxProperties, maxEnumValues, maxStringChars, maxOptional, maxUnions int
	// request: documented limits of one request, across its tools; a
	// listing's tail past them is left out (Projection.OverLimit).
	request *requestLimits
	// rootForbids: keywords the API refuses at the root of a tool's
	// schema, whatever the profile's form; such a tool is unrepresentable.
	rootForbids []string
	// outputObject: the output schema, when emitted, must be of type
	// "object" (MCP).
	outputObject bool
	// fields of the per-tool envelope.
	envelope func(e envelope) any
}

// annotations are keywords that never change which instances a schema
// accepts (JSON Schema 2020-12 meta-data vocabulary, $comment, and the
// identifiers of a document that references nothing outside itself).
var annotations = []string{"title", "examples", "default", "deprecated", "readOnly", "writeOnly", "$comment", "$schema", "$id"}

// table is a subset profile's keyword table: what every subset profile
// handles (types, enums, objects, arrays, references, description, the
// annotations dropped), with entries added or overriding.
func table(entries map[string]keywordAction) map[string]keywordAction {
	m := map[string]keywordAction{
		"type": special, "enum": special, "const": special, "$ref": special, "$defs": special, "definitions": special,
		"properties": subDict, "required": special, "additionalProperties": special, "items": subOne,
		"description": keep,
	}
	for _, a := range annotations {
		m[a] = drop
	}
	for k, v := range entries {
		m[k] = v
	}
	return m
}

func set(s ...string) map[string]bool {
	m := make(map[string]bool, len(s))
	for _, v := range s {
		m[v] = true
	}
	return m
}

func geminiParamName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

var (
	// OpenAI refuses function parameters with these at the top level.
	openAIRoot = []string{"allOf", "anyOf", "enum", "not", "oneOf"}
	// Anthropic refuses an input_schema with these at the top level.
	anthropicRoot = []string{"allOf", "anyOf", "oneOf"}
)

var profiles = map[Profile]*profileRules{
	OpenAI: {names: names64, rootForbids: openAIRoot, request: &requestLimits{tools: 128}, envelope: func(e envelope) any {
		return map[string]any{"type": "function", "function": fn(e, "parameters", false)}
	}},
	Anthropic: {names: names64, rootForbids: anthropicRoot, envelope: func(e envelope) any { return fn(e, "input_schema", false) }},
	GeminiJSONSchema: {names: namesGemini, envelope: func(e envelope) any {
		return fn(e, "parametersJsonSchema", false)
	}},
	MCP: {names: namesMCP, outputObject: true, envelope: mcpEnvelope},

	// OpenAI Structured Outputs, "Supported schemas".
	OpenAIStrict: {
		names: names64, subset: true, strictObjects: true, allRequired: true, constToEnum: true,
		rootForbids: openAIRoot, request: &requestLimits{tools: 128},
		needsType: true,
		keywords: table(map[string]keywordAction{
			"anyOf": subList, "pattern": keep, "format": keep,
			"multipleOf": keep, "maximum": keep, "exclusiveMaximum": keep, "minimum": keep, "exclusiveMinimum": keep,
			"minItems": keep, "maxItems": keep,
		}),
		formats:        set("date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"),
		maxObjectDepth: 10, maxProperties: 5000, maxEnumValues: 1000, maxStringChars: 120000,
		envelope: func(e envelope) any {
			return map[string]any{"type": "function", "function": fn(e, "parameters", true)}
		},
	},
	// Anthropic structured outputs, "JSON Schema limitations"; strict tool
	// use compiles input_schema the same way.
	AnthropicStrict: {
		names: names64, subset: true, strictObjects: true, enumPrimitives: true, minItems01: true, simplePattern: true,
		rootForbids: anthropicRoot,
		needsType:   true,
		keywords: table(map[string]keywordAction{
			"anyOf": subList, "allOf": subList, "pattern": keep, "format": keep, "minItems": keep,
		}),
		formats:     set("date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"),
		maxOptional: 24, maxUnions: 16,
		request:  &requestLimits{tools: 20, optional: 24, unions: 16},
		envelope: func(e envelope) any { return fn(e, "input_schema", true) },
	},
	// Gemini Schema object (a select subset of the OpenAPI 3.0 schema).
	Gemini: {
		names: namesGemini, subset: true, constToEnum: true, openAPITypes: true, enumStringsOnly: true,
		keywords: table(map[string]keywordAction{
			// Gemini's Schema has a title; the other subset profiles drop it.
			"title": keep,
			"anyOf": subList, "format": keep, "pattern": keep, "minLength": keep, "maxLength": keep,
			"minimum": keep, "maximum": keep, "minItems": keep, "maxItems": keep,
			"minProperties": keep, "maxProperties": keep,
		}),
		formats:       set("date-time", "enum", "float", "double", "int32", "int64"),
		topLevelNames: geminiParamName,
		envelope:      func(e envelope) any { return fn(e, "parameters", false) },
	},
}
