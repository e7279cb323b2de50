package messages

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// guardRefuses checks that Guard refuses b with ErrMalformed, names the
// check that refused (detail matches want) and does not panic.
func guardRefuses(t *testing.T, name string, b []byte, lim Limits, want string) {
	t.Helper()
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		err = Guard(b, lim)
	}()
	if !errors.Is(err, ErrMalformed) {
		t.Errorf("%s: Guard(% x) = %v, want ErrMalformed", name, b[:min(len(b), 24)], err)
		return
	}
	if !regexp.MustCompile(want).MatchString(err.Error()) {
		t.Errorf("%s: Guard(% x) = %q, want the check matching %q", name, b[:min(len(b), 24)], err, want)
	}
}

// wrappers put a value somewhere other than offset 0: last in an array,
// a map value, under nested arrays, as an array16 element.
var wrappers = []struct {
	name   string
	prefix []byte
}{
	{"alone", nil},
	{"second of fixarray", hexFrame("92 c0")},
	{"map value", hexFrame("81 a1 6b")},
	{"map key", hexFrame("82 c0 c0")}, // {nil: nil, <value>: nil}: wrap appends the last nil
	{"under three fixarrays", hexFrame("91 91 91")},
	{"third of array16", hexFrame("dc 00 03 c0 a1 61")},
	{"in array32 after a str8", hexFrame("dd 00 00 00 02 d9 02 61 62")},
}

func wrap(prefix, f []byte, suffixForMapKey bool) []byte {
	out := append(append([]byte{}, prefix...), f...)
	if suffixForMapKey {
		out = append(out, 0xc0)
	}
	return out
}

// Every valid frame, wherever it sits in an enclosing frame, truncated at
// every offset, is refused as truncated (never accepted, never a panic).
// At offset 0 "n-pos" and "n+pos" agree; these put headers at other offsets.
func TestGuardTruncatedAtEveryOffsetNested(t *testing.T) {
	var frames [][]byte
	for c := 0; c < 256; c++ {
		if c != 0xc1 {
			frames = append(frames, frameFor(byte(c)))
		}
	}
	for _, g := range goodFrames(t) {
		if len(g.frame) <= 512 {
			frames = append(frames, g.frame)
		}
	}
	frames = append(frames, minimalFrames()...)
	loose := Limits{MaxBytes: 1 << 20, MaxDepth: 64, MaxItems: 1 << 20}
	for _, f := range frames {
		for _, w := range wrappers {
			full := wrap(w.prefix, f, w.name == "map key")
			if err := Guard(full, loose); err != nil {
				t.Errorf("%s: valid % x refused: %v", w.name, full, err)
				continue
			}
			for i := 0; i < len(full); i++ {
				want := `truncated|remain`
				if i == 0 {
					want = `empty frame`
				}
				guardRefuses(t, fmt.Sprintf("%s, % x cut at %d", w.name, f[:min(len(f), 8)], i), full[:i], loose, want)
			}
		}
	}
}

// minimalFrames are valid frames whose header is exactly the bytes that
// remain: the header-size checks at their boundary.
func minimalFrames() [][]byte {
	var out [][]byte
	for _, s := range []string{
		"d9 00", "c4 00", // str8, bin8 of 0 bytes
		"da 00 00", "c5 00 00", // str16, bin16
		"db 00 00 00 00", "c6 00 00 00 00", // str32, bin32
		"dc 00 00", "dd 00 00 00 00", // array16, array32, empty
		"de 00 00", "df 00 00 00 00", // map16, map32, empty
		"d4 05 00",             // fixext1
		"c7 01 05 01",          // ext8 of 1 byte
		"c8 00 01 05 01",       // ext16
		"c9 00 00 00 01 05 01", // ext32
		"d5 05 90 c0",          // fixext2 whose payload starts like an array: opaque
		"d4 05 c0",             // fixext1 whose payload is nil: scanned, exactly one value
		"cc ff", "cd ff ff", "ce ff ff ff ff", "cf ff ff ff ff ff ff ff ff",
		"a0", "bf" + strings.Repeat(" 61", 31),
	} {
		out = append(out, hexFrame(s))
	}
	return out
}

// Which check refuses, for inputs only that check refuses.
func TestGuardNamesTheCheckThatRefused(t *testing.T) {
	def := DefaultLimits()
	for _, tc := range []struct {
		name string
		hex  string
		lim  Limits
		want string
	}{
		// A 3-byte ext8 header with an empty payload is refused as an
		// empty ext, not as a truncated header.
		{"empty ext8", "c7 00 05", def, `empty ext payload at offset 0$`},
		{"empty ext16", "c8 00 00 05", def, `empty ext payload`},
		{"empty ext32", "c9 00 00 00 00 05", def, `empty ext payload`},
		{"empty ext8 nested", "92 c0 c7 00 05", def, `ext payload msgpack could decode as a map at offset 2: empty ext payload`},
		{"fixext1 missing its payload", "d4 05", def, `payload of 1 bytes but only 0 remain at offset 0$`},
		{"fixext1 header cut", "d4", def, `truncated fixext header at offset 0$`},
		{"fixext1 header cut, nested", "92 c0 d4", def, `truncated fixext header at offset 2$`},
		{"ext8 header cut", "92 c0 c7 01", def, `truncated ext8 header at offset 2$`},
		{"ext16 header cut", "92 c0 c8 00 01", def, `truncated ext16 header at offset 2$`},
		{"ext32 header cut", "92 c0 c9 00 00 00 01", def, `truncated ext32 header at offset 2$`},
		{"str8 header cut", "92 c0 d9", def, `truncated 0xd9 header at offset 2$`},
		{"str16 header cut", "91 da 00", def, `truncated 0xda header at offset 1$`},
		{"str32 header cut", "91 db 00 00 00", def, `truncated 0xdb header at offset 1$`},
		{"array16 header cut", "91 dc 00", def, `truncated array16 header at offset 1$`},
		{"array32 header cut", "91 dd 00 00 00", def, `truncated array32 header at offset 1$`},
		{"map16 header cut", "91 de 00", def, `truncated map16 header at offset 1$`},
		{"map32 header cut", "91 df 00 00 00", def, `truncated map32 header at offset 1$`},
		{"float64 cut", "91 cb 00 00 00 00 00 00 00", def, `truncated 0xcb value: need 9 bytes, have 8 at offset 1$`},
		{"fixstr cut", "91 a3 61 62", def, `truncated fixstr: need 4 bytes, have 3 at offset 1$`},
		{"str8 payload short", "91 d9 03 61 62", def, `0xd9 payload of 3 bytes but only 2 remain at offset 1$`},
		{"values owed", "93 92 c0 c0", def, `container of 2 values but only 2 bytes remain for 4 values owed at offset 1$`},
		{"trailing", "92 c0 c0 c0", def, `1 trailing byte\(s\) after value at offset 3$`},
		{"reserved", "92 c0 c1", def, `reserved byte 0xc1 at offset 2$`},
		{"empty", "", def, `empty frame at offset 0$`},
		// Each limit with an input only it refuses.
		{"MaxBytes", "92 c0 c0", Limits{MaxBytes: 2}, `frame of 3 bytes exceeds MaxBytes 2`},
		{"MaxDepth", "91 91 91 c0", Limits{MaxDepth: 2}, `nesting deeper than MaxDepth 2 at offset 2$`},
		{"MaxItems", "93 c0 c0 c0", Limits{MaxItems: 3}, `container of 3 values exceeds MaxItems 3 at offset 0$`},
		// An ext whose payload, scanned as a value, is shorter than the payload.
		{"ext payload holds less", "c7 02 05 80 c0", def, `its 2-byte payload holds a value of 1 bytes`},
		{"ext payload map runs past", "92 c7 01 05 81 a1 6b", def, `at offset 1: .* at offset`},
		{"fixext2 payload starting 0x90 is opaque, but 0x80 is a map", "d5 05 80 c0", def, `its 2-byte payload holds a value of 1 bytes`},
	} {
		guardRefuses(t, tc.name, hexFrame(tc.hex), tc.lim, tc.want)
	}
}

// A limit at exactly its value accepts; the limits above accept what each
// refused frame would need, so only that limit refused.
func TestGuardLimitsAtTheirBoundary(t *testing.T) {
	for _, tc := range []struct {
		hex string
		lim Limits
	}{
		{"92 c0 c0", Limits{MaxBytes: 3}},
		{"91 91 c0", Limits{MaxDepth: 2}},
		{"92 c0 c0", Limits{MaxItems: 3}},
		{"d5 05 90 c0", DefaultLimits()}, // payload starting 0x90 (an array) is opaque
		{"d5 05 9f c0", DefaultLimits()},
		{"d5 05 7f c0", DefaultLimits()},
		{"d4 05 80", DefaultLimits()}, // an empty map, exactly the payload
		{"d4 05 c0", DefaultLimits()}, // nil, exactly the payload
		{"d6 05 81 c0 a1 61", DefaultLimits()},
		{"92 d4 05 c0 c0", Limits{MaxItems: 4, MaxDepth: 2}}, // the ext scanned as a value is a level and a value
	} {
		if err := Guard(hexFrame(tc.hex), tc.lim); err != nil {
			t.Errorf("%s under %+v: %v", tc.hex, tc.lim, err)
		}
	}
}

// MaxItems bounds the whole frame, not each container: two arrays of five
// nils inside an array are 13 values.
func TestGuardMaxItemsIsPerFrame(t *testing.T) {
	five := append([]byte{0x95}, bytes.Repeat([]byte{0xc0}, 5)...)
	f := append(append([]byte{0x92}, five...), five...)
	if err := Guard(f, Limits{MaxItems: 13}); err != nil {
		t.Fatalf("13 values / MaxItems 13: %v", err)
	}
	guardRefuses(t, "13 values / MaxItems 12", f, Limits{MaxItems: 12}, `container of 5 values exceeds MaxItems 12 at offset 7$`)
	// Siblings of nested maps count too: {k: {a: nil}, l: {b: nil}} = 9 values.
	m := hexFrame("82 a1 6b 81 a1 61 c0 a1 6c 81 a1 62 c0")
	if err := Guard(m, Limits{MaxItems: 9}); err != nil {
		t.Fatalf("9 values / MaxItems 9: %v", err)
	}
	guardRefuses(t, "9 values / MaxItems 8", m, Limits{MaxItems: 8}, `exceeds MaxItems 8 at offset 9$`)
	// An ext scanned as a value counts as one more value.
	e := hexFrame("92 d4 05 c0 c0") // [ext(nil), nil]: array, ext, nil, nil
	if err := Guard(e, Limits{MaxItems: 4}); err != nil {
		t.Fatalf("ext: 4 values / MaxItems 4: %v", err)
	}
	guardRefuses(t, "ext: 4 values / MaxItems 3", e, Limits{MaxItems: 3}, `exceeds MaxItems 3`)
}

// Every byte of a 16- or 32-bit length counts: each frame below claims a
// length whose dropped high byte would leave exactly what the frame holds.
func TestGuardLengthsUseEveryByte(t *testing.T) {
	def := DefaultLimits()
	for _, tc := range []struct {
		hex  string
		want string
	}{
		{"db 01 00 00 01 41", `payload of 16777217 bytes but only 1 remain`},
		{"db 00 01 00 01 41", `payload of 65537 bytes but only 1 remain`},
		{"db 00 00 01 01 41", `payload of 257 bytes but only 1 remain`},
		{"c6 01 00 00 01 41", `payload of 16777217 bytes`},
		{"da 01 01 41", `payload of 257 bytes but only 1 remain`},
		{"c5 01 01 41", `payload of 257 bytes`},
		{"c9 01 00 00 01 05 41", `payload of 16777217 bytes`},
		{"c9 00 00 01 01 05 41", `payload of 257 bytes`},
		{"c8 01 01 05 41", `payload of 257 bytes`},
		{"dd 01 00 00 01 c0", `container of 16777217 values`},
		{"dd 00 01 00 01 c0", `container of 65537 values`},
		{"dd 00 00 01 01 c0", `container of 257 values`},
		{"dc 01 01 c0", `container of 257 values`},
		{"df 01 00 00 01 c0 c0", `container of 33554434 values`},
		{"df 00 00 01 01 c0 c0", `container of 514 values`},
		{"de 01 01 c0 c0", `container of 514 values`},
	} {
		guardRefuses(t, tc.hex, hexFrame(tc.hex), def, tc.want)
		guardRefuses(t, "nested "+tc.hex, append(hexFrame("92 c0"), hexFrame(tc.hex)...), def, tc.want)
	}
	// And the same lengths decoded right when the bytes are there.
	for _, tc := range []struct {
		hdr string
		n   int
	}{{"da 01 01", 257}, {"db 00 00 01 01", 257}, {"dc 01 01", 257}, {"dd 00 00 01 01", 257}} {
		f := append(hexFrame(tc.hdr), bytes.Repeat([]byte{0x41}, tc.n)...)
		if f[0] == 0xdc || f[0] == 0xdd {
			f = append(hexFrame(tc.hdr), bytes.Repeat([]byte{0xc0}, tc.n)...)
		}
		if err := Guard(f, def); err != nil {
			t.Errorf("%s with %d bytes: %v", tc.hdr, tc.n, err)
		}
		guardRefuses(t, tc.hdr+" one short", f[:len(f)-1], def, `remain`)
	}
}

// FuzzGuardNestedTruncated: whatever Guard accepts is also accepted inside
// containers (at an offset other than 0), and every proper prefix of it, so
// placed, is refused with ErrMalformed without a panic. The seeds run with
// `go test`; `go test -fuzz FuzzGuardNestedTruncated ./messages` explores.
func FuzzGuardNestedTruncated(f *testing.F) {
	for c := 0; c < 256; c++ {
		if c != 0xc1 {
			f.Add(frameFor(byte(c)))
		}
	}
	for _, m := range minimalFrames() {
		f.Add(m)
	}
	f.Add(hexFrame("83 a1 41 a2 68 69 a1 42 93 01 02 03 a1 43 81 a1 6b a1 76"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 512 {
			return
		}
		lim := Limits{MaxBytes: 1 << 20, MaxDepth: 64, MaxItems: 1 << 20}
		if Guard(b, lim) != nil {
			return
		}
		for _, w := range wrappers {
			full := wrap(w.prefix, b, w.name == "map key")
			if err := Guard(full, lim); err != nil {
				t.Fatalf("%s: % x accepted alone, refused in % x: %v", w.name, b, full, err)
			}
			for i := range full {
				var err error
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Fatalf("%s: Guard(% x) panicked: %v", w.name, full[:i], r)
						}
					}()
					err = Guard(full[:i], lim)
				}()
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("%s: prefix % x of % x: %v, want ErrMalformed", w.name, full[:i], full, err)
				}
			}
		}
	})
}
