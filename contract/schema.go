package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strings"

	"github.com/gowebpki/jcs"
)

// Relation is how the set of values one schema accepts relates to the set
// the previous one accepted. It is decided keyword by keyword: a schema
// accepts the intersection of what each of its keywords accepts, so when
// every keyword of the current schema accepts at least what the previous
// one's did, the current schema does too. Each verdict is sound — Wider is
// said only when every previously valid value is still valid — and what
// the comparison cannot decide is Changed, never guessed.
type Relation uint8

const (
	// Same: the same values are valid (descriptive keywords may differ).
	Same Relation = iota
	// Wider: every value valid before is valid now (and maybe more).
	Wider
	// Narrower: every value valid now was valid before (and maybe fewer
	// are): calls the model learned may now be refused.
	Narrower
	// Changed: neither could be shown.
	Changed
)

func (r Relation) String() string {
	switch r {
	case Same:
		return "same"
	case Wider:
		return "widened"
	case Narrower:
		return "narrowed"
	}
	return "changed"
}

// Inverse is the relation with the two schemas swapped.
func (r Relation) Inverse() Relation {
	switch r {
	case Wider:
		return Narrower
	case Narrower:
		return Wider
	}
	return r
}

// join combines two keywords' relations into the schema's.
func join(a, b Relation) Relation {
	switch {
	case a == b, b == Same:
		return a
	case a == Same:
		return b
	}
	return Changed
}

// MaxSchemaDepth bounds how deep CompareSchemas descends; a schema nested
// deeper is Changed below that depth. Normalized tools are nested at most
// catalog.Limits.MaxSchemaDepth (32) deep.
const MaxSchemaDepth = 64

// Detail is one structural difference between two schemas, at a JSON
// pointer into the schema (the keyword's parent), with its relation.
type Detail struct {
	Path     string
	What     string
	Relation Relation
}

func (d Detail) String() string {
	p := d.Path
	if p == "" {
		p = "/"
	}
	return fmt.Sprintf("%s: %s (%s)", p, d.What, d.Relation)
}

// CompareSchemas relates cur to prev (both JSON Schema 2020-12 documents,
// as a normalized tool holds them; nil or empty is "no schema", which
// accepts everything) and lists each structural difference. Only the
// keywords it understands are compared by meaning; any other keyword that
// differs, and any document that does not decode, makes it Changed.
func CompareSchemas(prev, cur json.RawMessage) (Relation, []Detail) {
	c := comparer{}
	r := c.compare("", prev, cur, 0)
	return r, c.details
}

type comparer struct {
	details []Detail
	// defsDiffer: the roots' $defs (or definitions) differ, so a $ref into
	// them is not the same schema on both sides.
	defsDiffer bool
}

func (c *comparer) note(path string, r Relation, format string, args ...any) Relation {
	if r != Same {
		c.details = append(c.details, Detail{Path: path, What: fmt.Sprintf(format, args...), Relation: r})
	}
	return r
}

// Descriptive keywords: they do not change which values are valid.
var descriptive = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "$comment": true,
	"deprecated": true, "readOnly": true, "writeOnly": true, "$schema": true,
	"contentMediaType": true, "contentEncoding": true, "contentSchema": true,
}

// Keywords compared by meaning below.
var understood = map[string]bool{
	"type": true, "enum": true, "const": true, "properties": true, "additionalProperties": true, "required": true,
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true,
	"minLength": true, "maxLength": true, "minItems": true, "maxItems": true, "minProperties": true, "maxProperties": true,
	"pattern": true, "format": true, "items": true, "uniqueItems": true, "multipleOf": true,
}

// schema is one decoded (sub)schema: a boolean schema, or its keywords.
type schema struct {
	boolean *bool
	kw      map[string]json.RawMessage
}

func decodeSchema(raw json.RawMessage) (schema, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		t := true
		return schema{boolean: &t}, true
	}
	switch string(raw) {
	case "true", "false":
		b := string(raw) == "true"
		return schema{boolean: &b}, true
	}
	var kw map[string]json.RawMessage
	if err := json.Unmarshal(raw, &kw); err != nil || kw == nil {
		return schema{}, false
	}
	return schema{kw: kw}, true
}

// universal: accepts every value (true, or only descriptive keywords).
func (s schema) universal() bool {
	if s.boolean != nil {
		return *s.boolean
	}
	for k := range s.kw {
		if !descriptive[k] {
			return false
		}
	}
	return true
}

func (s schema) empty() bool { return s.boolean != nil && !*s.boolean }

func canon(raw json.RawMessage) string {
	if b, err := jcs.Transform(raw); err == nil {
		return string(b)
	}
	return string(raw)
}

func (c *comparer) compare(path string, prevRaw, curRaw json.RawMessage, depth int) Relation {
	if bytes.Equal(bytes.TrimSpace(prevRaw), bytes.TrimSpace(curRaw)) {
		return Same
	}
	if depth > MaxSchemaDepth {
		return c.note(path, Changed, "nested deeper than %d: not compared", MaxSchemaDepth)
	}
	a, okA := decodeSchema(prevRaw)
	b, okB := decodeSchema(curRaw)
	switch {
	case !okA || !okB:
		return c.note(path, Changed, "a schema that does not decode")
	case a.universal() && b.universal():
		c.descriptive(path, a, b)
		return Same
	case a.empty() && b.empty():
		return Same
	case a.empty(), b.universal():
		c.descriptive(path, a, b)
		return c.note(path, Wider, "now accepts any value")
	case b.empty(), a.universal():
		c.descriptive(path, a, b)
		return c.note(path, Narrower, "was any value, now constrained")
	}
	if depth == 0 {
		if !localRefsOnly(prevRaw) || !localRefsOnly(curRaw) {
			return c.note(path, Changed, "a $ref outside $defs: not compared")
		}
		c.defsDiffer = canon(a.kw["$defs"]) != canon(b.kw["$defs"]) || canon(a.kw["definitions"]) != canon(b.kw["definitions"])
	}
	c.descriptive(path, a, b)
	r := Same
	// Keywords not understood: the same on both sides, or Changed.
	keys := map[string]bool{}
	for k := range a.kw {
		keys[k] = true
	}
	for k := range b.kw {
		keys[k] = true
	}
	for _, k := range sortedKeys(keys) {
		if understood[k] || descriptive[k] || (depth == 0 && (k == "$defs" || k == "definitions")) {
			continue
		}
		va, vb := a.kw[k], b.kw[k]
		if k == "$ref" && (c.defsDiffer || !localDef(va) || !localDef(vb)) && (va != nil || vb != nil) {
			r = join(r, c.note(path, Changed, "$ref %s → %s, into definitions that are not the same", show(va), show(vb)))
			continue
		}
		if canon(va) != canon(vb) {
			r = join(r, c.note(path, Changed, "%s %s → %s", k, show(va), show(vb)))
		}
	}
	if c.defsDiffer && depth == 0 {
		r = join(r, c.note(path, Changed, "$defs changed"))
	}
	// Keywords whose meaning depends on the others at this level.
	if a.kw["unevaluatedProperties"] != nil || b.kw["unevaluatedProperties"] != nil ||
		a.kw["unevaluatedItems"] != nil || b.kw["unevaluatedItems"] != nil {
		return c.note(path, Changed, "unevaluated keywords depend on the whole schema: not compared")
	}
	r = join(r, c.types(path, a, b))
	r = join(r, c.values(path, a, b))
	r = join(r, c.object(path, a, b, depth))
	r = join(r, c.bounds(path, a, b))
	r = join(r, c.strings(path, a, b))
	r = join(r, c.arrays(path, a, b, depth))
	return r
}

// descriptive notes a change of descriptive keywords (model-facing text
// inside a schema) without it affecting the relation.
func (c *comparer) descriptive(path string, a, b schema) {
	for _, k := range []string{"title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly", "$comment"} {
		if canon(a.kw[k]) != canon(b.kw[k]) {
			c.details = append(c.details, Detail{Path: path, What: fmt.Sprintf("%s %s → %s", k, show(a.kw[k]), show(b.kw[k])), Relation: Same})
		}
	}
}

// localRefsOnly: every $ref in the document points into its $defs (or
// definitions), which the root compares whole; a $ref elsewhere could
// point into a part that changed while the $ref itself did not.
func localRefsOnly(raw json.RawMessage) bool {
	doc := canon(raw)
	for {
		i := strings.Index(doc, `"$ref":"`)
		if i < 0 {
			return true
		}
		doc = doc[i+len(`"$ref":"`):]
		if !strings.HasPrefix(doc, "#/$defs/") && !strings.HasPrefix(doc, "#/definitions/") {
			return false
		}
	}
}

func localDef(ref json.RawMessage) bool {
	var s string
	if ref == nil {
		return true
	}
	if json.Unmarshal(ref, &s) != nil {
		return false
	}
	return strings.HasPrefix(s, "#/$defs/") || strings.HasPrefix(s, "#/definitions/")
}

// show is a keyword's value for a detail line, shortened.
func show(v json.RawMessage) string {
	if v == nil {
		return "(none)"
	}
	s := Visible(canon(v))
	if len(s) > 120 {
		s = s[:117] + "…"
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// subset relates two sets: cur ⊇ prev is Wider, cur ⊆ prev Narrower.
func subset(prevInCur, curInPrev bool) Relation {
	switch {
	case prevInCur && curInPrev:
		return Same
	case prevInCur:
		return Wider
	case curInPrev:
		return Narrower
	}
	return Changed
}

// Type masks. "number" covers integers and every other number.
const (
	tNull uint8 = 1 << iota
	tBool
	tObject
	tArray
	tString
	tInteger
	tFraction // a number that is not an integer
	tAll      = tNull | tBool | tObject | tArray | tString | tInteger | tFraction
)

func typeMask(raw json.RawMessage) (uint8, bool) {
	if raw == nil {
		return tAll, true
	}
	var names []string
	var one string
	if json.Unmarshal(raw, &one) == nil {
		names = []string{one}
	} else if json.Unmarshal(raw, &names) != nil {
		return 0, false
	}
	var m uint8
	for _, n := range names {
		switch n {
		case "null":
			m |= tNull
		case "boolean":
			m |= tBool
		case "object":
			m |= tObject
		case "array":
			m |= tArray
		case "string":
			m |= tString
		case "integer":
			m |= tInteger
		case "number":
			m |= tInteger | tFraction
		default:
			return 0, false
		}
	}
	return m, true
}

func (c *comparer) types(path string, a, b schema) Relation {
	ma, okA := typeMask(a.kw["type"])
	mb, okB := typeMask(b.kw["type"])
	if !okA || !okB {
		return c.note(path, Changed, "type %s → %s", show(a.kw["type"]), show(b.kw["type"]))
	}
	return c.note(path, subset(ma&^mb == 0, mb&^ma == 0), "type %s → %s", show(a.kw["type"]), show(b.kw["type"]))
}

// valueSet is what enum and const allow (nil: any value), as canonical
// JSON.
func valueSet(s schema) (map[string]bool, bool) {
	var set map[string]bool
	if raw := s.kw["enum"]; raw != nil {
		var vs []json.RawMessage
		if json.Unmarshal(raw, &vs) != nil {
			return nil, false
		}
		set = map[string]bool{}
		for _, v := range vs {
			set[canon(v)] = true
		}
	}
	if raw := s.kw["const"]; raw != nil {
		v := canon(raw)
		if set == nil || set[v] {
			set = map[string]bool{v: true}
		} else {
			set = map[string]bool{}
		}
	}
	return set, true
}

func (c *comparer) values(path string, a, b schema) Relation {
	sa, okA := valueSet(a)
	sb, okB := valueSet(b)
	switch {
	case !okA || !okB:
		return c.note(path, Changed, "enum that does not decode")
	case sa == nil && sb == nil:
		return Same
	case sa == nil:
		return c.note(path, Narrower, "values limited to %s", setString(sb))
	case sb == nil:
		return c.note(path, Wider, "values no longer limited (were %s)", setString(sa))
	}
	var added, removed []string
	for v := range sb {
		if !sa[v] {
			added = append(added, v)
		}
	}
	for v := range sa {
		if !sb[v] {
			removed = append(removed, v)
		}
	}
	slices.Sort(added)
	slices.Sort(removed)
	r := subset(len(removed) == 0, len(added) == 0)
	return c.note(path, r, "enum%s%s", listed(" +", added), listed(" −", removed))
}

func setString(s map[string]bool) string {
	return "[" + strings.Join(sortedKeys(s), ", ") + "]"
}

func listed(prefix string, vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	for i, v := range vs {
		vs[i] = Visible(v)
	}
	return prefix + "[" + strings.Join(vs, ", ") + "]"
}

func stringSet(raw json.RawMessage) (map[string]bool, bool) {
	set := map[string]bool{}
	if raw == nil {
		return set, true
	}
	var vs []string
	if json.Unmarshal(raw, &vs) != nil {
		return nil, false
	}
	for _, v := range vs {
		set[v] = true
	}
	return set, true
}

func objectOf(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	m := map[string]json.RawMessage{}
	if raw == nil {
		return m, true
	}
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return nil, false
	}
	return m, true
}

func pointer(path, token string) string {
	token = strings.ReplaceAll(strings.ReplaceAll(token, "~", "~0"), "/", "~1")
	return path + "/" + token
}

// object compares required, properties and additionalProperties: each
// property name is governed on each side by its properties entry, else by
// additionalProperties (absent: any value), and the names neither side
// lists by the two additionalProperties.
func (c *comparer) object(path string, a, b schema, depth int) Relation {
	ra, okRA := stringSet(a.kw["required"])
	rb, okRB := stringSet(b.kw["required"])
	pa, okPA := objectOf(a.kw["properties"])
	pb, okPB := objectOf(b.kw["properties"])
	if !okRA || !okRB || !okPA || !okPB {
		return c.note(path, Changed, "properties or required that do not decode")
	}
	r := Same
	var addedReq, droppedReq []string
	for n := range rb {
		if !ra[n] {
			addedReq = append(addedReq, n)
		}
	}
	for n := range ra {
		if !rb[n] {
			droppedReq = append(droppedReq, n)
		}
	}
	slices.Sort(addedReq)
	slices.Sort(droppedReq)
	if len(addedReq) > 0 {
		r = join(r, c.note(path, Narrower, "now required: %s", quoted(addedReq)))
	}
	if len(droppedReq) > 0 {
		r = join(r, c.note(path, Wider, "no longer required: %s", quoted(droppedReq)))
	}
	addA, addB := a.kw["additionalProperties"], b.kw["additionalProperties"]
	names := map[string]bool{}
	for n := range pa {
		names[n] = true
	}
	for n := range pb {
		names[n] = true
	}
	if pp := a.kw["patternProperties"]; pp != nil || b.kw["patternProperties"] != nil {
		// patternProperties govern names too: compared only when the
		// property names and additionalProperties are the same.
		if len(names) != len(pa) || len(names) != len(pb) || canon(addA) != canon(addB) {
			return join(r, c.note(path, Changed, "properties beside patternProperties changed: not compared"))
		}
	}
	for _, n := range sortedKeys(names) {
		sa, inA := pa[n]
		sb, inB := pb[n]
		p := pointer(path+"/properties", n)
		switch {
		case inA && inB:
			r = join(r, c.compare(p, sa, sb, depth+1))
		case inB:
			rel := c.quiet(sideOf(addA), sb, depth+1)
			opt := "optional"
			if rb[n] {
				opt = "required"
			}
			r = join(r, c.note(p, rel, "property %q added (%s)", Visible(n), opt))
		default:
			rel := c.quiet(sa, sideOf(addB), depth+1)
			r = join(r, c.note(p, rel, "property %q removed", Visible(n)))
		}
	}
	if canon(addA) != canon(addB) {
		rel := c.quiet(sideOf(addA), sideOf(addB), depth+1)
		r = join(r, c.note(path, rel, "additionalProperties %s → %s", show(addA), show(addB)))
	}
	return r
}

// sideOf is additionalProperties as a schema (absent: true).
func sideOf(raw json.RawMessage) json.RawMessage {
	if raw == nil {
		return json.RawMessage("true")
	}
	return raw
}

// quiet relates two subschemas without listing their inner differences
// (the caller names the change).
func (c *comparer) quiet(prev, cur json.RawMessage, depth int) Relation {
	inner := comparer{defsDiffer: c.defsDiffer}
	return inner.compare("", prev, cur, depth)
}

func quoted(ns []string) string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = fmt.Sprintf("%q", Visible(n))
	}
	return strings.Join(out, ", ")
}

// bound is a numeric bound; absent is unbounded.
type bound struct {
	set       bool
	v         *big.Rat
	exclusive bool
}

func ratOf(raw json.RawMessage) (*big.Rat, bool) {
	if raw == nil {
		return nil, true
	}
	r, ok := new(big.Rat).SetString(strings.TrimSpace(string(raw)))
	return r, ok
}

// tighter picks the tighter of an inclusive and an exclusive bound; lower
// says which end.
func tighter(incl, excl *big.Rat, lower bool) bound {
	switch {
	case incl == nil && excl == nil:
		return bound{}
	case incl == nil:
		return bound{true, excl, true}
	case excl == nil:
		return bound{true, incl, false}
	}
	cmp := excl.Cmp(incl)
	if cmp == 0 || (lower && cmp > 0) || (!lower && cmp < 0) {
		return bound{true, excl, true}
	}
	return bound{true, incl, false}
}

// relBound relates two bounds at one end: a looser bound now is Wider.
func relBound(a, b bound, lower bool) Relation {
	switch {
	case !a.set && !b.set:
		return Same
	case !a.set:
		return Narrower
	case !b.set:
		return Wider
	}
	cmp := b.v.Cmp(a.v) // cur against prev
	if !lower {
		cmp = -cmp
	}
	switch {
	case cmp < 0: // cur's bound is looser
		return Wider
	case cmp > 0:
		return Narrower
	case a.exclusive == b.exclusive:
		return Same
	case a.exclusive: // prev excluded the bound, cur includes it
		return Wider
	}
	return Narrower
}

func (b bound) String() string {
	if !b.set {
		return "none"
	}
	s := b.v.RatString()
	if b.exclusive {
		return "exclusive " + s
	}
	return s
}

func (c *comparer) bounds(path string, a, b schema) Relation {
	r := Same
	for _, end := range []struct {
		incl, excl string
		lower      bool
	}{{"minimum", "exclusiveMinimum", true}, {"maximum", "exclusiveMaximum", false}} {
		ia, ok1 := ratOf(a.kw[end.incl])
		ea, ok2 := ratOf(a.kw[end.excl])
		ib, ok3 := ratOf(b.kw[end.incl])
		eb, ok4 := ratOf(b.kw[end.excl])
		if !ok1 || !ok2 || !ok3 || !ok4 {
			r = join(r, c.note(path, Changed, "%s that does not decode", end.incl))
			continue
		}
		ba, bb := tighter(ia, ea, end.lower), tighter(ib, eb, end.lower)
		r = join(r, c.note(path, relBound(ba, bb, end.lower), "%s %s → %s", end.incl, ba, bb))
	}
	for _, k := range []struct {
		name  string
		lower bool
	}{{"minLength", true}, {"maxLength", false}, {"minItems", true}, {"maxItems", false}, {"minProperties", true}, {"maxProperties", false}} {
		va, ok1 := ratOf(a.kw[k.name])
		vb, ok2 := ratOf(b.kw[k.name])
		if !ok1 || !ok2 {
			r = join(r, c.note(path, Changed, "%s that does not decode", k.name))
			continue
		}
		ba, bb := bound{va != nil, va, false}, bound{vb != nil, vb, false}
		// A minimum of 0 is no bound.
		if k.lower && ba.set && ba.v.Sign() <= 0 {
			ba = bound{}
		}
		if k.lower && bb.set && bb.v.Sign() <= 0 {
			bb = bound{}
		}
		r = join(r, c.note(path, relBound(ba, bb, k.lower), "%s %s → %s", k.name, ba, bb))
	}
	ma, ok1 := ratOf(a.kw["multipleOf"])
	mb, ok2 := ratOf(b.kw["multipleOf"])
	switch {
	case !ok1 || !ok2:
		r = join(r, c.note(path, Changed, "multipleOf that does not decode"))
	case ma == nil && mb == nil:
	case ma == nil:
		r = join(r, c.note(path, Narrower, "multipleOf %s added", mb.RatString()))
	case mb == nil:
		r = join(r, c.note(path, Wider, "multipleOf %s removed", ma.RatString()))
	case ma.Cmp(mb) != 0 && mb.Sign() != 0 && ma.Sign() != 0:
		rel := Changed
		if new(big.Rat).Quo(ma, mb).IsInt() { // every multiple of prev is one of cur
			rel = Wider
		} else if new(big.Rat).Quo(mb, ma).IsInt() {
			rel = Narrower
		}
		r = join(r, c.note(path, rel, "multipleOf %s → %s", ma.RatString(), mb.RatString()))
	}
	return r
}

// presence relates a keyword that constrains when present and is
// compared only for equality otherwise (pattern, format).
func (c *comparer) presence(path, k string, a, b schema) Relation {
	va, vb := a.kw[k], b.kw[k]
	switch {
	case canon(va) == canon(vb):
		return Same
	case va == nil:
		return c.note(path, Narrower, "%s %s added", k, show(vb))
	case vb == nil:
		return c.note(path, Wider, "%s %s removed", k, show(va))
	}
	return c.note(path, Changed, "%s %s → %s", k, show(va), show(vb))
}

func (c *comparer) strings(path string, a, b schema) Relation {
	return join(c.presence(path, "pattern", a, b), c.presence(path, "format", a, b))
}

func (c *comparer) arrays(path string, a, b schema, depth int) Relation {
	r := c.compare(path+"/items", a.kw["items"], b.kw["items"], depth+1)
	ua, ub := string(a.kw["uniqueItems"]) == "true", string(b.kw["uniqueItems"]) == "true"
	switch {
	case !ua && ub:
		r = join(r, c.note(path, Narrower, "uniqueItems added"))
	case ua && !ub:
		r = join(r, c.note(path, Wider, "uniqueItems removed"))
	}
	return r
}
