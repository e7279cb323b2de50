package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sharedos/sharedos/catalog"
)

// Contract is a tool's normalized contract, as catalog.Normalize hashes
// it (the JSON field names are the catalogue's contract format).
type Contract struct {
	Provider     string          `json:"provider"`
	Name         string          `json:"name"`
	Namespace    string          `json:"namespace"`
	Title        string          `json:"title,omitempty"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema"`
	OutputSchema json.RawMessage `json:"output_schema"`
	Annotations  json.RawMessage `json:"annotations"`
	Capability   string          `json:"capability"`
	Requirement  string          `json:"requirement"`
}

// MaxContractBytes bounds a contract decoded by Decode.
const MaxContractBytes = 512 << 10

// Of is t's contract.
func Of(t *catalog.Tool) Contract {
	return Contract{
		Provider: t.Identity.Provider, Name: t.Identity.Name, Namespace: t.Namespace, Title: t.Title,
		Description: t.Description, InputSchema: t.InputSchema, OutputSchema: nullable(t.OutputSchema),
		Annotations: t.Annotations, Capability: t.Capability, Requirement: t.Requirement.String(),
	}
}

func nullable(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

// Decode reads a contract in the catalogue's contract format (a
// catalog.Tool's Contract bytes), bounded.
func Decode(b []byte) (Contract, error) {
	var c Contract
	if len(b) > MaxContractBytes {
		return c, fmt.Errorf("contract: %d bytes, more than %d", len(b), MaxContractBytes)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("contract: %w", err)
	}
	if c.Provider == "" || c.Name == "" {
		return c, errors.New("contract: no provider or name")
	}
	return c, nil
}

// Class is one kind of difference between a tool's accepted contract and
// the one its provider offers now.
type Class string

// The classes, in the order a Change lists them.
const (
	// New: no contract of the tool was accepted before.
	New Class = "new"
	// Removed: the provider no longer offers the tool.
	Removed Class = "removed"
	// TitleChanged, DescriptionChanged: the model-facing text changed.
	TitleChanged       Class = "title_changed"
	DescriptionChanged Class = "description_changed"
	// InputWidened: every argument valid before is still valid.
	InputWidened Class = "input_widened"
	// InputNarrowed: every argument valid now was valid before, not all
	// of them are: calls the model learned may be refused.
	InputNarrowed Class = "input_narrowed"
	// InputChanged: the input schema changed in a way that is neither
	// (or cannot be decided structurally).
	InputChanged Class = "input_changed"
	// InputTextChanged: the input schema's descriptive keywords
	// (descriptions, titles, defaults, examples) changed, not what is
	// valid: model-facing text all the same.
	InputTextChanged Class = "input_text_changed"
	// OutputChanged: the output schema changed (Change.Output says how).
	OutputChanged Class = "output_changed"
	// AnnotationsChanged: the annotations changed (Change.RiskierHints
	// names the hints that now claim less safety).
	AnnotationsChanged Class = "annotations_changed"
	// BindingChanged: the capability, requirement template or namespace
	// changed: what grants the tool needs.
	BindingChanged Class = "binding_changed"
)

// Classes lists every class in order.
func Classes() []Class {
	return []Class{New, Removed, TitleChanged, DescriptionChanged, InputWidened, InputNarrowed, InputChanged,
		InputTextChanged, OutputChanged, AnnotationsChanged, BindingChanged}
}

// Change is the classification of one tool's contract change.
type Change struct {
	// Classes is empty when nothing changed; in Classes order.
	Classes []Class `json:"classes"`
	// Input and Output relate the schemas (Same when unchanged).
	Input  Relation `json:"-"`
	Output Relation `json:"-"`
	// InputDetails and OutputDetails list the schemas' differences.
	InputDetails  []Detail `json:"-"`
	OutputDetails []Detail `json:"-"`
	// Annotations lists each annotation whose value changed.
	Annotations []AnnotationChange `json:"-"`
	// RiskierHints names the MCP hints whose change claims less safety:
	// readOnlyHint true → false, destructiveHint false → true,
	// idempotentHint true → false, openWorldHint false → true (absent
	// read as MCP's default).
	RiskierHints []string `json:"riskier_hints,omitempty"`
}

// Unchanged reports whether the contracts are the same.
func (c Change) Unchanged() bool { return len(c.Classes) == 0 }

// Has reports whether c includes class k.
func (c Change) Has(k Class) bool { return slices.Contains(c.Classes, k) }

func (c Change) String() string {
	if c.Unchanged() {
		return "unchanged"
	}
	s := make([]string, len(c.Classes))
	for i, k := range c.Classes {
		s[i] = string(k)
	}
	return strings.Join(s, ",")
}

// AnnotationChange is one annotation's canonical JSON before and after
// ("" when absent).
type AnnotationChange struct {
	Key, From, To string
}

// Classify classifies the change from prev (nil: none accepted) to cur
// (nil: the tool is gone). It is pure and deterministic: schemas are
// compared structurally (CompareSchemas), never by bytes.
func Classify(prev, cur *Contract) Change {
	var ch Change
	add := func(k Class) { ch.Classes = append(ch.Classes, k) }
	switch {
	case prev == nil && cur == nil:
		return ch
	case prev == nil:
		add(New)
		return ch
	case cur == nil:
		add(Removed)
		return ch
	}
	if prev.Title != cur.Title {
		add(TitleChanged)
	}
	if prev.Description != cur.Description {
		add(DescriptionChanged)
	}
	ch.Input, ch.InputDetails = CompareSchemas(prev.InputSchema, cur.InputSchema)
	switch ch.Input {
	case Wider:
		add(InputWidened)
	case Narrower:
		add(InputNarrowed)
	case Changed:
		add(InputChanged)
	}
	if ch.Input != Changed && hasDescriptive(ch.InputDetails) {
		add(InputTextChanged)
	}
	outPrev, outCur := schemaOrNil(prev.OutputSchema), schemaOrNil(cur.OutputSchema)
	if canon(outPrev) != canon(outCur) {
		ch.Output, ch.OutputDetails = CompareSchemas(outPrev, outCur)
		add(OutputChanged)
	}
	ch.Annotations, ch.RiskierHints = compareAnnotations(prev.Annotations, cur.Annotations)
	if len(ch.Annotations) > 0 {
		add(AnnotationsChanged)
	}
	if prev.Capability != cur.Capability || prev.Requirement != cur.Requirement || prev.Namespace != cur.Namespace {
		add(BindingChanged)
	}
	return ch
}

func hasDescriptive(ds []Detail) bool {
	for _, d := range ds {
		if d.Relation == Same {
			return true
		}
	}
	return false
}

func schemaOrNil(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}

// MCP's hint defaults: a tool may write, may destroy, is not idempotent
// and reaches an open world unless it says otherwise.
var hintDefaults = map[string]bool{"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false, "openWorldHint": true}

// safeWhen is the value of each hint that claims more safety.
var safeWhen = map[string]bool{"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}

func compareAnnotations(prev, cur json.RawMessage) ([]AnnotationChange, []string) {
	pa, okA := objectOf(schemaOrNil(prev))
	pb, okB := objectOf(schemaOrNil(cur))
	if !okA || !okB {
		return []AnnotationChange{{Key: "(all)", From: canon(prev), To: canon(cur)}}, nil
	}
	keys := map[string]bool{}
	for k := range pa {
		keys[k] = true
	}
	for k := range pb {
		keys[k] = true
	}
	var changes []AnnotationChange
	var riskier []string
	for _, k := range sortedKeys(keys) {
		var from, to string
		if v, ok := pa[k]; ok {
			from = canon(v)
		}
		if v, ok := pb[k]; ok {
			to = canon(v)
		}
		if from == to {
			continue
		}
		changes = append(changes, AnnotationChange{Key: k, From: from, To: to})
		if def, hint := hintDefaults[k]; hint && hintValue(from, def) == safeWhen[k] && hintValue(to, def) != safeWhen[k] {
			riskier = append(riskier, k)
		}
	}
	return changes, riskier
}

// hintValue reads a boolean hint; absent or not a boolean is its default.
func hintValue(v string, def bool) bool {
	switch v {
	case "true":
		return true
	case "false":
		return false
	}
	return def
}
