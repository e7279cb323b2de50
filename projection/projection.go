package projection

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gowebpki/jcs"

	"github.com/sharedos/sharedos/catalog"
)

// ErrProfile is returned for a profile Project does not know.
var ErrProfile = errors.New("projection: unknown profile")

// ErrOptions is returned for options that cannot be honoured (an unknown
// encoding, a negative budget).
var ErrOptions = errors.New("projection: invalid options")

// Listed is one tool of a listing: the held tool (never nil) and the
// alias the turn shows it under (catalog.Registry.Alias). It has the
// shape of turn.Listed, so a turn's listing converts element by element:
// projection.Listed(l).
type Listed struct {
	Alias string
	Tool  *catalog.Tool
	// ModelName, when set, is the model-facing name to show the tool
	// under instead of one assigned from this listing alone — a turn
	// assigns its names once over its whole held catalogue (Aliases), so
	// that a name means one tool for the turn whatever each listing
	// shows. Either every tool of a listing has one or none has; each must
	// follow the profile's name rules and be unique in the listing.
	ModelName string
}

// Options tune one projection. The zero value is valid.
type Options struct {
	// Budget, when positive, bounds Projection.Tokens: tools are left out
	// from the end of the listing (the caller's ranking) until the rest
	// fits. A schema is never cut.
	Budget int
	// Encoding is the OpenAI encoding tokens are counted in:
	// "o200k_base" (the default; gpt-4o, gpt-4.1, o-series) or
	// "cl100k_base" (gpt-4, gpt-3.5-turbo).
	Encoding string
	// Cache, when set, keeps each tool's translation and token count
	// across projections; nil translates every tool each time.
	Cache *Cache
	// Bounds this package applies to every schema before and while
	// walking it, whatever the catalogue checked: bytes (default 64 KiB),
	// JSON nesting and subschema nesting (default 32), subschemas visited
	// with each $ref expanded (default 2048).
	MaxSchemaBytes, MaxSchemaDepth, MaxSchemaNodes int
}

// The OpenAI encodings Options.Encoding and CountTokens take.
const (
	EncodingO200k  = "o200k_base"
	EncodingCL100k = "cl100k_base"
)

func (o Options) bounds() bounds {
	b := bounds{maxBytes: o.MaxSchemaBytes, maxDepth: o.MaxSchemaDepth, maxNodes: o.MaxSchemaNodes}
	if b.maxBytes <= 0 {
		b.maxBytes = 64 << 10
	}
	if b.maxDepth <= 0 {
		b.maxDepth = 32
	}
	if b.maxNodes <= 0 {
		b.maxNodes = 2048
	}
	return b
}

// Projection is a listing as one profile's model sees it.
type Projection struct {
	Profile Profile
	// Tools are the emitted tools, in listing order.
	Tools []Tool
	// Unrepresentable are the tools the profile cannot express without
	// changing what they accept, in listing order, with every reason.
	Unrepresentable []Unrepresentable
	// OverLimit are the representable tools left out because the
	// profile's documented per-request limits (anthropic-strict: 20 strict
	// tools, 24 optional properties and 16 anyOf or type-array schemas in
	// all) were reached; OverBudget those left out for Options.Budget.
	// Both in listing order: once a tool does not fit, every later tool is
	// left out with it, so what is emitted is a prefix of the ranking.
	OverLimit  []catalog.Identity
	OverBudget []catalog.Identity
	// Listing is the JSON array of the emitted tools, each in the
	// profile's shape (the value of OpenAI's and Anthropic's "tools", of
	// Gemini's "functionDeclarations", of an MCP tools/list result's
	// "tools"). Hash is its hex SHA-256: the projection_hash.
	Listing json.RawMessage
	Hash    string
	// Tokens is the sum of the emitted tools' Tokens; TokenMethod says how
	// they were counted: an OpenAI encoding's name, or "estimate".
	Tokens      int
	TokenMethod string

	byAlias map[string]catalog.Identity
}

// Tool is one emitted tool.
type Tool struct {
	// Alias is the model-facing name: valid under the profile's name
	// rules, unique in the projection; Lookup maps it back.
	Alias    string
	Identity catalog.Identity
	Revision string
	// JSON is the tool in the profile's shape, RFC 8785 canonical.
	JSON json.RawMessage
	// Tokens is the count of JSON in Projection.TokenMethod.
	Tokens int
}

// Unrepresentable is a tool left out because the profile cannot express
// its schema without changing what it accepts.
type Unrepresentable struct {
	Tool    catalog.Identity `json:"tool"`
	Reasons []Reason         `json:"reasons"`
}

// Lookup returns the identity behind a model-facing alias of this
// projection.
func (p *Projection) Lookup(alias string) (catalog.Identity, bool) {
	id, ok := p.byAlias[alias]
	return id, ok
}

// Project translates the visible held tools of a turn, in listing order,
// into profile's form. Tools the profile cannot represent are reported,
// never weakened; with a budget, the tail that does not fit is reported.
// Project is pure: the same tools, profile and options give a
// byte-identical Listing. It fails only on an unknown profile or invalid
// options; it may be called concurrently (a shared Cache is safe).
func Project(tools []Listed, profile Profile, opts Options) (Projection, error) {
	rules, ok := profiles[profile]
	if !ok {
		return Projection{}, fmt.Errorf("%w: %q", ErrProfile, profile)
	}
	method, err := tokenMethod(profile, opts.Encoding)
	if err != nil {
		return Projection{}, err
	}
	if opts.Budget < 0 {
		return Projection{}, fmt.Errorf("%w: negative budget", ErrOptions)
	}
	aliases, err := listingAliases(tools, rules.names)
	if err != nil {
		return Projection{}, err
	}
	proj := Projection{Profile: profile, TokenMethod: method, byAlias: make(map[string]catalog.Identity, len(tools))}
	b := opts.bounds()
	var used requestLimits
	size := 2
	proj.Tools = make([]Tool, 0, len(tools))
	for i, l := range tools {
		e := opts.Cache.entry(cacheKey{revision: l.Tool.Revision, profile: profile, alias: aliases[i], method: method, bounds: b}, func() *entry {
			return build(l.Tool, aliases[i], rules, method, b)
		})
		if len(e.reasons) > 0 {
			proj.Unrepresentable = append(proj.Unrepresentable, Unrepresentable{Tool: l.Tool.Identity, Reasons: e.reasons})
			continue
		}
		switch {
		case len(proj.OverBudget) > 0:
			proj.OverBudget = append(proj.OverBudget, l.Tool.Identity)
			continue
		case len(proj.OverLimit) > 0 || rules.request != nil && !used.fits(e, rules.request):
			proj.OverLimit = append(proj.OverLimit, l.Tool.Identity)
			continue
		case opts.Budget > 0 && proj.Tokens+e.tokens > opts.Budget:
			proj.OverBudget = append(proj.OverBudget, l.Tool.Identity)
			continue
		}
		used.add(e)
		size += len(e.json) + 1
		proj.Tokens += e.tokens
		proj.Tools = append(proj.Tools, Tool{Alias: aliases[i], Identity: l.Tool.Identity, Revision: l.Tool.Revision, JSON: e.json, Tokens: e.tokens})
		proj.byAlias[aliases[i]] = l.Tool.Identity
	}
	listing := make([]byte, 0, size)
	listing = append(listing, '[')
	for i, t := range proj.Tools {
		if i > 0 {
			listing = append(listing, ',')
		}
		listing = append(listing, t.JSON...)
	}
	proj.Listing = append(listing, ']')
	sum := sha256.Sum256(proj.Listing)
	proj.Hash = hex.EncodeToString(sum[:])
	return proj, nil
}

// Aliases assigns the model-facing names of tools under profile's name
// rules, indexed as tools: unique, a function of tools alone. A turn calls
// it once per profile over its whole held catalogue and passes the names
// in Listed.ModelName, so they stay stable for the turn.
func Aliases(tools []Listed, profile Profile) ([]string, error) {
	rules, ok := profiles[profile]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrProfile, profile)
	}
	return assignAliases(tools, rules.names), nil
}

// listingAliases is the listing's names: the given ones, checked, or
// assigned from the listing.
func listingAliases(tools []Listed, r nameRules) ([]string, error) {
	given := 0
	for _, l := range tools {
		if l.ModelName != "" {
			given++
		}
	}
	if given == 0 {
		return assignAliases(tools, r), nil
	}
	if given != len(tools) {
		return nil, fmt.Errorf("%w: %d of %d tools have a model name: all or none", ErrOptions, given, len(tools))
	}
	out := make([]string, len(tools))
	seen := make(map[string]bool, len(tools))
	for i, l := range tools {
		n := l.ModelName
		if len(n) > r.max || fit(n, r) != n || seen[n] {
			return nil, fmt.Errorf("%w: model name %q is not a valid, unique name of the profile", ErrOptions, n)
		}
		seen[n] = true
		out[i] = n
	}
	return out, nil
}

func (u *requestLimits) fits(e *entry, max *requestLimits) bool {
	within := func(n, bound int) bool { return bound == 0 || n <= bound }
	return within(u.tools+1, max.tools) && within(u.optional+e.optional, max.optional) && within(u.unions+e.unions, max.unions)
}

func (u *requestLimits) add(e *entry) {
	u.tools++
	u.optional += e.optional
	u.unions += e.unions
}

// envelope is what a profile's per-tool shape is built from.
type envelope struct {
	name, title, description string
	input                    any // translated schema, or json.RawMessage
	output, annotations      json.RawMessage
}

func fn(e envelope, schemaField string, strict bool) map[string]any {
	m := map[string]any{"name": e.name, schemaField: e.input}
	if e.description != "" {
		m["description"] = e.description
	}
	if strict {
		m["strict"] = true
	}
	return m
}

func mcpEnvelope(e envelope) any {
	m := fn(e, "inputSchema", false)
	if e.title != "" {
		m["title"] = e.title
	}
	if len(e.output) > 0 {
		m["outputSchema"] = e.output
	}
	if len(e.annotations) > 0 && string(e.annotations) != "{}" {
		m["annotations"] = e.annotations
	}
	return m
}

// toolTitle is the MCP title the provider gave in its annotations, if any.
func toolTitle(t *catalog.Tool) string {
	if len(t.Annotations) == 0 || len(t.Annotations) > 64<<10 {
		return ""
	}
	var a struct {
		Title string `json:"title"`
	}
	if json.Unmarshal(t.Annotations, &a) != nil {
		return ""
	}
	return a.Title
}

// build translates one tool: its canonical bytes and token count, or why
// it is unrepresentable.
func build(t *catalog.Tool, alias string, rules *profileRules, method string, b bounds) *entry {
	e := envelope{name: alias, title: toolTitle(t), description: t.Description, output: t.OutputSchema, annotations: t.Annotations}
	if r := checkRoot(t, rules, b); r != nil {
		return &entry{reasons: r}
	}
	var counts translated
	if rules.subset {
		counts = translate(rules, t.InputSchema, b)
		if len(counts.reasons) > 0 {
			return &entry{reasons: counts.reasons}
		}
		e.input = counts.schema
	} else {
		if r := checkRaw(t, b); r != nil {
			return &entry{reasons: []Reason{*r}}
		}
		e.input = json.RawMessage(t.InputSchema)
	}
	raw, err := marshal(rules.envelope(e))
	if err != nil {
		return &entry{reasons: []Reason{{Path: "", Reason: ReasonMalformed}}}
	}
	return &entry{json: raw, tokens: countTokens(method, raw), optional: counts.optional, unions: counts.unions}
}

// checkRoot applies the API's refusals at the root of a tool's schemas:
// rootForbids on the input schema and, for MCP, an output schema whose
// type is not "object" (the protocol's outputSchema is an object schema).
func checkRoot(t *catalog.Tool, rules *profileRules, b bounds) []Reason {
	var reasons []Reason
	if len(rules.rootForbids) > 0 && checkShape(t.InputSchema, b) == nil {
		var root map[string]json.RawMessage
		if json.Unmarshal(t.InputSchema, &root) == nil {
			for _, kw := range rules.rootForbids {
				if _, ok := root[kw]; ok {
					reasons = append(reasons, Reason{Keyword: kw, Path: "", Reason: ReasonUnsupported})
				}
			}
		}
	}
	if rules.outputObject && len(t.OutputSchema) > 0 && checkShape(t.OutputSchema, b) == nil {
		var head struct {
			Type any `json:"type"`
		}
		if json.Unmarshal(t.OutputSchema, &head) != nil || head.Type != "object" {
			reasons = append(reasons, Reason{Keyword: "outputSchema", Path: "", Reason: ReasonValue})
		}
	}
	return reasons
}

// checkRaw bounds the schemas a pass-through profile emits as they are:
// the input schema must be an object schema of type "object", the output
// schema (when present) an object; both within the bounds.
func checkRaw(t *catalog.Tool, b bounds) *Reason {
	if r := checkShape(t.InputSchema, b); r != nil {
		return r
	}
	var head struct {
		Type any `json:"type"`
	}
	if json.Unmarshal(t.InputSchema, &head) != nil || head.Type != "object" {
		return &Reason{Keyword: "type", Path: "", Reason: ReasonMalformed}
	}
	if len(t.OutputSchema) > 0 {
		if r := checkShape(t.OutputSchema, b); r != nil {
			return r
		}
		if bytes.TrimSpace(t.OutputSchema)[0] != '{' {
			return &Reason{Keyword: "outputSchema", Path: "", Reason: ReasonMalformed}
		}
	}
	return nil
}

// marshal encodes v as RFC 8785 canonical JSON: object keys sorted,
// arrays (required, enum, anyOf, …) in the order given.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return jcs.Transform(bytes.TrimRight(buf.Bytes(), "\n"))
}
