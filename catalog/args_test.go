package catalog_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/sharedos/sharedos/catalog"
)

func openTool(t testing.TB, lim catalog.Limits) *catalog.Tool {
	t.Helper()
	tl, err := catalog.Normalize("x", catalog.Definition{Name: "get", Namespace: "x", Description: "d",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`),
		Capability:  "x.get", Requirement: "x/items/{id}"}, lim)
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

// lastWins reads JSON as encoding/json does: a repeated key's last value.
func lastWins(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

// firstWins reads JSON keeping a repeated key's first value, as some
// providers' parsers do.
func firstWins(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var read func() (any, error)
	read = func() (any, error) {
		tok, err := d.Token()
		if err != nil {
			return nil, err
		}
		switch tok {
		case json.Delim('{'):
			m := map[string]any{}
			for d.More() {
				k, err := d.Token()
				if err != nil {
					return nil, err
				}
				v, err := read()
				if err != nil {
					return nil, err
				}
				if _, seen := m[k.(string)]; !seen {
					m[k.(string)] = v
				}
			}
			_, err := d.Token()
			return m, err
		case json.Delim('['):
			a := []any{}
			for d.More() {
				v, err := read()
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := d.Token()
			return a, err
		}
		return tok, nil
	}
	return read()
}

// Issue #10: a principal granted x/items/mine sent {"id":"other","id":"mine"}.
// The node read "mine" and authorized it, a first-wins provider acts on
// "other". Such arguments are now refused.
func TestDuplicateKeysAreRefused(t *testing.T) {
	tl := openTool(t, catalog.Limits{})
	attack := []byte(`{"id":"other","id":"mine"}`)
	f, _ := firstWins(attack)
	l, _ := lastWins(attack)
	if reflect.DeepEqual(f, l) {
		t.Fatal("the two readers agree on the attack; the test proves nothing")
	}
	for _, raw := range []string{
		`{"id":"other","id":"mine"}`,
		`{"id":"other","\u0069d":"mine"}`,
		`{"id":"mine","x":{"a":1,"b":2,"a":3}}`,
		`{"id":"mine","x":[{"a":1},{"a":1,"a":1}]}`,
		`{"id":"mine","id":"mine"}`,
	} {
		_, err := tl.ParseArguments([]byte(raw))
		if !errors.Is(err, catalog.ErrArgumentsDuplicateKey) || !errors.Is(err, catalog.ErrInvalidArguments) {
			t.Errorf("%s: err = %v, want ErrArgumentsDuplicateKey", raw, err)
		}
	}
}

func TestArgumentsEncodingIsRefused(t *testing.T) {
	tl := openTool(t, catalog.Limits{})
	for _, raw := range []string{
		"{\"id\":\"\xff\"}",
		"{\"id\":\"a\xc3\"}",
		"{\"id\":\"ok\",\"\xed\xa0\x80\":1}", // a surrogate encoded as UTF-8
		`{"id":"\ud800"}`,
		`{"id":"\udc00x"}`,
		`{"id":"\ud800\u0041"}`,
		`{"id":"\ud800\ud800"}`,
		`{"id":"\ud800"`,
		"{\"id\":\"\\u00e9\xff\"}",
	} {
		if _, err := tl.ParseArguments([]byte(raw)); !errors.Is(err, catalog.ErrArgumentsEncoding) {
			t.Errorf("%q: err = %v, want ErrArgumentsEncoding", raw, err)
		}
	}
	args, err := tl.ParseArguments([]byte(`{"id":"\ud83d\ude00 caf\u00e9 é \"\\\/\b\f\n\r\t"}`))
	if err != nil || args["id"] != "😀 café é \"\\/\b\f\n\r\t" {
		t.Fatalf("valid escapes: %q, %v", args["id"], err)
	}
}

func TestArgumentsLimitsAndShape(t *testing.T) {
	tl := openTool(t, catalog.Limits{MaxArgumentBytes: 40, MaxArgumentDepth: 3})
	for name, c := range map[string]struct {
		raw  string
		want error
	}{
		"41 bytes":       {`{"id":"` + strings.Repeat("x", 32) + `"}`, catalog.ErrArgumentsTooLarge},
		"depth 4":        {`{"id":"a","x":[[{}]]}`, catalog.ErrArgumentsTooDeep},
		"depth 4 array":  {`{"id":"a","x":[[[]]]}`, catalog.ErrArgumentsTooDeep},
		"not an object":  {`["a"]`, catalog.ErrArgumentsMalformed},
		"malformed":      {`{"id":`, catalog.ErrArgumentsMalformed},
		"trailing data":  {`{"id":"a"} {}`, catalog.ErrArgumentsMalformed},
		"schema":         {`{"id":7}`, catalog.ErrArgumentsSchema},
		"missing":        {`{}`, catalog.ErrArgumentsSchema},
		"empty means {}": {``, catalog.ErrArgumentsSchema},
	} {
		_, err := tl.ParseArguments([]byte(c.raw))
		if !errors.Is(err, c.want) || !errors.Is(err, catalog.ErrInvalidArguments) {
			t.Errorf("%s: err = %v, want %v", name, err, c.want)
		}
	}
	for _, raw := range []string{`{"id":"` + strings.Repeat("x", 31) + `"}`, `{"id":"a","x":[[]]}`, " {\"id\":\"a\"}\n"} {
		if _, err := tl.ParseArguments([]byte(raw)); err != nil {
			t.Errorf("%s (at the limits): %v", raw, err)
		}
	}
}

// Property: whatever ParseArguments accepts, a first-wins and a last-wins
// reader read the same, and it is what ParseArguments returned; whatever
// they read differently, it refused.
func TestNoAmbiguityRemains(t *testing.T) {
	tl := openTool(t, catalog.Limits{})
	rng := rand.New(rand.NewPCG(11, 12))
	keys := []string{`"id"`, `"\u0069d"`, `"a"`, `"b"`, `"\u0061"`}
	var gen func(depth int) string
	gen = func(depth int) string {
		switch n := rng.IntN(6); {
		case n == 0 && depth < 4:
			var parts []string
			for range rng.IntN(4) {
				parts = append(parts, keys[rng.IntN(len(keys))]+":"+gen(depth+1))
			}
			return "{" + strings.Join(parts, ",") + "}"
		case n == 1 && depth < 4:
			var parts []string
			for range rng.IntN(3) {
				parts = append(parts, gen(depth+1))
			}
			return "[" + strings.Join(parts, ",") + "]"
		case n == 2:
			return fmt.Sprint(rng.IntN(100))
		default:
			return []string{`"mine"`, `"other"`, `null`, `true`}[rng.IntN(4)]
		}
	}
	differ, accepted := 0, 0
	for range 3000 {
		var parts []string
		for range 1 + rng.IntN(4) {
			parts = append(parts, keys[rng.IntN(len(keys))]+":"+gen(1))
		}
		raw := []byte("{" + strings.Join(parts, ",") + "}")
		f, errF := firstWins(raw)
		l, errL := lastWins(raw)
		if errF != nil || errL != nil {
			t.Fatalf("generator made invalid JSON %s", raw)
		}
		args, err := tl.ParseArguments(raw)
		if !reflect.DeepEqual(f, l) {
			differ++
			if err == nil {
				t.Fatalf("%s: accepted, but first-wins reads %v and last-wins %v", raw, f, l)
			}
			continue
		}
		if err == nil {
			accepted++
			if !reflect.DeepEqual(map[string]any(args), l) {
				t.Fatalf("%s: ParseArguments read %v, readers %v", raw, args, l)
			}
		}
	}
	if differ < 100 || accepted < 100 {
		t.Fatalf("generator too tame: %d ambiguous, %d accepted", differ, accepted)
	}
}
