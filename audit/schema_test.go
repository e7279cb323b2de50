package audit_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/sharedos/sharedos/audit"
)

// schemaDoc reads docs/schemas/<name>.schema.json as plain JSON.
func schemaDoc(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../docs/schemas", name+".schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return doc
}

// jsonFields are the JSON names of rt's fields.
func jsonFields(rt reflect.Type) []string {
	var out []string
	for i := range rt.NumField() {
		if name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// auditStruct is the audit package's struct type a field of type ft
// holds (through a pointer or a slice), or nil.
func auditStruct(ft reflect.Type) reflect.Type {
	for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
		ft = ft.Elem()
	}
	if ft.Kind() == reflect.Struct && ft.PkgPath() == reflect.TypeOf(audit.Event{}).PkgPath() {
		return ft
	}
	return nil
}

// matchSchema checks that every property of the object schema obj is a
// field of rt (extra names the properties written beside the struct),
// recursing into the audit types rt's fields hold, and records in seen
// which fields of each type some schema names.
func matchSchema(t *testing.T, where string, obj map[string]any, rt reflect.Type, extra []string, seen map[reflect.Type]map[string]bool) {
	t.Helper()
	props, _ := obj["properties"].(map[string]any)
	if seen[rt] == nil {
		seen[rt] = map[string]bool{}
	}
	byName := map[string]reflect.StructField{}
	for i := range rt.NumField() {
		if name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ","); name != "" {
			byName[name] = rt.Field(i)
		}
	}
	for name, p := range props {
		f, ok := byName[name]
		if !ok {
			if !slices.Contains(extra, name) {
				t.Errorf("%s: property %q is no field of audit.%s", where, name, rt.Name())
			}
			continue
		}
		seen[rt][name] = true
		if sub := auditStruct(f.Type); sub != nil {
			ps, _ := p.(map[string]any)
			if items, ok := ps["items"].(map[string]any); ok {
				ps = items
			}
			matchSchema(t, where+"."+name, ps, sub, nil, seen)
		}
	}
}

// The schemas and the Go event types agree both ways: every property a
// schema names is a field of the Go type it describes, and every field of
// every Go type is named by some schema of a type that carries it; the
// close reasons the schema allows are exactly audit.CloseReasons; and an
// event carrying each optional field the node may set on it (caller,
// transport, every close reason) validates.
func TestSchemasMatchTheGoTypes(t *testing.T) {
	seen := map[reflect.Type]map[string]bool{}
	for _, ty := range audit.Types() {
		matchSchema(t, string(ty), schemaDoc(t, string(ty)), reflect.TypeOf(audit.Event{}), nil, seen)
	}
	// The signature is appended to the checkpoint's canonical bytes, not
	// a field of the struct.
	matchSchema(t, string(audit.CheckpointType), schemaDoc(t, string(audit.CheckpointType)), reflect.TypeOf(audit.Checkpoint{}), []string{"sig"}, seen)
	types := map[reflect.Type]bool{}
	for rt := range seen { // every audit type a schema reaches, listed below or not
		types[rt] = true
	}
	for _, typ := range []any{audit.Event{}, audit.Catalog{}, audit.Tool{}, audit.ProviderStatus{}, audit.Call{}, audit.Close{}, audit.Lease{}, audit.PolicyChange{}, audit.Checkpoint{}, audit.TurnHead{}} {
		types[reflect.TypeOf(typ)] = true
	}
	for rt := range types {
		for _, name := range jsonFields(rt) {
			if !seen[rt][name] {
				t.Errorf("audit.%s's field %q is in no schema under docs/schemas", rt.Name(), name)
			}
		}
	}

	closeSchema := schemaDoc(t, string(audit.TurnClosed))["properties"].(map[string]any)["close"].(map[string]any)
	var enum []string
	for _, r := range closeSchema["properties"].(map[string]any)["reason"].(map[string]any)["enum"].([]any) {
		enum = append(enum, r.(string))
	}
	if got, want := slices.Sorted(slices.Values(enum)), slices.Sorted(slices.Values(audit.CloseReasons())); !slices.Equal(got, want) {
		t.Errorf("turn.closed's schema allows the reasons %v; the code has %v", got, want)
	}
	doc, err := os.ReadFile("../docs/audit.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range audit.CloseReasons() {
		if !bytes.Contains(doc, []byte(r)) {
			t.Errorf("docs/audit.md does not name the close reason %s", r)
		}
	}

	// Real records, each given what the node may add to its type.
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	compile := func(name string) *jsonschema.Schema {
		path, _ := filepath.Abs(filepath.Join("../docs/schemas", name+".schema.json"))
		s, err := c.Compile(path)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := map[audit.Type]*audit.Event{}
	for _, raw := range theTrail(t).recs {
		if audit.IsCheckpoint(raw) {
			continue
		}
		var ev audit.Event
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatal(err)
		}
		if first[ev.Type] == nil {
			first[ev.Type] = &ev
		}
	}
	variants := map[audit.Type][]func(*audit.Event){
		audit.TurnOpened:    {func(e *audit.Event) { e.Caller = "runtime" }},
		audit.TurnAttached:  {func(e *audit.Event) { e.Caller = "runtime" }},
		audit.CatalogListed: {func(e *audit.Event) { e.Transport = "mcp" }},
		audit.ToolInvoked:   {func(e *audit.Event) { e.Transport = "mcp" }},
		audit.ToolCompleted: {func(e *audit.Event) { e.Transport = "mcp" }},
	}
	for _, r := range audit.CloseReasons() {
		variants[audit.TurnClosed] = append(variants[audit.TurnClosed], func(e *audit.Event) { e.Close.Reason = r })
	}
	for ty, vs := range variants {
		s := compile(string(ty))
		for _, v := range vs {
			ev := *first[ty]
			if ev.Close != nil {
				cl := *ev.Close
				ev.Close = &cl
			}
			v(&ev)
			rec, err := audit.Encode(&ev)
			if err != nil {
				t.Fatal(err)
			}
			inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(rec.Data))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Validate(inst); err != nil {
				t.Errorf("%s does not validate: %v\n%s", ty, err, rec.Data)
			}
		}
	}
	// A close reason the code does not have is refused.
	ev := *first[audit.TurnClosed]
	ev.Close = &audit.Close{Reason: "vanished", Steps: ev.Close.Steps, Events: ev.Close.Events}
	rec, _ := audit.Encode(&ev)
	inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(rec.Data))
	if compile(string(audit.TurnClosed)).Validate(inst) == nil {
		t.Error("turn.closed's schema accepts a close reason the code does not have")
	}
}
