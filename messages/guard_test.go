package messages

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// guardProbe is the concrete type accepted frames are decoded into.
type guardProbe struct {
	A string
	B []int
	C map[string]string
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %T: %v", v, err)
	}
	return b
}

func hexFrame(s string) []byte {
	var out []byte
	for _, f := range strings.Fields(s) {
		v, err := strconv.ParseUint(f, 16, 8)
		if err != nil {
			panic(err)
		}
		out = append(out, byte(v))
	}
	return out
}

// guardBombs are frames whose headers claim far more than the frame holds.
// Unguarded, several of them make msgpack v5.4.1 allocate gigabytes.
var guardBombs = []struct {
	name  string
	frame []byte
}{
	{"array32 4G", hexFrame("dd ff ff ff ff")},
	{"map32 4G", hexFrame("df ff ff ff ff")},
	{"str32 4G", hexFrame("db ff ff ff ff")},
	{"bin32 4G", hexFrame("c6 ff ff ff ff")},
	{"ext32 4G", hexFrame("c9 ff ff ff ff 01")},
	{"array16 64K", hexFrame("dc ff ff")},
	{"map16 64K", hexFrame("de ff ff")},
	{"str16 64K", hexFrame("da ff ff")},
	{"bin16 64K", hexFrame("c5 ff ff")},
	{"ext16 64K", hexFrame("c8 ff ff 01")},
	{"array32 1M in struct field", hexFrame("81 a1 42 dd 00 10 00 00")},
	{"map32 1M in struct field", hexFrame("81 a1 43 df 00 0f 42 40")},
	{"array32 inside fixarray", hexFrame("91 dd 7f ff ff ff")},
	{"array claims fit alone but not with siblings", hexFrame("93 92 c0 c0")},
	{"map entries need 2 bytes", hexFrame("82 c0 c0 c0")},
	{"reserved c1", hexFrame("c1")},
	{"reserved c1 nested", hexFrame("92 c0 c1")},
	{"empty", nil},
	{"trailing byte", hexFrame("c0 c0")},
	{"deep 1000", append(bytes.Repeat([]byte{0x91}, 1000), 0xc0)},
	// Ext payloads msgpack reads as a map where it expects one.
	{"fixext8 timestamp hiding map32 1M", hexFrame("81 a1 43 d7 ff df 00 0f 42 40 00 00 00")},
	{"fixext8 timestamp hiding map32 2G", hexFrame("81 a1 41 d7 ff df 7f ff ff ff 00 00 00")},
	{"fixext8 hiding {k: array32 1M}", hexFrame("81 a1 4d d7 ff 81 a1 6b dd 00 10 00 00")},
	{"fixext16 hiding map16 (fuzz)", []byte("\x81\xa1C\xd80\xde800000000000000")},
	{"fixext4 hiding empty map, rest read as next values", hexFrame("92 d6 ff 80 dc ff ff c0")},
	{"ext8 payload is a map plus trailing byte", hexFrame("c7 02 05 80 c0")},
	{"ext8 payload map runs past payload", hexFrame("92 c7 01 05 81 a1 6b")},
	{"empty ext8", hexFrame("c7 00 05")},
}

// nested returns n fixarrays of one element around a nil: depth n.
func nested(n int) []byte {
	return append(bytes.Repeat([]byte{0x91}, n), 0xc0)
}

// frameFor returns a small valid frame whose first byte is c (c != 0xc1).
func frameFor(c byte) []byte {
	f := []byte{c}
	switch {
	case c <= 0x7f || c >= 0xe0:
		return f
	case c <= 0x8f:
		for i := 0; i < int(c&0x0f); i++ {
			f = append(f, byte(i), 0xa1, 'v')
		}
		return f
	case c <= 0x9f:
		for i := 0; i < int(c&0x0f); i++ {
			f = append(f, 0xc0)
		}
		return f
	case c <= 0xbf:
		return append(f, bytes.Repeat([]byte{'s'}, int(c&0x1f))...)
	}
	switch c {
	case 0xc0, 0xc2, 0xc3:
		return f
	case 0xca, 0xce, 0xd2: // 4-byte payloads
		return append(f, 0, 0, 0, 1)
	case 0xcb, 0xcf, 0xd3:
		return append(f, 0, 0, 0, 0, 0, 0, 0, 1)
	case 0xcc, 0xd0:
		return append(f, 7)
	case 0xcd, 0xd1:
		return append(f, 0, 7)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1,2,4,8,16
		return append(append(f, 5), make([]byte, 1<<(c-0xd4))...)
	case 0xc4, 0xd9: // bin8, str8
		return append(f, 3, 'a', 'b', 'c')
	case 0xc5, 0xda:
		return append(f, 0, 3, 'a', 'b', 'c')
	case 0xc6, 0xdb:
		return append(f, 0, 0, 0, 3, 'a', 'b', 'c')
	case 0xc7: // ext8
		return append(f, 2, 5, 'x', 'y')
	case 0xc8:
		return append(f, 0, 2, 5, 'x', 'y')
	case 0xc9:
		return append(f, 0, 0, 0, 2, 5, 'x', 'y')
	case 0xdc:
		return append(f, 0, 2, 0xc0, 0x01)
	case 0xdd:
		return append(f, 0, 0, 0, 2, 0xc0, 0x01)
	case 0xde:
		return append(f, 0, 1, 0xa1, 'k', 0x01)
	case 0xdf:
		return append(f, 0, 0, 0, 1, 0xa1, 'k', 0x01)
	}
	panic("no frame for " + strconv.Itoa(int(c)))
}

// msgpackSkips reports whether msgpack's own decoder sees exactly one value
// spanning all of b. It is the reference for well-formedness; only use it on
// small inputs (it allocates up to 1 MiB for a bogus str/bin/ext length).
func msgpackSkips(b []byte) bool {
	r := bytes.NewReader(b)
	d := msgpack.NewDecoder(r)
	return d.Skip() == nil && r.Len() == 0
}

// goodFrames returns valid frames and the limits each must pass under.
func goodFrames(t testing.TB) []struct {
	name  string
	frame []byte
	lim   Limits
} {
	def := DefaultLimits()
	big := Limits{MaxBytes: 1 << 20, MaxDepth: 32, MaxItems: 1 << 20}
	deep31 := any(nil)
	for i := 0; i < 31; i++ {
		deep31 = []any{deep31}
	}
	deepMap := any("leaf")
	for i := 0; i < 31; i++ {
		deepMap = map[string]any{"k": deepMap}
	}
	many := make(map[string]int, 20)
	for i := 0; i < 20; i++ {
		many["k"+strconv.Itoa(i)] = i
	}
	arr16 := make([]int, 100)
	arr32 := make([]uint8, 70000)
	type inner struct {
		N int
		F float64
	}
	type outer struct {
		Name  string
		Tags  []string
		Meta  map[string]string
		In    inner
		Ptr   *inner
		Raw   []byte
		When  time.Time
		F32   float32
		U64   uint64
		I64   int64
		Flag  bool
		Empty []int
	}
	cases := []struct {
		name string
		v    any
		lim  Limits
	}{
		{"nil", nil, def},
		{"true", true, def},
		{"false", false, def},
		{"posfixint", 5, def},
		{"negfixint", -5, def},
		{"uint8", uint8(200), def},
		{"uint16", uint16(60000), def},
		{"uint32", uint32(4000000000), def},
		{"uint64", uint64(math.MaxUint64), def},
		{"int8", int8(-100), def},
		{"int16", int16(-30000), def},
		{"int32", int32(-2000000000), def},
		{"int64", int64(math.MinInt64), def},
		{"float32", float32(1.5), def},
		{"float64", math.Pi, def},
		{"fixstr empty", "", def},
		{"fixstr", "hello", def},
		{"str8", strings.Repeat("x", 200), def},
		{"str16", strings.Repeat("y", 1000), def},
		{"str32", strings.Repeat("z", 70000), def},
		{"bin8", []byte{1, 2, 3}, def},
		{"bin16", make([]byte, 300), def},
		{"bin32", make([]byte, 70000), def},
		{"time fixext8", time.Unix(1700000000, 5), def},
		{"time fixext4", time.Unix(1700000000, 0), def},
		{"time ext8 (12 bytes)", time.Unix(-1, 5), def},
		{"fixarray", []string{"a", "b"}, def},
		{"array16", arr16, def},
		{"array32", arr32, big},
		{"fixmap", map[string]string{"a": "b"}, def},
		{"map16", many, def},
		{"probe", guardProbe{A: "a", B: []int{1, 2, 3}, C: map[string]string{"x": "y"}}, def},
		{"struct", outer{
			Name: "n", Tags: []string{"t1", "t2"}, Meta: map[string]string{"k": "v"},
			In: inner{N: 1, F: 2}, Raw: []byte("raw"), When: time.Unix(1, 2),
			F32: 3, U64: 1 << 40, I64: -1 << 40, Flag: true,
		}, def},
		{"nested depth 31 arrays", deep31, def},
		{"nested depth 31 maps", deepMap, def},
	}
	out := make([]struct {
		name  string
		frame []byte
		lim   Limits
	}, 0, len(cases)+4)
	for _, c := range cases {
		out = append(out, struct {
			name  string
			frame []byte
			lim   Limits
		}{c.name, mustMarshal(t, c.v), c.lim})
	}
	for _, h := range []struct{ name, hex string }{
		{"hand array32", "dd 00 00 00 02 c0 c3"},
		{"hand map32", "df 00 00 00 01 a1 6b 01"},
		{"hand ext32", "c9 00 00 00 01 07 ff"},
		{"hand ext16", "c8 00 02 07 01 02"},
		{"ext8 wrapping exactly one map", "c7 04 05 81 a1 6b 01"},
		{"fixext1 wrapping nil", "d4 05 c0"},
		{"fixext1 wrapping empty map", "d4 05 80"},
		{"ext8 wrapping ext wrapping map", "c7 05 05 81 a0 d4 06 80"},
		{"nested depth 32", strings.Repeat("91 ", 32) + "c0"},
	} {
		out = append(out, struct {
			name  string
			frame []byte
			lim   Limits
		}{h.name, hexFrame(h.hex), def})
	}
	return out
}

func TestGuardAcceptsMarshaledFrames(t *testing.T) {
	for _, c := range goodFrames(t) {
		if err := Guard(c.frame, c.lim); err != nil {
			t.Errorf("%s (% x...): unexpected %v", c.name, c.frame[:min(len(c.frame), 16)], err)
		}
		if len(c.frame) < 4096 && !msgpackSkips(c.frame) {
			t.Errorf("%s: msgpack itself does not accept the frame; test bug", c.name)
		}
	}
}

// TestGuardEveryFormat builds a frame for each of the 255 valid first bytes
// and checks Guard against msgpack's own decoder, then checks that every
// truncation and every extension by a trailing byte is refused.
func TestGuardEveryFormat(t *testing.T) {
	lim := DefaultLimits()
	for c := 0; c < 256; c++ {
		if c == 0xc1 {
			continue
		}
		f := frameFor(byte(c))
		if !msgpackSkips(f) {
			t.Fatalf("0x%02x: test frame % x not valid msgpack", c, f)
		}
		if err := Guard(f, lim); err != nil {
			t.Errorf("0x%02x: valid frame % x refused: %v", c, f, err)
		}
		for i := 0; i < len(f); i++ {
			err := Guard(f[:i], lim)
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("0x%02x: truncated frame % x accepted (err=%v)", c, f[:i], err)
			}
		}
		trailing := append(append([]byte{}, f...), 0xc0)
		if err := Guard(trailing, lim); !errors.Is(err, ErrMalformed) {
			t.Errorf("0x%02x: frame with trailing byte % x accepted", c, trailing)
		}
		// The same value as the last element of an array must also pass.
		wrapped := append([]byte{0x92, 0xc0}, f...)
		if err := Guard(wrapped, lim); err != nil {
			t.Errorf("0x%02x: wrapped frame % x refused: %v", c, wrapped, err)
		}
	}
}

func TestGuardTruncatedMarshaledFrames(t *testing.T) {
	for _, c := range goodFrames(t) {
		if len(c.frame) > 4096 {
			// Check a sample of prefixes of big frames.
			for _, i := range []int{0, 1, 2, 3, 4, 5, len(c.frame) / 2, len(c.frame) - 1} {
				if err := Guard(c.frame[:i], c.lim); !errors.Is(err, ErrMalformed) {
					t.Errorf("%s: prefix %d accepted", c.name, i)
				}
			}
			continue
		}
		for i := 0; i < len(c.frame); i++ {
			if err := Guard(c.frame[:i], c.lim); !errors.Is(err, ErrMalformed) {
				t.Errorf("%s: prefix %d of %d accepted", c.name, i, len(c.frame))
			}
		}
	}
}

func TestGuardRejectsBombs(t *testing.T) {
	for _, bomb := range guardBombs {
		err := Guard(bomb.frame, DefaultLimits())
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Guard(% x) = %v, want ErrMalformed", bomb.name, bomb.frame[:min(len(bomb.frame), 16)], err)
			continue
		}
		if !strings.Contains(err.Error(), "at offset ") {
			t.Errorf("%s: error %q lacks an offset", bomb.name, err)
		}
	}
}

// decodeGuarded is the pattern every consumer of untrusted frames follows.
func decodeGuarded(b []byte, lim Limits, v any, unmarshal func([]byte, any) error) error {
	if err := Guard(b, lim); err != nil {
		return err
	}
	return unmarshal(b, v)
}

func TestGuardBombsNeverReachUnmarshal(t *testing.T) {
	calls := 0
	counting := func(b []byte, v any) error {
		calls++
		return msgpack.Unmarshal(b, v)
	}
	for _, bomb := range guardBombs {
		var p guardProbe
		if err := decodeGuarded(bomb.frame, DefaultLimits(), &p, counting); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: decodeGuarded = %v, want ErrMalformed", bomb.name, err)
		}
	}
	if calls != 0 {
		t.Fatalf("Unmarshal called %d times for bomb frames", calls)
	}
	// The counter does see accepted frames.
	var p guardProbe
	good := mustMarshal(t, guardProbe{A: "a", B: []int{1}, C: map[string]string{"k": "v"}})
	if err := decodeGuarded(good, DefaultLimits(), &p, counting); err != nil || calls != 1 {
		t.Fatalf("good frame: err=%v calls=%d", err, calls)
	}
	if p.A != "a" || len(p.B) != 1 || p.C["k"] != "v" {
		t.Fatalf("decoded %+v", p)
	}
}

// TestGuardBombIsRealHazard documents why the guard exists: an 8-byte frame
// that msgpack v5.4.1 turns into a multi-megabyte allocation (the same header
// with 0xffffffff asks for ~32 GiB).
func TestGuardBombIsRealHazard(t *testing.T) {
	frame := hexFrame("81 a1 42 dd 00 10 00 00") // {"B": array32 of 1M elements}
	if err := Guard(frame, DefaultLimits()); !errors.Is(err, ErrMalformed) {
		t.Fatalf("Guard = %v, want ErrMalformed", err)
	}
	alloc := minTotalAlloc(3, func() { _ = msgpack.Unmarshal(frame, new(guardProbe)) })
	t.Logf("unguarded Unmarshal of an %d-byte frame allocated %d bytes", len(frame), alloc)
}

// TestGuardExtReadAsMap covers msgpack's habit of reading an ext payload as
// a map where it expects a map (Decoder.DecodeMapLen skips the ext header).
func TestGuardExtReadAsMap(t *testing.T) {
	// Payloads that are exactly one value are read the same both ways.
	for _, h := range []string{
		"c7 04 05 81 a1 6b 01",    // ext8 {k: 1}
		"d4 05 c0",                // fixext1 nil
		"c7 05 05 81 a0 d4 06 80", // ext8 {"": fixext1 {}}: nested
		"d6 05 d4 06 80 c0",       // fixext4 whose payload starts d4: opaque
	} {
		if err := Guard(hexFrame(h), DefaultLimits()); err != nil {
			t.Errorf("%s: %v", h, err)
		}
	}
	for _, h := range []string{
		"d5 05 c0 c0",             // fixext2: nil, then a byte msgpack would read next
		"c7 05 05 81 a0 d4 06 81", // nested ext whose map runs past both payloads
		"c7 05 05 81 a0 c7 00 06", // nested empty ext
	} {
		if err := Guard(hexFrame(h), DefaultLimits()); !errors.Is(err, errAmbiguousExt) {
			t.Errorf("%s: %v, want errAmbiguousExt", h, err)
		}
	}
	var p guardMapProbe
	if err := msgpack.Unmarshal(hexFrame("81 a1 4d c7 06 05 81 a1 6b 91 07"), &p); err != nil || p.M["k"][0] != 7 {
		t.Fatalf("msgpack no longer reads ext payloads as maps? M=%v err=%v", p.M, err)
	}
	for _, bomb := range guardBombs {
		if strings.Contains(bomb.name, "hiding") || strings.Contains(bomb.name, "ext8") {
			if err := Guard(bomb.frame, DefaultLimits()); !errors.Is(err, errAmbiguousExt) || !errors.Is(err, ErrMalformed) {
				t.Errorf("%s: %v, want ErrMalformed and errAmbiguousExt", bomb.name, err)
			}
		}
	}
	// Show the hazard is real (logged, not asserted: it is msgpack's behaviour).
	hidden := hexFrame("81 a1 43 d7 ff de ff ff 00 00 00 00 00") // {"C": timestamp-shaped ext hiding map16 65535}
	alloc := minTotalAlloc(3, func() { _ = msgpack.Unmarshal(hidden, new(guardProbe)) })
	t.Logf("unguarded: %d-byte frame with a timestamp-shaped ext allocated %d bytes", len(hidden), alloc)
}

// TestMsgpackNilTimePanics documents a msgpack v5.4.1 hazard Guard cannot
// see: decoding nil into a time.Time (any non-pointer type with a registered
// ext decoder) panics. Callers must recover around Unmarshal.
func TestMsgpackNilTimePanics(t *testing.T) {
	frame := hexFrame("81 a1 54 c0") // {"T": nil}
	if err := Guard(frame, DefaultLimits()); err != nil {
		t.Fatalf("Guard: %v", err)
	}
	var v struct{ T time.Time }
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Logf("Unmarshal of a guarded frame into struct{T time.Time} panicked: %v", r)
			}
		}()
		err := msgpack.Unmarshal(frame, &v)
		t.Logf("Unmarshal into struct{T time.Time} did not panic (err=%v); msgpack changed?", err)
	}()
}

// TestGuardTimestampNanos pins the cost of the ext rule for time.Time: the
// fraction of nanosecond values whose fixext8 encoding Guard refuses.
func TestGuardTimestampNanos(t *testing.T) {
	const steps = 10000
	refused := 0
	for i := 0; i < steps; i++ {
		tm := time.Unix(1700000000, int64(i)*(1e9/steps)+123)
		f := mustMarshal(t, tm)
		if f[0] != 0xd7 {
			t.Fatalf("expected fixext8, got % x", f)
		}
		err := Guard(f, DefaultLimits())
		risky := f[2] == 0xc0 || f[2]&0xf0 == 0x80 || f[2] == 0xde || f[2] == 0xdf
		switch {
		case risky && err != nil && !errors.Is(err, errAmbiguousExt):
			// (A risky payload that happens to be exactly one value passes.)
			t.Fatalf("%v (% x): %v, want errAmbiguousExt", tm, f, err)
		case !risky && err != nil:
			t.Fatalf("%v (% x): %v", tm, f, err)
		}
		if err != nil {
			refused++
		}
	}
	frac := float64(refused) / steps
	t.Logf("refused %.2f%% of nanosecond timestamps", 100*frac)
	if frac < 0.06 || frac > 0.09 {
		t.Errorf("refused %.2f%%, documented as about 8%%", 100*frac)
	}
	// Whole seconds (fixext4) are fine until 2038.
	if err := Guard(mustMarshal(t, time.Unix(2000000000, 0)), DefaultLimits()); err != nil {
		t.Error(err)
	}
}

func TestGuardDepth(t *testing.T) {
	lim := Limits{MaxDepth: 32}
	if err := Guard(nested(32), lim); err != nil {
		t.Errorf("depth 32: %v", err)
	}
	if err := Guard(nested(33), lim); !errors.Is(err, ErrMalformed) {
		t.Errorf("depth 33: %v, want ErrMalformed", err)
	}
	// Empty containers count as a level too.
	emptyAt33 := append(bytes.Repeat([]byte{0x91}, 32), 0x90)
	if err := Guard(emptyAt33, lim); !errors.Is(err, ErrMalformed) {
		t.Errorf("empty array at depth 33: %v, want ErrMalformed", err)
	}
	// Siblings do not add depth: 30 levels, a fixarray of 15 [nil]s = depth 32.
	wide := append(bytes.Repeat([]byte{0x91}, 30), 0x9f)
	for i := 0; i < 15; i++ {
		wide = append(wide, 0x91, 0xc0)
	}
	if err := Guard(wide, lim); err != nil {
		t.Errorf("wide at depth 32: %v", err)
	}
	// Maps nest like arrays.
	m := append(bytes.Repeat([]byte{0x81, 0xa0}, 33), 0xc0)
	if err := Guard(m, lim); !errors.Is(err, ErrMalformed) {
		t.Errorf("map depth 33: %v, want ErrMalformed", err)
	}
	if err := Guard(m[2:], lim); err != nil {
		t.Errorf("map depth 32: %v", err)
	}
	// Beyond the inline stack (inlineDepth) when allowed.
	if err := Guard(nested(300), Limits{MaxDepth: 300}); err != nil {
		t.Errorf("depth 300 / MaxDepth 300: %v", err)
	}
	if err := Guard(nested(301), Limits{MaxDepth: 300}); !errors.Is(err, ErrMalformed) {
		t.Errorf("depth 301 / MaxDepth 300: %v", err)
	}
	// MaxDepth is clamped to maxGuardDepth.
	huge := Limits{MaxDepth: 1 << 30}
	if err := Guard(nested(maxGuardDepth), huge); err != nil {
		t.Errorf("depth %d: %v", maxGuardDepth, err)
	}
	if err := Guard(nested(maxGuardDepth+1), huge); !errors.Is(err, ErrMalformed) {
		t.Errorf("depth %d: %v, want ErrMalformed", maxGuardDepth+1, err)
	}
	// Deep input is refused without recursion, whatever its size.
	if err := Guard(nested(1<<20-1), DefaultLimits()); !errors.Is(err, ErrMalformed) {
		t.Errorf("depth 1M: %v", err)
	}
}

func TestGuardItems(t *testing.T) {
	// fixarray of 10 nils = 11 values.
	f := append([]byte{0x9a}, bytes.Repeat([]byte{0xc0}, 10)...)
	if err := Guard(f, Limits{MaxItems: 11}); err != nil {
		t.Errorf("11 items / MaxItems 11: %v", err)
	}
	if err := Guard(f, Limits{MaxItems: 10}); !errors.Is(err, ErrMalformed) {
		t.Errorf("11 items / MaxItems 10: %v", err)
	}
	// A map entry is two values: {"a": nil} = 3.
	if err := Guard(hexFrame("81 a1 61 c0"), Limits{MaxItems: 3}); err != nil {
		t.Errorf("map 3 items: %v", err)
	}
	if err := Guard(hexFrame("81 a1 61 c0"), Limits{MaxItems: 2}); !errors.Is(err, ErrMalformed) {
		t.Errorf("map 3 items / MaxItems 2: %v", err)
	}
	// Default: 65536 values. array16 of 65535 nils = 65536 values.
	a := append([]byte{0xdc, 0xff, 0xff}, bytes.Repeat([]byte{0xc0}, 65535)...)
	if err := Guard(a, DefaultLimits()); err != nil {
		t.Errorf("65536 items: %v", err)
	}
	a = append([]byte{0x92, 0xc0}, a...)
	if err := Guard(a, DefaultLimits()); !errors.Is(err, ErrMalformed) {
		t.Errorf("65538 items: %v", err)
	}
}

func TestGuardMaxBytes(t *testing.T) {
	f := mustMarshal(t, strings.Repeat("x", 100)) // d9 64 + 100 = 102 bytes
	if err := Guard(f, Limits{MaxBytes: len(f)}); err != nil {
		t.Errorf("at MaxBytes: %v", err)
	}
	if err := Guard(f, Limits{MaxBytes: len(f) - 1}); !errors.Is(err, ErrMalformed) {
		t.Errorf("over MaxBytes: %v", err)
	}
	over := mustMarshal(t, make([]byte, DefaultLimits().MaxBytes))
	if err := Guard(over, Limits{}); !errors.Is(err, ErrMalformed) {
		t.Errorf("over default MaxBytes with zero Limits: %v", err)
	}
}

func TestGuardDefaults(t *testing.T) {
	want := Limits{MaxBytes: 1 << 20, MaxDepth: 32, MaxItems: 65536}
	if got := DefaultLimits(); got != want {
		t.Fatalf("DefaultLimits() = %+v, want %+v", got, want)
	}
	// The zero Limits behaves like the defaults.
	if err := Guard(nested(32), Limits{}); err != nil {
		t.Errorf("zero Limits, depth 32: %v", err)
	}
	if err := Guard(nested(33), Limits{}); !errors.Is(err, ErrMalformed) {
		t.Errorf("zero Limits, depth 33: %v", err)
	}
}

func TestGuardErrorOffsets(t *testing.T) {
	for _, c := range []struct {
		hex  string
		want string
	}{
		{"92 c0 c1", "at offset 2"},
		{"c0 c0", "at offset 1"},
		{"91 db ff ff ff ff", "at offset 1"},
		{"dd ff ff ff ff", "at offset 0"},
		{"92 a3 61 62", "at offset 1"},
	} {
		err := Guard(hexFrame(c.hex), DefaultLimits())
		if !errors.Is(err, ErrMalformed) || !strings.HasSuffix(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrMalformed ending %q", c.hex, err, c.want)
		}
	}
}

func realisticFrame(t testing.TB) []byte {
	f := mustMarshal(t, map[string]any{
		"type":    "task.submit",
		"id":      "0f8fad5b-d9cb-469f-a165-70867728950e",
		"from":    "node-7.eu-west",
		"ts":      int64(1718000000123),
		"retries": 3,
		"headers": map[string]string{
			"trace-id":     "4bf92f3577b34da6a3ce929d3e0e4736",
			"content-type": "application/x-msgpack",
			"priority":     "high",
		},
		"args":    []any{"resize", 1024, 768, true},
		"payload": bytes.Repeat([]byte{0xab}, 96),
	})
	if len(f) < 250 || len(f) > 350 {
		t.Fatalf("realistic frame is %d bytes, want ~300", len(f))
	}
	return f
}

func TestGuardZeroAllocs(t *testing.T) {
	f := realisticFrame(t)
	lim := DefaultLimits()
	if a := testing.AllocsPerRun(100, func() {
		if err := Guard(f, lim); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("Guard allocates %v times per call on a valid frame", a)
	}
	deep := nested(inlineDepth)
	if a := testing.AllocsPerRun(100, func() { _ = Guard(deep, Limits{MaxDepth: inlineDepth}) }); a != 0 {
		t.Errorf("Guard allocates %v times per call at depth %d", a, inlineDepth)
	}
	wrapped := hexFrame("c7 05 05 81 a0 d4 06 80") // two nested exts scanned as values
	if err := Guard(wrapped, lim); err != nil {
		t.Fatal(err)
	}
	if a := testing.AllocsPerRun(100, func() { _ = Guard(wrapped, lim) }); a != 0 {
		t.Errorf("Guard allocates %v times per call with nested ext payloads", a)
	}
}

// totalAlloc returns the bytes allocated (process-wide) while f runs.
func totalAlloc(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// minTotalAlloc is the least of n measurements: TotalAlloc is process-wide,
// so background goroutines can only inflate a single reading.
func minTotalAlloc(n int, f func()) uint64 {
	best := uint64(math.MaxUint64)
	for i := 0; i < n; i++ {
		best = min(best, totalAlloc(f))
	}
	return best
}

// guardMapProbe has the map-typed fields through which msgpack reads ext
// payloads as maps, and fields that amplify more than guardProbe.
// (No time.Time field: msgpack v5.4.1 panics decoding nil into one; see
// TestMsgpackNilTimePanics.)
type guardMapProbe struct {
	M map[string][]int
	A map[string]any
	S []map[string]string
	P *guardProbe
}

// decodeTargets are the types accepted frames are decoded into, with the
// allocation each may cost per frame byte (measured worst cases: guardProbe
// about 40x, a map of empty-string pairs; guardMapProbe about 120x, a list
// of one-entry maps).
var decodeTargets = []struct {
	name    string
	new     func() any
	perByte uint64
}{
	{"guardProbe", func() any { return new(guardProbe) }, 64},
	{"guardMapProbe", func() any { return new(guardMapProbe) }, 256},
}

// checkAcceptedDecodes decodes an accepted frame into each decode target and
// fails if that panics or allocates more than perByte*len(b)+slack.
func checkAcceptedDecodes(t testing.TB, b []byte, slack uint64) {
	t.Helper()
	for _, target := range decodeTargets {
		decode := func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("Unmarshal(% x) into %s panicked on a guarded frame: %v", b[:min(len(b), 64)], target.name, r)
				}
			}()
			_ = msgpack.Unmarshal(b, target.new())
		}
		budget := target.perByte*uint64(len(b)) + slack
		if a := totalAlloc(decode); a > budget {
			if a = minTotalAlloc(3, decode); a > budget {
				t.Fatalf("Unmarshal of accepted %d-byte frame % x into %s allocated %d bytes > budget %d",
					len(b), b[:min(len(b), 64)], target.name, a, budget)
			}
		}
	}
}

// warmDecoders fills msgpack's per-type caches so they are not charged to
// the first frame measured.
func warmDecoders() {
	for _, target := range decodeTargets {
		_ = msgpack.Unmarshal([]byte{0x80}, target.new())
	}
}

// readFuzzCorpus reads the committed FuzzGuard corpus ("go test fuzz v1"
// files holding one []byte each).
func readFuzzCorpus(t *testing.T) map[string][]byte {
	dir := filepath.Join("testdata", "fuzz", "FuzzGuard")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("reading corpus: %v", err)
	}
	out := make(map[string][]byte, len(entries))
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		if len(lines) != 2 || lines[0] != "go test fuzz v1" ||
			!strings.HasPrefix(lines[1], "[]byte(") || !strings.HasSuffix(lines[1], ")") {
			t.Fatalf("%s: not a one-[]byte go fuzz file", e.Name())
		}
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		out[e.Name()] = []byte(s)
	}
	if len(out) == 0 {
		t.Fatal("empty fuzz corpus")
	}
	return out
}

func TestGuardCorpusAcceptedFramesDecodeBounded(t *testing.T) {
	warmDecoders()
	accepted := 0
	for name, b := range readFuzzCorpus(t) {
		if Guard(b, DefaultLimits()) != nil {
			continue
		}
		accepted++
		t.Run(name, func(t *testing.T) { checkAcceptedDecodes(t, b, 64<<10) })
	}
	for _, c := range goodFrames(t) {
		if Guard(c.frame, DefaultLimits()) == nil {
			accepted++
			checkAcceptedDecodes(t, c.frame, 64<<10)
		}
	}
	if accepted < 10 {
		t.Fatalf("only %d accepted frames checked", accepted)
	}
}

// TestGuardWorstCaseAmplification pins down the worst amplification we know
// for guardProbe: a map of empty-string pairs (2 bytes per entry, which
// msgpack preallocates) and an array of nils into []int.
func TestGuardWorstCaseAmplification(t *testing.T) {
	for _, c := range []struct {
		name string
		head []byte
		elem []byte
		n    int
	}{
		{"C map16 of empty pairs", []byte{0x81, 0xa1, 'C', 0xde, 0x7f, 0xfe}, []byte{0xa0, 0xa0}, 0x7ffe},
		{"C map16 of 1-byte keys", []byte{0x81, 0xa1, 'C', 0xde, 0x55, 0x00}, []byte{0xa1, 'k', 0xa0}, 0x5500},
		{"B array16 of nils", []byte{0x81, 0xa1, 'B', 0xdc, 0xff, 0xf0}, []byte{0xc0}, 0xfff0},
	} {
		f := append(append([]byte{}, c.head...), bytes.Repeat(c.elem, c.n)...)
		if err := Guard(f, DefaultLimits()); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var p guardProbe
		a := minTotalAlloc(3, func() { p = guardProbe{}; _ = msgpack.Unmarshal(f, &p) })
		t.Logf("%s: %d-byte frame allocated %d bytes (%.1fx)", c.name, len(f), a, float64(a)/float64(len(f)))
		checkAcceptedDecodes(t, f, 64<<10)
	}
}

func BenchmarkGuard(b *testing.B) {
	f := realisticFrame(b)
	lim := DefaultLimits()
	b.SetBytes(int64(len(f)))
	b.ReportAllocs()
	for b.Loop() {
		if err := Guard(f, lim); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGuardBomb(b *testing.B) {
	f := hexFrame("dd ff ff ff ff")
	lim := DefaultLimits()
	b.ReportAllocs()
	for b.Loop() {
		if Guard(f, lim) == nil {
			b.Fatal("accepted")
		}
	}
}

// BenchmarkUnmarshalRealistic is for comparison: the decode Guard protects.
func BenchmarkUnmarshalRealistic(b *testing.B) {
	f := realisticFrame(b)
	b.SetBytes(int64(len(f)))
	b.ReportAllocs()
	for b.Loop() {
		var m map[string]any
		if err := msgpack.Unmarshal(f, &m); err != nil {
			b.Fatal(err)
		}
	}
}
