package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

var jsonSeeds = []string{
	`{}`, `[]`, `{"a":1}`, ` { "a" : [ 1 , 2.5 , -3e+2 , 0.1E-2 , -0 , true , false , null ] } `,
	`{"a":{"b":{"c":[{}]}}}`, `"s"`, `12`, `-0.0`, `1E5`, `true`, `null`, `false`,
	`{"\u0041\n\t\"\\\/\b\f\r":"\ud83d\ude00"}`, `{"é":"日本"}`, `[1,[2,[3]]]`, `{"a":"b","c":"d"}`,
	// malformed
	``, ` `, `{`, `}`, `[`, `]`, `{"a"}`, `{"a":}`, `{"a":1,}`, `[1,]`, `{,}`, `[,1]`, `{"a" 1}`, `{"a":1 "b":2}`,
	`[1 2]`, `{1:2}`, `{'a':1}`, `tru`, `nul`, `fals`, `trUe`, `01`, `1.`, `.5`, `-`, `+1`, `1e`, `1e+`, `--1`,
	`0x10`, `1.5e3.2`, `"abc`, `"a` + "\x01" + `"`, `"\x"`, `"\u12"`, `"\u12g4"`, `"\`, `{"a":1}x`, `[]]`, `{}}`,
	`NaN`, `Infinity`, `"\ud800\u12"`, `"\ud800\`, `"\ud800\x"`, "\"a\tb\"", `{"a":[}`, `[{]`, `{"a":1`,
	// refused although encoding/json accepts
	`{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `[{"k":1,"k":1}]`, `"\ud800"`, `"\udfff"`, `"\ud800\u0041"`, "\"\xff\"",
	"\"\x80\"", "\"\xc3\"", "\"\\n\xff\"", "{\"\xff\":1}", `"\u00AA\u00aa\uFFFF"`, `"\uABCD\uEFab"`, `"\uDBFF\uDFFF"`, `"\uD800\uDC00"`, `"\ud800\ud800"`,
}

// jsonValue decodes as before this decoder existed (encoding/json with
// numbers kept), the reference for every input it also accepts.
func jsonValue(b []byte) (any, error) { return jsonschema.UnmarshalJSON(bytes.NewReader(b)) }

func checkDecode(t *testing.T, b []byte) {
	t.Helper()
	got, err := decodeJSON(b, 1<<20, 8)
	want, refErr := jsonValue(b)
	valid := json.Valid(b)
	if err == nil {
		if !valid || refErr != nil {
			t.Fatalf("%q: accepted, but encoding/json refuses it: %v", b, refErr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: decoded %#v, encoding/json %#v", b, got, want)
		}
		return
	}
	var je *jsonError
	if !errors.As(err, &je) {
		t.Fatalf("%q: error %v is not a jsonError", b, err)
	}
	if je.off < 0 || je.off > len(b) {
		t.Fatalf("%q: offset %d out of range", b, je.off)
	}
	if je.kind == jsonSyntax && valid {
		t.Fatalf("%q: refused as a syntax error but it is valid JSON: %v", b, err)
	}
}

func TestDecodeJSONMatchesEncodingJSON(t *testing.T) {
	for _, s := range jsonSeeds {
		checkDecode(t, []byte(s))
	}
	// Byte-level mutations of the seeds.
	rng := rand.New(rand.NewPCG(21, 22))
	alphabet := []byte(`{}[],:"\ 0123456789-+.eEtrufalsn` + "\xff\xc3\x01")
	for range 30000 {
		b := []byte(jsonSeeds[rng.IntN(len(jsonSeeds))])
		for range 1 + rng.IntN(3) {
			switch i := rng.IntN(len(b) + 1); rng.IntN(3) {
			case 0:
				b = append(b[:i], append([]byte{alphabet[rng.IntN(len(alphabet))]}, b[i:]...)...)
			case 1:
				if i < len(b) {
					b = append(b[:i], b[i+1:]...)
				}
			default:
				if i < len(b) {
					b[i] = alphabet[rng.IntN(len(alphabet))]
				}
			}
		}
		checkDecode(t, b)
	}
}

func TestDecodeJSONKinds(t *testing.T) {
	for raw, want := range map[string]jsonKind{
		`{"a":1,"a":2}`:      jsonDuplicate,
		`{"a":1,"\u0061":2}`: jsonDuplicate,
		`"\ud800"`:           jsonEncoding,
		`"\udc00"`:           jsonEncoding,
		"\"\xff\"":           jsonEncoding,
		"\"\\t\xff\"":        jsonEncoding,
		`[[[[[[[[[]]]]]]]]]`: jsonTooDeep,
		`{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{}}}}}}}}}`: jsonTooDeep,
		`{"a" 1}`: jsonSyntax,
		`"\q"`:    jsonSyntax,
	} {
		_, err := decodeJSON([]byte(raw), 1<<20, 8)
		var je *jsonError
		if !errors.As(err, &je) || je.kind != want {
			t.Errorf("%s: err = %v, want kind %d", raw, err, want)
		}
	}
	if _, err := decodeJSON([]byte(`[[[[[[[[]]]]]]]]`), 1<<20, 8); err != nil {
		t.Errorf("depth 8 refused at limit 8: %v", err)
	}
	if _, err := decodeJSON([]byte(`[1]`), 3, 8); err != nil {
		t.Errorf("3 bytes refused at limit 3: %v", err)
	}
	var je *jsonError
	if _, err := decodeJSON([]byte(`[1] `), 3, 8); !errors.As(err, &je) || je.kind != jsonTooLarge {
		t.Errorf("4 bytes at limit 3: %v", err)
	}
	_, err := decodeJSON([]byte(`{"ab":1,"ab":2}`), 100, 8)
	if !errors.As(err, &je) || je.off != 8 || !strings.Contains(err.Error(), `duplicate key "ab" at byte 8`) {
		t.Errorf("duplicate error does not point at the second key: %v", err)
	}
}

func FuzzDecodeJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkDecode(t, b) })
}
