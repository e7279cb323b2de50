package catalog_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sharedos/sharedos/catalog"
)

func TestRequirementTemplates(t *testing.T) {
	for tmpl, want := range map[string][]string{
		"notion/search":             nil,
		"x/{a}":                     {"a"},
		"{a}/{b-2}/{c_3}/lit":       {"a", "b-2", "c_3"},
		"x/{é}":                     {"é"},
		"notion/workspace/{w}/page": {"w"},
	} {
		r, err := catalog.ParseRequirement(tmpl)
		if err != nil || r.String() != tmpl || !reflect.DeepEqual(r.Placeholders(), want) {
			t.Errorf("%q: %v, %q, %v", tmpl, r.Placeholders(), r.String(), err)
		}
	}
	for _, bad := range []string{"x/{", "x/}", "x/}{a}", "x/{a}}", "x/{}", "x/{a b}", "x/{.a}", "x/{a/b}", "{a}{", "a}b{c}"} {
		if _, err := catalog.ParseRequirement(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestRequirementResolve(t *testing.T) {
	r, err := catalog.ParseRequirement("x/{a}/items/{b}")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"a": "acme", "b": "7"}, "x/acme/items/7"},
		{map[string]any{"a": json.Number("42"), "b": json.Number("-3")}, "x/42/items/-3"},
		{map[string]any{"a": "..x", "b": strings.Repeat("b", 256)}, "x/..x/items/" + strings.Repeat("b", 256)},
	} {
		if got, err := r.Resolve(c.args); err != nil || got != c.want {
			t.Errorf("%v: %q, %v", c.args, got, err)
		}
	}
	for name, args := range map[string]map[string]any{
		"missing":       {"a": "acme"},
		"fraction":      {"a": json.Number("4.5"), "b": "x"},
		"huge":          {"a": json.Number("99999999999999999999"), "b": "x"},
		"bool":          {"a": true, "b": "x"},
		"object":        {"a": map[string]any{}, "b": "x"},
		"257 bytes":     {"a": strings.Repeat("a", 257), "b": "x"},
		"dot":           {"a": ".", "b": "x"},
		"dotdot":        {"a": "x", "b": ".."},
		"slash":         {"a": "a/b", "b": "x"},
		"control":       {"a": "a\nb", "b": "x"},
		"control first": {"a": "\x00b", "b": "x"},
		"empty":         {"a": "", "b": "x"},
	} {
		if got, err := r.Resolve(args); err == nil {
			t.Errorf("%s: resolved to %q", name, got)
		}
	}
	lit, _ := catalog.ParseRequirement("notion/search")
	if got, err := lit.Resolve(nil); err != nil || got != "notion/search" {
		t.Errorf("literal: %q, %v", got, err)
	}
	if got, err := (catalog.Requirement{}).Resolve(nil); err != nil || got != "" {
		t.Errorf("zero value: %q, %v", got, err)
	}
}

// A schema's refusal is quoted, bounded: a model cannot make the node build
// an unbounded error message.
func TestArgumentSchemaErrorIsBounded(t *testing.T) {
	props := []string{`"workspace":{"type":"string"}`}
	var args []string
	for i := range 200 {
		props = append(props, `"property_with_a_long_name_`+strings.Repeat("x", i%7)+string(rune('a'+i%26))+`_`+strings.Repeat("y", i/26)+`":{"type":"integer"}`)
		args = append(args, `"property_with_a_long_name_`+strings.Repeat("x", i%7)+string(rune('a'+i%26))+`_`+strings.Repeat("y", i/26)+`":"s"`)
	}
	d := searchDef()
	d.InputSchema = json.RawMessage(`{"type":"object","properties":{` + strings.Join(props, ",") + `}}`)
	tl := mustTool(t, "notion", d)
	_, err := tl.ParseArguments([]byte(`{` + strings.Join(args, ",") + `}`))
	if !errors.Is(err, catalog.ErrArgumentsSchema) {
		t.Fatalf("err = %v", err)
	}
	prefix := catalog.ErrArgumentsSchema.Error() + ": "
	if msg := err.Error(); !strings.HasSuffix(msg, "…") || len(msg) != len(prefix)+1024+len("…") {
		t.Fatalf("message is %d bytes: %.80q…", len(msg), msg)
	}
}
