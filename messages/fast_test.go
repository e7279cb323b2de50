package messages

import (
	"bytes"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// fastTypes are the messages with a reflection-free path, each with a
// constructor of a fresh value.
var fastTypes = []func() fastMessage{
	func() fastMessage { return &OpenRequest{} },
	func() fastMessage { return &OpenReply{} },
	func() fastMessage { return &TurnRequest{} },
	func() fastMessage { return &AckReply{} },
	func() fastMessage { return &InvokeRequest{} },
	func() fastMessage { return &InvokeReply{} },
	func() fastMessage { return &CloseRequest{} },
	func() fastMessage { return &ProviderInvokeRequest{} },
	func() fastMessage { return &ProviderInvokeReply{} },
}

// reflective is msgpack.Marshal with sorted map keys: the same bytes as
// msgpack.Marshal whenever a value has no map of two or more entries, and
// one of msgpack.Marshal's possible outputs otherwise (it writes map
// entries in Go's iteration order).
func reflective(t testing.TB, m any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(m); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// filler makes random values that hit every length boundary of the
// msgpack formats.
type filler struct{ r *rand.Rand }

func (f filler) length() int {
	lens := []int{0, 0, 1, 5, 15, 16, 31, 32, 100, 255, 256, 1000, 65535, 65536, 70000}
	if f.r.IntN(16) == 0 {
		return lens[f.r.IntN(len(lens))]
	}
	return f.r.IntN(40)
}

func (f filler) str() string {
	n := f.length()
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(' ' + f.r.IntN(95))
	}
	if n > 0 && f.r.IntN(5) == 0 {
		b[0] = 0xc3 // non-ASCII bytes travel as they are
	}
	return string(b)
}

func (f filler) fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			f.fill(v.Field(i))
		}
	case reflect.String:
		if f.r.IntN(3) > 0 {
			v.SetString(f.str())
		}
	case reflect.Bool:
		v.SetBool(f.r.IntN(2) == 0)
	case reflect.Int, reflect.Int64:
		ints := []int64{0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64,
			-1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64}
		v.SetInt(ints[f.r.IntN(len(ints))])
	case reflect.Uint32:
		u := []uint64{0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32}
		v.SetUint(u[f.r.IntN(len(u))])
	case reflect.Slice:
		switch n := f.r.IntN(4); {
		case n == 0: // nil
		case v.Type().Elem().Kind() == reflect.Uint8:
			b := make([]byte, f.length())
			for i := range b {
				b[i] = byte(f.r.IntN(256))
			}
			v.SetBytes(b)
		default:
			l := n - 1 + f.r.IntN(3)*7 // 0..23 elements: fixarray and array16
			s := reflect.MakeSlice(v.Type(), l, l)
			for i := range s.Len() {
				f.fill(s.Index(i))
			}
			v.Set(s)
		}
	case reflect.Map:
		if n := f.r.IntN(4); n > 0 {
			m := reflect.MakeMap(v.Type())
			for range n - 1 + f.r.IntN(2)*20 {
				m.SetMapIndex(reflect.ValueOf(f.str()), reflect.ValueOf(f.str()))
			}
			v.Set(m)
		}
	case reflect.Pointer:
		if f.r.IntN(2) == 0 {
			p := reflect.New(v.Type().Elem())
			f.fill(p.Elem())
			v.Set(p)
		}
	default:
		panic("filler: unexpected kind " + v.Kind().String())
	}
}

func TestFastEncodingIsMsgpackMarshalsBytes(t *testing.T) {
	f := filler{rand.New(rand.NewPCG(5, 26))}
	for _, mk := range fastTypes {
		for range 1000 {
			m := mk()
			f.fill(reflect.ValueOf(m).Elem())
			got, err := Encode(m)
			if err != nil {
				t.Fatal(err)
			}
			if want := reflective(t, m); !bytes.Equal(got, want) {
				t.Fatalf("%T %+v:\n got %x\nwant %x", m, m, got, want)
			}
			if !hasBigMap(m) {
				plain, err := msgpack.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, plain) {
					t.Fatalf("%T: differs from msgpack.Marshal:\n got %x\nwant %x", m, got, plain)
				}
			}
		}
	}
}

// clearContent drops the content blocks of a reply that has them.
func clearContent(m any) {
	switch m := m.(type) {
	case *InvokeReply:
		m.Content, m.Approval = nil, nil // an approval request takes the reflective path too
	case *ProviderInvokeReply:
		m.Content = nil
	}
}

// A reply with content blocks is encoded by msgpack and decoded by the
// reflective decoder (the fast decoder refuses the content key), so its
// bytes and values are msgpack's; without them the fast path's bytes stay
// what they were.
func TestContentTakesTheReflectivePath(t *testing.T) {
	size := int64(4033)
	blocks := []Content{
		{Type: ContentText, Text: "a", Annotations: []byte(`{"audience":["user"]}`), Meta: []byte(`{"k":1}`)},
		{Type: ContentImage, Data: []byte{0x89, 'P', 'N', 'G'}, MIMEType: "image/png"},
		{Type: ContentResourceLink, URI: "file:///a", Name: "a", Size: &size},
		{Type: ContentResource, Resource: &Resource{URI: "file:///b", MIMEType: "application/octet-stream", Blob: []byte{0, 1, 2}}},
	}
	for _, m := range []Message{
		&InvokeReply{V: Version, CallID: "c", Content: blocks, Structured: []byte(`{"a":1}`)},
		&ProviderInvokeReply{V: Version, Content: blocks, IsError: true},
	} {
		b, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := msgpack.Marshal(m); !bytes.Equal(b, want) {
			t.Fatalf("%T: not msgpack's bytes", m)
		}
		fresh := reflect.New(reflect.TypeOf(m).Elem()).Interface().(fastMessage)
		if fresh.decodeMsgpack(b) {
			t.Fatalf("%T: the fast decoder took content", m)
		}
		got := reflect.New(reflect.TypeOf(m).Elem()).Interface().(Message)
		if err := Decode(b, got, DefaultLimits()); err != nil || !reflect.DeepEqual(got, m) {
			t.Fatalf("%T: %v\n got %+v\nwant %+v", m, err, got, m)
		}
	}
	// Without content: the fast path's bytes, as before.
	plain := &InvokeReply{V: Version, CallID: "c", Text: "t"}
	b, _ := Encode(plain)
	if !bytes.Equal(b, plain.appendMsgpack(nil)) {
		t.Fatal("a reply without content left the fast path")
	}
}

// hasBigMap reports whether m holds a map of two or more entries.
func hasBigMap(m any) bool {
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		if a, ok := v.Field(i).Interface().(Access); ok && len(a.Attributes) > 1 {
			return true
		}
	}
	return false
}

func TestFastDecodingMatchesReflectiveDecoding(t *testing.T) {
	f := filler{rand.New(rand.NewPCG(7, 11))}
	for _, mk := range fastTypes {
		for range 1000 {
			m := mk()
			f.fill(reflect.ValueOf(m).Elem())
			clearContent(m) // content blocks take the reflective path (TestContentTakesTheReflectivePath)
			frame := reflective(t, m)
			fast := mk()
			if !fast.decodeMsgpack(frame) {
				t.Fatalf("%T: fast path refused msgpack.Marshal's own frame %x", m, frame)
			}
			slow := mk()
			if err := msgpack.Unmarshal(frame, slow); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("%T:\nfast %+v\nslow %+v", m, fast, slow)
			}
			if !reflect.DeepEqual(fast, m) && !emptyVsNil(m) {
				t.Fatalf("%T does not round-trip:\n got %+v\nwant %+v", m, fast, m)
			}
		}
	}
}

// emptyVsNil reports whether m holds an empty, non-nil slice or map, which
// omitempty drops (so it decodes as nil).
func emptyVsNil(m any) bool {
	found := false
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Struct:
			for i := range v.NumField() {
				walk(v.Field(i))
			}
		case reflect.Pointer:
			if !v.IsNil() {
				walk(v.Elem())
			}
		case reflect.Slice, reflect.Map:
			found = found || (!v.IsNil() && v.Len() == 0)
		}
	}
	walk(reflect.ValueOf(m))
	return found
}

// slowDecode is Decode without the fast path.
func slowDecode(b []byte, m Message) (err error) {
	if err := Guard(b, DefaultLimits()); err != nil {
		return err
	}
	if err := checkShape(b, m); err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			err = ErrMalformed
		}
	}()
	if err := msgpack.Unmarshal(b, m); err != nil {
		return err
	}
	return checkVersion(m)
}

// sameDecode checks that Decode and the reflective decoder agree on frame:
// both refuse it, or both accept it with equal values.
func sameDecode(t *testing.T, mk func() fastMessage, frame []byte) {
	t.Helper()
	fast, slow := mk(), mk()
	ferr := Decode(frame, fast, DefaultLimits())
	serr := slowDecode(frame, slow)
	if (ferr == nil) != (serr == nil) {
		t.Fatalf("%T frame %x: Decode says %v, the reflective decoder %v", fast, frame, ferr, serr)
	}
	if ferr == nil && !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%T frame %x:\nDecode     %+v\nreflective %+v", fast, frame, fast, slow)
	}
}

func TestDecodeOfMutatedFramesMatchesReflectiveDecoding(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	f := filler{r}
	for _, mk := range fastTypes {
		for range 1000 {
			m := mk()
			f.fill(reflect.ValueOf(m).Elem())
			clearContent(m) // content blocks take the reflective path (TestContentTakesTheReflectivePath)
			frame := reflective(t, m)
			if len(frame) > 4096 {
				continue
			}
			frame = append([]byte(nil), frame...)
			switch r.IntN(4) {
			case 0: // flip a byte
				frame[r.IntN(len(frame))] = byte(r.IntN(256))
			case 1: // truncate
				frame = frame[:r.IntN(len(frame))]
			case 2: // trailing byte
				frame = append(frame, byte(r.IntN(256)))
			case 3: // set the version
				if i := bytes.Index(frame, []byte{0xa1, 'v'}); i >= 0 && i+2 < len(frame) {
					frame[i+2] = byte(r.IntN(4))
				}
			}
			sameDecode(t, mk, frame)
		}
	}
}

func TestDecodeOfOtherEncodersShapesMatchesReflectiveDecoding(t *testing.T) {
	hexes := []string{
		// unknown key, array-encoded struct, str for bin, bin for str,
		// nil string, duplicate key, map16 header, float version.
		"82a17601a3787878a3616263",
		"9401a0a0c0",
		"83a17601a6616363657373" + "82a674656e616e74a161a97072696e636970616ca162" + "a461726773a27b7d",
		"83a17601a6616363657373" + "82a674656e616e74c40161a97072696e636970616ca162" + "a4746f6f6ca174",
		"83a17601a6616363657373" + "82a674656e616e74c0a97072696e636970616ca162" + "a4746f6f6ca174",
		"83a17601a17602a6616363657373" + "82a674656e616e74a161a97072696e636970616ca162",
		"de0001a17601",
		"81a176cb3ff0000000000000",
		"82a17601a56572726f72c0",
		"82a17601a56572726f7281a4636f6465a178",
		"82a17601a56572726f7282a4636f6465a178a4636f6465a179",
		"82a17601a56572726f7281a7756e6b6e6f776ea178",
		"83a17601a6616363657373" + "83a674656e616e74a161a97072696e636970616ca162aa6e616d657370616365739100" + "a4746f6f6ca174",
		"83a17601a6616363657373" + "83a674656e616e74a161a97072696e636970616ca162aa6174747269627574657381a16bc0" + "a4746f6f6ca174",
		"83a17601a6616363657373" + "82a674656e616e74a161a97072696e636970616ca162" + "aa74696d656f75745f6d73ff",
		"82a17601ab6475726174696f6e5f7573cf8000000000000000",
	}
	for _, h := range hexes {
		frame, err := hex.DecodeString(h)
		if err != nil {
			t.Fatal(err)
		}
		for _, mk := range fastTypes {
			sameDecode(t, mk, frame)
		}
	}
}

func TestDecodeOfFuzzCorpusMatchesReflectiveDecoding(t *testing.T) {
	files, err := filepath.Glob("testdata/fuzz/FuzzGuard/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("corpus: %v (%d files)", err, len(files))
	}
	for _, name := range files {
		raw, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		// go test fuzz v1: one line per argument, []byte("...").
		for _, line := range strings.Split(string(raw), "\n") {
			if !strings.HasPrefix(line, "[]byte(") {
				continue
			}
			frame, ok := unquoteCorpus(line)
			if !ok {
				continue
			}
			for _, mk := range fastTypes {
				sameDecode(t, mk, frame)
			}
		}
	}
}

func TestDecodeIntoANonZeroValueFallsBack(t *testing.T) {
	frame, _ := Encode(&InvokeRequest{V: 1, Access: Access{Tenant: "a", Principal: "b", Attributes: map[string]string{"x": "1"}}, Tool: "t"})
	fast := &InvokeRequest{Args: []byte("kept"), Access: Access{Attributes: map[string]string{"y": "2"}}}
	slow := &InvokeRequest{Args: []byte("kept"), Access: Access{Attributes: map[string]string{"y": "2"}}}
	if err := Decode(frame, fast, DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	if err := slowDecode(frame, slow); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fast, slow) || string(fast.Args) != "kept" {
		t.Fatalf("fast %+v slow %+v", fast, slow)
	}
}

func TestFastPathsDoNotAllocateMuch(t *testing.T) {
	req := &InvokeRequest{V: 1, Access: Access{Tenant: "acme", Principal: "ada", Credential: "p", TurnID: "n.t", Namespaces: []string{"notes"}},
		Tool: "notes_get", Args: []byte(`{"title":"plan"}`), TimeoutMs: 500}
	frame, _ := Encode(req)
	if n := testing.AllocsPerRun(100, func() { _, _ = Encode(req) }); n > 1 {
		t.Errorf("Encode: %v allocations", n)
	}
	// The struct's strings, the namespaces slice and the arguments.
	if n := testing.AllocsPerRun(100, func() {
		var back InvokeRequest
		_ = Decode(frame, &back, DefaultLimits())
	}); n > 10 {
		t.Errorf("Decode: %v allocations", n)
	}
}

// unquoteCorpus reads a `[]byte("...")` line of a Go fuzz corpus file.
func unquoteCorpus(line string) ([]byte, bool) {
	s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(line, "[]byte("), ")"))
	return []byte(s), err == nil
}
