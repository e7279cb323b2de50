package messages

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A msgpack array laid out like a message's fields is not a message: the
// requests that run calls (turn.open, op.invoke, a turn's invoke) refuse
// it. The same fields as a map are accepted. (The arrays are what msgpack
// writes for array-encoded structs when these were all the fields;
// TestArrayEncodedMessagesAreRefusedEverywhere covers the current ones.)
func TestArrayShapedRequestsAreRefusedLiteralBytes(t *testing.T) {
	const (
		access     = "96 a461636d65 a3616461 a0 a0 c0 c0"                         // ["acme", "ada", "", "", nil, nil]
		turnAccess = "96 a461636d65 a3616461 a0 a46e312e74 c0 c0"                 // ["acme", "ada", "", "n1.t", nil, nil]
		mapAccess  = "82 a674656e616e74 a461636d65 a97072696e636970616c a3616461" // {"tenant": "acme", "principal": "ada"}
		mapTurn    = "83 a674656e616e74 a461636d65 a97072696e636970616c a3616461 a47475726e a46e312e74"
	)
	acc := Access{Tenant: "acme", Principal: "ada"}
	turn := Access{Tenant: "acme", Principal: "ada", TurnID: "n1.t"}
	cases := []struct {
		name       string
		want       Message
		array, obj string
	}{
		{"turn.open", &OpenRequest{V: 1, Access: acc},
			"93 01" + access + "ce00000000",
			"82 a176 01 a6616363657373" + mapAccess},
		{"op.invoke", &InvokeRequest{V: 1, Access: acc, Tool: "notes_get", Args: []byte("{}")},
			"95 01" + access + "a96e6f7465735f676574 c4027b7d ce00000000",
			"84 a176 01 a6616363657373" + mapAccess + "a4746f6f6c a96e6f7465735f676574 a461726773 c4027b7d"},
		{"turn invoke", &InvokeRequest{V: 1, Access: turn, Tool: "notes_get", Args: []byte("{}")},
			"95 01" + turnAccess + "a96e6f7465735f676574 c4027b7d ce00000000",
			"84 a176 01 a6616363657373" + mapTurn + "a4746f6f6c a96e6f7465735f676574 a461726773 c4027b7d"},
		{"turn list", &TurnRequest{V: 1, Access: turn},
			"93 01" + turnAccess + "ce00000000",
			"82 a176 01 a6616363657373" + mapTurn},
		{"turn close", &CloseRequest{V: 1, Access: turn, LeaseID: "l"},
			"94 01" + turnAccess + "a16c ce00000000",
			"83 a176 01 a6616363657373" + mapTurn + "a56c65617365 a16c"},
		{"update_namespaces", &UpdateNamespacesRequest{V: 1, Access: turn, Namespaces: []string{"x"}},
			"94 01" + turnAccess + "91a178 ce00000000",
			"83 a176 01 a6616363657373" + mapTurn + "aa6e616d65737061636573 91a178"},
		{"provider catalog", &ProviderCatalogRequest{V: 1, Access: acc},
			"94 01" + access + "ce00000000 a0",
			"82 a176 01 a6616363657373" + mapAccess},
	}
	for _, c := range cases {
		arr, obj := unhex(t, c.array), unhex(t, c.obj)
		if err := Decode(arr, fresh(c.want), DefaultLimits()); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: array frame %x accepted (%v)", c.name, arr, err)
		}
		m := fresh(c.want)
		if err := Decode(obj, m, DefaultLimits()); err != nil {
			t.Errorf("%s: map frame refused: %v", c.name, err)
			continue
		}
		if !reflect.DeepEqual(m, c.want) {
			t.Errorf("%s: the map frame decodes to %+v, want %+v", c.name, m, c.want)
		}
	}
}

// allMessages is every message type with a value that fills its nested
// structs, so each nested struct appears in the frame.
func allMessages() []Message {
	acc := Access{Tenant: "acme", Principal: "ada", TurnID: "n1.t", Namespaces: []string{"x"}, Attributes: map[string]string{"a": "b"}}
	e := &Error{Code: "provider_error", Message: "m"}
	return []Message{
		&OpenRequest{V: 1, Access: acc, TimeoutMs: 5},
		&OpenReply{V: 1, Error: e, Node: "n1"},
		&TurnRequest{V: 1, Access: acc},
		&ListRequest{V: 1, Access: acc, Cursor: "c"},
		&ListReply{V: 1, Error: e, CatalogHash: "h", Tools: []Tool{{Alias: "x_a", Name: "a", InputSchema: []byte(`{}`)}},
			Degraded: []ProviderFailure{{Provider: "p", Status: "failed"}}},
		&NamespacesReply{V: 1, Error: e, Namespaces: []Namespace{{Name: "x", Enabled: true, Tools: 2}}},
		&UpdateNamespacesRequest{V: 1, Access: acc, Namespaces: []string{"x"}},
		&AckReply{V: 1, Error: e},
		&InvokeRequest{V: 1, Access: acc, Tool: "x_a", Args: []byte(`{}`)},
		&InvokeReply{V: 1, Error: e, Text: "t"},
		&CloseRequest{V: 1, Access: acc, LeaseID: "l"},
		&ProviderCatalogRequest{V: 1, Access: acc},
		&ProviderCatalogReply{V: 1, Error: e, Tools: []ProviderTool{{Name: "a", InputSchema: []byte(`{}`), Revision: "r"}}},
		&ProviderInvokeRequest{V: 1, Access: acc, CallID: "c", Tool: "a", Revision: "r"},
		&ProviderInvokeReply{V: 1, Error: e, Text: "t"},
	}
}

func encodeWith(t testing.TB, m any, arrays bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseArrayEncodedStructs(arrays)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(m); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func fresh(m Message) Message { return reflect.New(reflect.TypeOf(m).Elem()).Interface().(Message) }

// Every message, requests and replies of both protocols, through the fast
// path or the reflective one: array-encoded (top level and nested) is
// refused, map-encoded is accepted.
func TestArrayEncodedMessagesAreRefusedEverywhere(t *testing.T) {
	for _, m := range allMessages() {
		name := reflect.TypeOf(m).Elem().Name()
		if err := Decode(encodeWith(t, m, false), fresh(m), DefaultLimits()); err != nil {
			t.Errorf("%s as a map: %v", name, err)
		}
		arr := encodeWith(t, m, true)
		if err := msgpack.Unmarshal(arr, fresh(m)); err != nil {
			t.Fatalf("%s: msgpack does not read its own array encoding: %v", name, err)
		}
		if err := Decode(arr, fresh(m), DefaultLimits()); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s as an array: %v, want ErrMalformed", name, err)
		}
	}
}

// A map at the top with a nested struct (access, error, a tools entry) as
// an array is refused too; so are keys that are not str.
func TestNestedArraysAndNonStringKeysAreRefused(t *testing.T) {
	cases := []struct {
		name  string
		mk    func() Message
		frame string
	}{
		{"access as array", func() Message { return &OpenRequest{} },
			"82 a176 01 a6616363657373 96 a461636d65 a3616461 a0 a0 c0 c0"},
		{"access as ext", func() Message { return &OpenRequest{} },
			"82 a176 01 a6616363657373 c7 16 00 82 a674656e616e74 a161 a97072696e636970616c a162"},
		{"access as string", func() Message { return &InvokeRequest{} },
			"82 a176 01 a6616363657373 a178"},
		{"error as array", func() Message { return &AckReply{} },
			"82 a176 01 a56572726f72 92 a1 78 a1 79"},
		{"error as array (provider reply)", func() Message { return &ProviderInvokeReply{} },
			"82 a176 01 a56572726f72 92 a1 78 a1 79"},
		{"tools entry as array", func() Message { return &ProviderCatalogReply{} },
			"82 a176 01 a5746f6f6c73 91 99 a161 a0 a0 c4017b c0 c0 a0 a0 a172"},
		{"tools as map", func() Message { return &ProviderCatalogReply{} },
			"82 a176 01 a5746f6f6c73 81 a161 80"},
		{"listed tool as array", func() Message { return &ListReply{} },
			"82 a176 01 a5746f6f6c73 91 99 a161 a0 a0 a0 a0 a0 c4017b c0 c0"},
		{"degraded provider as array", func() Message { return &ListReply{} },
			"82 a176 01 b270726f7669646572735f6465677261646564 91 94 a170 a6 6661696c6564 a0 a0"},
		{"list request access as array", func() Message { return &ListRequest{} },
			"82 a176 01 a6616363657373 96 a461636d65 a3616461 a0 a46e312e74 c0 c0"},
		{"namespace as array", func() Message { return &NamespacesReply{} },
			"82 a176 01 aa6e616d65737061636573 91 93 a178 c3 02"},
		{"bin key", func() Message { return &InvokeRequest{} },
			"82 c40176 01 a4746f6f6c a174"},
		{"integer key", func() Message { return &OpenReply{} },
			"82 a176 01 00 a178"},
		{"nil key", func() Message { return &TurnRequest{} },
			"82 a176 01 c0 a178"},
		{"bin key in access", func() Message { return &InvokeRequest{} },
			"82 a176 01 a6616363657373 81 c406 74656e616e74 a161"},
		{"bin key in attributes", func() Message { return &TurnRequest{} },
			"82 a176 01 a6616363657373 81 aa61747472696275746573 81 c4016b a176"},
		{"attributes as array", func() Message { return &TurnRequest{} },
			"82 a176 01 a6616363657373 81 aa61747472696275746573 92 a16b a176"},
		{"top-level nil", func() Message { return &AckReply{} }, "c0"},
		{"top-level string", func() Message { return &AckReply{} }, "a178"},
		{"top-level ext holding a map", func() Message { return &AckReply{} }, "d6 00 81 a176 01"},
	}
	for _, c := range cases {
		if err := Decode(unhex(t, c.frame), c.mk(), DefaultLimits()); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", c.name, err)
		}
	}
}

// What the rule leaves alone: nil for a nested struct, unknown keys with
// any value (arrays, maps with integer keys), str8/str16 keys.
func TestShapeAcceptsWhatTheProtocolAllows(t *testing.T) {
	cases := []struct {
		name  string
		mk    func() Message
		frame string
	}{
		{"nil error", func() Message { return &AckReply{} }, "82 a176 01 a56572726f72 c0"},
		{"nil tools", func() Message { return &ListReply{} }, "82 a176 01 a5746f6f6c73 c0"},
		{"unknown key holding an array and a map with int keys", func() Message { return &AckReply{} },
			"83 a176 01 a3787878 92 01 02 a3797979 81 01 c4 02 7b7d"},
		{"str8 key", func() Message { return &AckReply{} }, "81 d901 76 01"},
		{"map16 header", func() Message { return &AckReply{} }, "de0001 da0001 76 01"},
	}
	for _, c := range cases {
		if err := Decode(unhex(t, c.frame), c.mk(), DefaultLimits()); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

func TestShapeCheckDoesNotAllocate(t *testing.T) {
	for _, m := range allMessages() {
		frame := encodeWith(t, m, false)
		_ = checkShape(frame, m) // builds the type's shape once
		if n := testing.AllocsPerRun(100, func() { _ = checkShape(frame, m) }); n != 0 {
			t.Errorf("%T: %v allocations", m, n)
		}
	}
}

// checkShape stays bounded and panic-free on frames Guard never saw.
func FuzzShape(f *testing.F) {
	for _, m := range allMessages() {
		f.Add(encodeWith(f, m, false))
		f.Add(encodeWith(f, m, true))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, m := range allMessages() {
			_ = checkShape(b, fresh(m))
		}
	})
}

// Unknown keys' values are stepped over whatever their length format:
// str, bin and ext of every width (and fixext). Each is accepted whole
// and refused when its payload is one byte short.
func TestShapeSkipsEveryLengthFormat(t *testing.T) {
	payload := func(n int) []byte { return bytes.Repeat([]byte{'x'}, n) }
	values := map[string][]byte{
		"str8":     append([]byte{0xd9, 3}, payload(3)...),
		"str16":    append([]byte{0xda, 0, 3}, payload(3)...),
		"str32":    append([]byte{0xdb, 0, 0, 0, 3}, payload(3)...),
		"bin8":     append([]byte{0xc4, 3}, payload(3)...),
		"bin16":    append([]byte{0xc5, 0, 3}, payload(3)...),
		"bin32":    append([]byte{0xc6, 0, 0, 0, 3}, payload(3)...),
		"fixext4":  append([]byte{0xd6, 1}, payload(4)...),
		"ext8":     append([]byte{0xc7, 3, 1}, payload(3)...),
		"ext16":    append([]byte{0xc8, 0, 3, 1}, payload(3)...),
		"ext32":    append([]byte{0xc9, 0, 0, 0, 3, 1}, payload(3)...),
		"fixarray": {0x92, 0xd9, 1, 'x', 0xc5, 0, 1, 'y'},
	}
	for name, v := range values {
		// {"v": 1, "zz": <value>}: an AckReply with an unknown key last.
		frame := append([]byte{0x82, 0xa1, 'v', 0x01, 0xa2, 'z', 'z'}, v...)
		if err := checkShape(frame, &AckReply{}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if err := checkShape(frame[:len(frame)-1], &AckReply{}); err == nil {
			t.Errorf("%s one byte short: accepted", name)
		}
	}
}
