package mcpprovider

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/gowebpki/jcs"

	"github.com/sharedos/sharedos/catalog"
)

// Tool is the normalized record of one discovered tool: a contract
// snapshot, identified by (Server, Name). Nothing in it comes from the
// server's self-description (serverInfo); Server is the configured id.
type Tool struct {
	Server       string
	Name         string
	Title        string
	Description  string
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage
	// Annotations are the server's hints, as sent. Advisory: they grant
	// nothing and bypass no check; ReadOnly only decides whether an
	// expired snapshot must be refreshed before a call (MCP's defaults: a
	// tool not annotated read-only may write, and may be destructive).
	Annotations json.RawMessage
	ReadOnly    bool
	Destructive bool

	DiscoveredAt    time.Time
	ProtocolVersion string
	// SourceRevision is the SHA-256 of the RFC 8785 form of the tool's
	// JSON exactly as tools/list sent it: a reformatted or key-reordered
	// tool keeps it, any change of meaning changes it.
	SourceRevision string

	// Definition is what the kernel is given (Token = SourceRevision);
	// Revision is the kernel's revision of it.
	Definition catalog.Definition
	Revision   string
}

// Refusal is a tool left out of a listing, and why.
type Refusal struct {
	Name   string
	Reason string
}

// wirePage is the part of a tools/list result the provider reads. Tools
// stay raw: each is hashed as sent and bounded before it is decoded.
type wirePage struct {
	Tools      []json.RawMessage `json:"tools"`
	NextCursor string            `json:"nextCursor"`
	TTLMs      *int64            `json:"ttlMs"`
	CacheScope string            `json:"cacheScope"`
}

type wireTool struct {
	Name         string          `json:"name"`
	Title        string          `json:"title"`
	Description  string          `json:"description"`
	Icons        json.RawMessage `json:"icons"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema"`
	Annotations  json.RawMessage `json:"annotations"`
}

type wireAnnotations struct {
	ReadOnlyHint    *bool  `json:"readOnlyHint"`
	DestructiveHint *bool  `json:"destructiveHint"`
	Title           string `json:"title"`
}

// listing is one complete tools/list answer, every page in order.
type listing struct {
	tools   []*Tool
	refused []Refusal
	// ttl is the smallest ttlMs of its pages (2026-07-28), or the
	// configured TTL (older revisions); scope is "public" or "private"
	// ("" before 2026-07-28).
	ttl   time.Duration
	scope string
	pages int
	bytes int
}

// errListing is a listing that cannot be taken at all (over a bound,
// undecodable): a malformed response, never an empty catalogue.
type errListing struct{ msg string }

func (e *errListing) Error() string { return e.msg }

// normalizer turns raw pages into tools. Pure: no I/O, no clock (the
// receipt time is given).
type normalizer struct {
	server      string
	capability  string
	requirement string
	limits      Limits
	schema      catalog.Limits
	fallbackTTL time.Duration
	authority   func(name string, raw json.RawMessage) (capability, requirement string, ok bool)
}

func newNormalizer(id string, c Config) *normalizer {
	return &normalizer{
		server: id, capability: c.Capability, requirement: c.Requirement, limits: c.Limits,
		schema:      catalog.Limits{MaxSchemaBytes: c.Limits.MaxSchemaBytes, MaxSchemaDepth: c.Limits.MaxSchemaDepth, MaxSchemaNodes: c.Limits.MaxSchemaNodes},
		fallbackTTL: time.Duration(c.TTL),
	}
}

// newProtocol reports whether a revision carries ttlMs/cacheScope.
func newProtocol(v string) bool { return v >= "2026-07-28" }

// build reads every page of one listing.
func (n *normalizer) build(pages []json.RawMessage, protocol string, at time.Time) (*listing, error) {
	l := &listing{pages: len(pages), ttl: n.fallbackTTL}
	if newProtocol(protocol) {
		l.ttl = -1
	}
	seen := map[string]bool{}
	count := 0
	for i, raw := range pages {
		var p wirePage
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, &errListing{fmt.Sprintf("page %d of tools/list does not decode: %v", i+1, err)}
		}
		if newProtocol(protocol) {
			ttl := time.Duration(0) // missing means 0
			if p.TTLMs != nil && *p.TTLMs > 0 {
				ttl = time.Duration(min(*p.TTLMs, int64(24*time.Hour/time.Millisecond))) * time.Millisecond
			}
			if l.ttl < 0 || ttl < l.ttl {
				l.ttl = ttl
			}
			scope := "public"
			if p.CacheScope == "private" {
				scope = "private"
			}
			if l.scope != "private" {
				l.scope = scope // one private page makes the whole listing private
			}
		}
		count += len(p.Tools)
		if count > n.limits.MaxTools {
			return nil, &errListing{fmt.Sprintf("tools/list has more than %d tools", n.limits.MaxTools)}
		}
		for _, rt := range p.Tools {
			l.bytes += len(rt)
			if l.bytes > n.limits.MaxCatalogBytes {
				return nil, &errListing{fmt.Sprintf("tools/list is more than %d bytes of tools", n.limits.MaxCatalogBytes)}
			}
			t, ref := n.tool(rt, protocol, at)
			if ref != nil {
				l.refused = append(l.refused, *ref)
				continue
			}
			if seen[t.Name] {
				l.refused = append(l.refused, Refusal{Name: t.Name, Reason: "listed twice; the first is kept"})
				continue
			}
			seen[t.Name] = true
			l.tools = append(l.tools, t)
		}
	}
	if l.ttl < 0 {
		l.ttl = 0
	}
	return l, nil
}

// tool validates one raw tool; a refusal names it (as far as it can be
// read) and says why.
func (n *normalizer) tool(raw json.RawMessage, protocol string, at time.Time) (*Tool, *Refusal) {
	if len(raw) > n.limits.MaxToolBytes {
		return nil, &Refusal{Name: peekName(raw), Reason: fmt.Sprintf("tool is %d bytes; limit %d", len(raw), n.limits.MaxToolBytes)}
	}
	var w wireTool
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, &Refusal{Name: peekName(raw), Reason: "tool does not decode: " + err.Error()}
	}
	if w.Name == "" {
		return nil, &Refusal{Reason: "tool has no name"}
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return nil, &Refusal{Name: w.Name, Reason: "tool is not canonicalizable JSON: " + err.Error()}
	}
	sum := sha256.Sum256(canon)
	var ann wireAnnotations
	if len(w.Annotations) > 0 && string(w.Annotations) != "null" {
		if err := json.Unmarshal(w.Annotations, &ann); err != nil {
			return nil, &Refusal{Name: w.Name, Reason: "annotations: " + err.Error()}
		}
	}
	readOnly := ann.ReadOnlyHint != nil && *ann.ReadOnlyHint
	destructive := !readOnly && (ann.DestructiveHint == nil || *ann.DestructiveHint)
	in, err := adaptDialect(w.InputSchema)
	if err != nil {
		return nil, &Refusal{Name: w.Name, Reason: "input schema: " + err.Error()}
	}
	out := w.OutputSchema
	if len(out) > 0 && string(out) != "null" {
		if out, err = adaptDialect(out); err != nil {
			return nil, &Refusal{Name: w.Name, Reason: "output schema: " + err.Error()}
		}
	}
	def := catalog.Definition{
		Name: w.Name, Namespace: n.server, Description: w.Description, Title: w.Title, Icons: w.Icons,
		InputSchema: in, OutputSchema: out, Annotations: w.Annotations,
		Capability:  n.capability + "." + capabilitySegment(w.Name),
		Requirement: strings.ReplaceAll(n.requirement, "{tool}", requirementSegment(w.Name)),
		Token:       hex.EncodeToString(sum[:]),
	}
	if n.authority != nil {
		c, r, ok := n.authority(w.Name, raw)
		if !ok {
			return nil, &Refusal{Name: w.Name, Reason: "no capability is configured for it"}
		}
		def.Capability, def.Requirement = c, r
	}
	if def.Description == "" {
		def.Description = w.Title
	}
	ct, err := catalog.Normalize(n.server, def, n.schema)
	if err != nil {
		return nil, &Refusal{Name: w.Name, Reason: strings.TrimPrefix(err.Error(), catalog.ErrInvalidDefinition.Error()+": ")}
	}
	return &Tool{
		Server: n.server, Name: w.Name, Title: w.Title, Description: w.Description,
		InputSchema: in, OutputSchema: out, Annotations: w.Annotations,
		ReadOnly: readOnly, Destructive: destructive, DiscoveredAt: at, ProtocolVersion: protocol,
		SourceRevision: def.Token, Definition: def, Revision: ct.Revision,
	}, nil
}

// capabilitySegment maps a tool name to one capability segment: a dot
// would start a new segment and '*' is a wildcard, so both become '_'.
func capabilitySegment(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '*' {
			return '_'
		}
		return r
	}, name)
}

// requirementSegment keeps a tool name from opening placeholders or
// path segments in the requirement template.
func requirementSegment(name string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '{', '}', '/', '*':
			return '_'
		}
		return r
	}, name)
}

// peekName reads a refused tool's name, if it has one that decodes.
func peekName(raw json.RawMessage) string {
	if len(raw) > 1<<20 {
		return ""
	}
	var w struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(raw, &w)
	if len(w.Name) > 128 {
		return w.Name[:128]
	}
	return w.Name
}
