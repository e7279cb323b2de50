package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/sharedos/sharedos/authority"
)

// Identity is a tool's server-scoped identity. Tool names are not globally
// unique; (Provider, Name) is. Permissions, audit and provenance use it,
// never the model-facing alias.
type Identity struct {
	Provider string `json:"provider" msgpack:"provider"`
	Name     string `json:"name" msgpack:"name"`
}

func (id Identity) String() string { return id.Provider + "/" + id.Name }

// Definition is a tool as a provider describes it. Schemas and annotations
// are raw JSON exactly as the provider sent them; Normalize bounds,
// canonicalizes and compiles them.
type Definition struct {
	Name        string `json:"name" yaml:"name" msgpack:"name"`
	Namespace   string `json:"namespace,omitempty" yaml:"namespace" msgpack:"namespace"`
	Description string `json:"description" yaml:"description" msgpack:"description"`
	// Title is the tool's human-readable name (MCP's title), optional.
	// Part of the contract: clients show it to users and models alike.
	Title string `json:"title,omitempty" yaml:"title" msgpack:"title,omitempty"`
	// Icons are MCP's icons for the tool (a JSON array of objects with a
	// src), optional. For display only: not part of the contract, so not
	// hashed, and no check depends on them.
	Icons json.RawMessage `json:"icons,omitempty" yaml:"-" msgpack:"icons,omitempty"`
	// InputSchema is a JSON Schema 2020-12 document whose type is "object".
	InputSchema json.RawMessage `json:"input_schema" yaml:"-" msgpack:"input_schema"`
	// OutputSchema is optional.
	OutputSchema json.RawMessage `json:"output_schema,omitempty" yaml:"-" msgpack:"output_schema"`
	// Annotations are advisory hints (for example readOnlyHint); a JSON object.
	Annotations json.RawMessage `json:"annotations,omitempty" yaml:"-" msgpack:"annotations"`
	// Capability is the dotted capability a grant must cover, e.g. "notion.search".
	Capability string `json:"capability" yaml:"capability" msgpack:"capability"`
	// Requirement is the resource template, e.g. "notion/workspace/{workspace}".
	Requirement string `json:"requirement" yaml:"requirement" msgpack:"requirement"`
	// Token is the provider's own opaque revision token for this contract,
	// sent back when the tool is invoked. Not part of the contract (and not
	// hashed): the node's Revision is computed from the contract itself.
	Token string `json:"token,omitempty" yaml:"-" msgpack:"token"`
}

// Limits bound what a provider may put in a definition. The discovery
// contract: a definition that exceeds them is refused whole, with a reason,
// never truncated — a broken contract is worse than a larger prompt.
type Limits struct {
	MaxSchemaBytes      int // per schema; default 64 KiB
	MaxSchemaDepth      int // JSON nesting; default 32
	MaxSchemaProperties int // "properties" entries across the schema; default 512
	MaxSchemaNodes      int // subschemas, each $ref counted as what it points at; default 2048
	MaxDescriptionBytes int // default 8 KiB
	MaxNameBytes        int // default 128
	MaxArgumentBytes    int // a call's arguments; default 256 KiB
	MaxArgumentDepth    int // default 32
}

// DefaultLimits returns the defaults documented on Limits.
func DefaultLimits() Limits {
	return Limits{
		MaxSchemaBytes: 64 << 10, MaxSchemaDepth: 32, MaxSchemaProperties: 512, MaxSchemaNodes: 2048,
		MaxDescriptionBytes: 8 << 10, MaxNameBytes: 128,
		MaxArgumentBytes: 256 << 10, MaxArgumentDepth: 32,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxSchemaBytes <= 0 {
		l.MaxSchemaBytes = d.MaxSchemaBytes
	}
	if l.MaxSchemaDepth <= 0 {
		l.MaxSchemaDepth = d.MaxSchemaDepth
	}
	if l.MaxSchemaProperties <= 0 {
		l.MaxSchemaProperties = d.MaxSchemaProperties
	}
	if l.MaxSchemaNodes <= 0 {
		l.MaxSchemaNodes = d.MaxSchemaNodes
	}
	if l.MaxDescriptionBytes <= 0 {
		l.MaxDescriptionBytes = d.MaxDescriptionBytes
	}
	if l.MaxNameBytes <= 0 {
		l.MaxNameBytes = d.MaxNameBytes
	}
	if l.MaxArgumentBytes <= 0 {
		l.MaxArgumentBytes = d.MaxArgumentBytes
	}
	if l.MaxArgumentDepth <= 0 {
		l.MaxArgumentDepth = d.MaxArgumentDepth
	}
	return l
}

// Tool is a normalized, immutable definition: the unit a Registry holds.
// Tools are shared between turns that resolved the same contract.
type Tool struct {
	Identity  Identity
	Namespace string
	// Contract is the canonical (RFC 8785) JSON of the whole contract,
	// identity included. Revision is its SHA-256, hex.
	Contract []byte
	Revision string

	Description  string
	Title        string          // "" when none
	Icons        json.RawMessage // canonical array, or nil; not in Contract
	InputSchema  json.RawMessage // canonical
	OutputSchema json.RawMessage // canonical, or nil
	Annotations  json.RawMessage // canonical object, "{}" when none
	Capability   string
	Requirement  Requirement
	// Token is the provider's revision token (Definition.Token); empty
	// for in-process providers, which are sent Revision.
	Token string

	schema *jsonschema.Schema
	limits Limits
}

// contract is the hashed shape. Field names are part of the revision
// format: change them and every revision changes.
type contract struct {
	V            int             `json:"v"`
	Provider     string          `json:"provider"`
	Name         string          `json:"name"`
	Namespace    string          `json:"namespace"`
	Description  string          `json:"description"`
	Title        string          `json:"title,omitempty"` // absent when empty: a contract without one hashes as before titles were hashed
	InputSchema  json.RawMessage `json:"input_schema"`
	OutputSchema json.RawMessage `json:"output_schema"`
	Annotations  json.RawMessage `json:"annotations"`
	Capability   string          `json:"capability"`
	Requirement  string          `json:"requirement"`
}

// Normalize validates a provider's definition against the limits and
// returns the Tool with its canonical contract and revision.
//
// The namespace defaults to the provider id. The description is trimmed of
// surrounding whitespace and has CRLF folded to LF — formatting, not
// meaning; everything else in the description is meaning and is hashed.
func Normalize(provider string, d Definition, lim Limits) (*Tool, error) {
	lim = lim.withDefaults()
	fail := func(kind error, format string, args ...any) (*Tool, error) {
		return nil, fmt.Errorf("%w: %s/%s: %s", kind, provider, d.Name, fmt.Sprintf(format, args...))
	}
	failed := func(where string, err error) (*Tool, error) {
		var r *refusal
		errors.As(err, &r)
		return fail(r.kind, "%s: %s", where, r.detail)
	}
	if err := checkName("provider", provider, lim.MaxNameBytes); err != nil {
		return fail(ErrName, "%v", err)
	}
	if err := checkName("name", d.Name, lim.MaxNameBytes); err != nil {
		return fail(ErrName, "%v", err)
	}
	ns := d.Namespace
	if ns == "" {
		ns = provider
	}
	if err := checkName("namespace", ns, lim.MaxNameBytes); err != nil {
		return fail(ErrName, "%v", err)
	}
	desc := strings.TrimSpace(strings.ReplaceAll(d.Description, "\r\n", "\n"))
	if len(desc) > lim.MaxDescriptionBytes {
		return fail(ErrDescription, "description is %d bytes, limit %d", len(desc), lim.MaxDescriptionBytes)
	}
	if !utf8.ValidString(desc) {
		return fail(ErrDescription, "description is not valid UTF-8")
	}
	title := strings.TrimSpace(d.Title)
	if len(title) > lim.MaxNameBytes*8 {
		return fail(ErrDescription, "title is %d bytes, limit %d", len(title), lim.MaxNameBytes*8)
	}
	if !utf8.ValidString(title) {
		return fail(ErrDescription, "title is not valid UTF-8")
	}
	var icons json.RawMessage
	if len(d.Icons) > 0 && string(d.Icons) != "null" {
		v, err := decodeJSON(d.Icons, lim.MaxSchemaBytes, lim.MaxSchemaDepth)
		if err != nil {
			return fail(ErrAnnotations, "icons: %v", err)
		}
		arr, ok := v.([]any)
		if !ok {
			return fail(ErrAnnotations, "icons must be a JSON array")
		}
		for _, ic := range arr {
			if m, ok := ic.(map[string]any); !ok || m["src"] == nil {
				return fail(ErrAnnotations, "each icon must be an object with a src")
			}
		}
		if icons, err = jcs.Transform(d.Icons); err != nil {
			return fail(ErrAnnotations, "icons: %v", err)
		}
	}
	if _, err := authority.ParseCapabilityPattern(d.Capability); err != nil || strings.Contains(d.Capability, "*") {
		return fail(ErrCapability, "capability %q is not a dotted name", d.Capability)
	}
	req, err := ParseRequirement(d.Requirement)
	if err != nil {
		return fail(ErrRequirement, "%v", err)
	}
	if d.Requirement == "" {
		return fail(ErrRequirement, "requirement template is empty; a tool that touches no particular resource declares a literal one")
	}

	in, inDoc, err := canonicalSchema(d.InputSchema, lim, true)
	if err != nil {
		return failed("input schema", err)
	}
	props, _ := inDoc.(map[string]any)["properties"].(map[string]any)
	for _, name := range req.Placeholders() {
		if _, ok := props[name]; !ok {
			return fail(ErrRequirement, "requirement placeholder {%s} is not a property of the input schema", name)
		}
	}
	var out json.RawMessage
	if len(d.OutputSchema) > 0 && string(d.OutputSchema) != "null" {
		if out, _, err = canonicalSchema(d.OutputSchema, lim, false); err != nil {
			return failed("output schema", err)
		}
	}
	ann := json.RawMessage("{}")
	if len(d.Annotations) > 0 && string(d.Annotations) != "null" {
		v, err := decodeJSON(d.Annotations, lim.MaxSchemaBytes, lim.MaxSchemaDepth)
		if err != nil {
			return fail(ErrAnnotations, "annotations: %v", err)
		}
		if _, ok := v.(map[string]any); !ok {
			return fail(ErrAnnotations, "annotations must be a JSON object")
		}
		if ann, err = jcs.Transform(d.Annotations); err != nil {
			return fail(ErrAnnotations, "annotations: %v", err)
		}
	}
	schema, err := compileSchema(inDoc)
	if err != nil {
		return fail(ErrSchemaCompile, "input schema does not compile: %v", err)
	}

	c := contract{V: 1, Provider: provider, Name: d.Name, Namespace: ns, Description: desc, Title: title,
		InputSchema: in, OutputSchema: out, Annotations: ann, Capability: d.Capability, Requirement: d.Requirement}
	if c.OutputSchema == nil {
		c.OutputSchema = json.RawMessage("null")
	}
	// Every field is valid UTF-8 JSON by now, so neither step can fail.
	raw, _ := json.Marshal(c)
	canon, _ := jcs.Transform(raw)
	sum := sha256.Sum256(canon)
	return &Tool{
		Identity: Identity{Provider: provider, Name: d.Name}, Namespace: ns,
		Contract: canon, Revision: hex.EncodeToString(sum[:]),
		Description: desc, Title: title, Icons: icons, InputSchema: in, OutputSchema: out, Annotations: ann,
		Capability: d.Capability, Requirement: req, Token: d.Token, schema: schema, limits: lim,
	}, nil
}

func checkName(what, s string, max int) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case len(s) > max:
		return fmt.Errorf("%s is %d bytes, limit %d", what, len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8", what)
	}
	for _, c := range s {
		if c <= ' ' || c == '/' || c == 0x7f {
			return fmt.Errorf("%s %q contains a space, control character or '/'", what, s)
		}
	}
	return nil
}

// Definition returns the tool's contract as a Definition again (canonical
// schemas), for transports that ship definitions on.
func (t *Tool) Definition() Definition {
	return Definition{
		Name: t.Identity.Name, Namespace: t.Namespace, Description: t.Description, Title: t.Title, Icons: t.Icons,
		InputSchema: t.InputSchema, OutputSchema: t.OutputSchema, Annotations: t.Annotations,
		Capability: t.Capability, Requirement: t.Requirement.String(), Token: t.Token,
	}
}
