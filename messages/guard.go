package messages

import (
	"errors"
	"fmt"
)

// Limits bounds an untrusted frame before it is decoded.
//
// A zero or negative field means "use the default" (see DefaultLimits), so
// the zero Limits value is safe to pass to Guard.
type Limits struct {
	MaxBytes int // whole frame; default 1 MiB
	MaxDepth int // nesting of arrays/maps; default 32 (values above 1024 are clamped to 1024)
	MaxItems int // total count of values in the frame; default 65536
}

const (
	defaultMaxBytes = 1 << 20
	defaultMaxDepth = 32
	defaultMaxItems = 65536

	// maxGuardDepth is the hard ceiling on Limits.MaxDepth. msgpack decodes
	// recursively (about 250 bytes of goroutine stack per level in v5.4.1;
	// a 4 MiB frame of nested fixarrays overflows the 1 GB stack limit,
	// which kills the process, and 1 MiB of them takes seconds).
	maxGuardDepth = 1024

	// inlineDepth is how many open containers Guard tracks without
	// allocating; deeper frames, when MaxDepth allows them, cost heap
	// growth proportional to the actual nesting, never to a claimed length.
	inlineDepth = 40
)

// DefaultLimits returns the defaults above.
func DefaultLimits() Limits {
	return Limits{MaxBytes: defaultMaxBytes, MaxDepth: defaultMaxDepth, MaxItems: defaultMaxItems}
}

// ErrMalformed is returned (wrapped, with detail and byte offset) for any frame the guard refuses.
var ErrMalformed = errors.New("messages: malformed frame")

// errAmbiguousExt is wrapped alongside ErrMalformed when Guard refuses an
// ext value because msgpack could read its payload as a map (see Guard).
var errAmbiguousExt = errors.New("ext payload msgpack could decode as a map")

// extFrame is an ext value whose payload Guard scans as a value: its offset,
// the stack level of its one-value container, and where its payload starts
// and ends.
type extFrame struct{ start, level, from, end int }

// fail builds a refusal. Inside an ext scanned as a value it also names the
// outermost such ext, whose payload is what made the frame unacceptable.
func fail(off int, exts []extFrame, format string, args ...any) error {
	detail := fmt.Sprintf(format, args...)
	if len(exts) > 0 {
		return fmt.Errorf("%w: %w at offset %d: %s at offset %d",
			ErrMalformed, errAmbiguousExt, exts[0].start, detail, off)
	}
	return fmt.Errorf("%w: %s at offset %d", ErrMalformed, detail, off)
}

// Classes of the first byte of a msgpack value.
const (
	clsInvalid = iota // 0xc1, never used
	clsFixed          // nil, bool, fixint, int, uint, float: total size in fixedSize
	clsFixStr         // 0xa0-0xbf: length in the low 5 bits
	clsFixArr         // 0x90-0x9f
	clsFixMap         // 0x80-0x8f
	clsBytes8         // str8, bin8: 1-byte length, payload
	clsBytes16        // str16, bin16
	clsBytes32        // str32, bin32
	clsFixExt         // fixext1..16: type byte, payload of fixedSize bytes
	clsExt8           // ext8: 1-byte length, type byte, payload
	clsExt16          // ext16
	clsExt32          // ext32
	clsArr16          // array16
	clsArr32          // array32
	clsMap16          // map16
	clsMap32          // map32
)

// class and fixedSize are indexed by the first byte of a value.
var class, fixedSize = func() (cls, size [256]uint8) {
	for c := 0; c < 256; c++ {
		switch {
		case c <= 0x7f, c >= 0xe0: // positive, negative fixint
			cls[c], size[c] = clsFixed, 1
		case c <= 0x8f:
			cls[c] = clsFixMap
		case c <= 0x9f:
			cls[c] = clsFixArr
		case c <= 0xbf:
			cls[c] = clsFixStr
		}
	}
	for c, n := range map[byte]uint8{
		0xc0: 1, 0xc2: 1, 0xc3: 1, // nil, false, true
		0xca: 5, 0xcb: 9, // float32, float64
		0xcc: 2, 0xcd: 3, 0xce: 5, 0xcf: 9, // uint8..64
		0xd0: 2, 0xd1: 3, 0xd2: 5, 0xd3: 9, // int8..64
	} {
		cls[c], size[c] = clsFixed, n
	}
	for c, n := range map[byte]uint8{0xd4: 1, 0xd5: 2, 0xd6: 4, 0xd7: 8, 0xd8: 16} {
		cls[c], size[c] = clsFixExt, n
	}
	for c, k := range map[byte]uint8{
		0xc4: clsBytes8, 0xc5: clsBytes16, 0xc6: clsBytes32, // bin
		0xd9: clsBytes8, 0xda: clsBytes16, 0xdb: clsBytes32, // str
		0xc7: clsExt8, 0xc8: clsExt16, 0xc9: clsExt32,
		0xdc: clsArr16, 0xdd: clsArr32,
		0xde: clsMap16, 0xdf: clsMap32,
	} {
		cls[c] = k
	}
	return cls, size
}()

// Guard walks b once without allocating proportional to any claimed length and returns nil
// only if b holds exactly one well-formed msgpack value (no trailing bytes) such that:
//   - every str/bin/ext length fits in the bytes that remain;
//   - every array/map element count could fit in the bytes that remain (each element needs >= 1 byte; map entries >= 2);
//   - nesting depth <= MaxDepth, total values <= MaxItems, len(b) <= MaxBytes;
//   - no reserved byte 0xc1.
//
// Errors wrap ErrMalformed (use fmt.Errorf("%w: ...at offset %d", ErrMalformed, ...)); callers test with errors.Is.
//
// Details:
//   - The count check is global: every value still owed by every open
//     container needs a byte of its own, which implies the per-container
//     rule and also refuses e.g. [[nil, nil], <missing>, <missing>].
//   - Every value counts towards MaxItems (containers, map keys and values,
//     elements). Depth counts containers: 32 nested fixarrays around a nil
//     have depth 32; an empty container counts as a level.
//   - Ext payloads are opaque except in one case. Where msgpack v5.4.1
//     expects a map (Decoder.DecodeMapLen: any map-typed field, map[string]any
//     included) it skips an ext header and reads the map from the payload
//     onwards, ignoring the ext length. A payload whose first byte is nil
//     (0xc0) or a map header (0x80-0x8f, 0xde, 0xdf) must therefore be
//     exactly one value meeting all the rules above (it is scanned in
//     place, and counts as one more nesting level and one more value);
//     otherwise msgpack could read past it, e.g. a 13-byte timestamp-shaped
//     fixext8 whose payload starts df 7f ff ff ff makes it allocate a map of
//     2^31 entries. For the same reason a zero-length ext is refused. Such
//     refusals wrap an error naming the ext's offset.
//     Note the cost for time.Time: msgpack's fixext8 timestamps begin with a
//     byte derived from the nanoseconds, and about 8% of nanosecond values
//     (fractions in [0.537 s, 0.604 s), [0.805 s, 0.810 s), [0.931 s, 0.940 s))
//     give a first byte of 0x80-0x8f, 0xc0, 0xde or 0xdf; Guard refuses
//     those (unless the payload happens to be exactly one value). Carry
//     times as integers (e.g. Unix nanoseconds) in untrusted frames.
//
// Guard is iterative and safe for concurrent use. It does not allocate
// unless a frame nests deeper than 40 or nests more than two exts scanned
// as values (MaxDepth permitting); then it allocates in proportion to that
// nesting.
func Guard(b []byte, lim Limits) error {
	maxBytes, maxDepth, maxItems := lim.MaxBytes, lim.MaxDepth, lim.MaxItems
	if maxBytes <= 0 {
		maxBytes = defaultMaxBytes
	}
	if maxDepth <= 0 {
		maxDepth = defaultMaxDepth
	}
	maxDepth = min(maxDepth, maxGuardDepth)
	if maxItems <= 0 {
		maxItems = defaultMaxItems
	}

	n := len(b)
	if n == 0 {
		return fail(0, nil, "empty frame")
	}
	if n > maxBytes {
		return fail(0, nil, "frame of %d bytes exceeds MaxBytes %d", n, maxBytes)
	}

	// pending counts the values still owed: the top-level value plus every
	// child announced by an open container and not yet read. Reading a
	// value decrements it; opening a container with k children adds k.
	// stack holds, for each open non-empty container, the value pending
	// will have once its last child is complete, so a container closes
	// when pending falls back to its entry: no per-level counts to update.
	// committed counts the values announced so far (read or pending); it
	// only grows when a container opens, so MaxItems is checked there.
	var inline [inlineDepth]int
	stack := inline[:0]
	var extInline [2]extFrame
	exts := extInline[:0] // open exts scanned as values, innermost last
	pos, pending, committed := 0, 1, 1

	for pending > 0 {
		if pos >= n {
			return fail(pos, exts, "truncated: %d more value(s) expected", pending)
		}
		start := pos
		c := b[pos]
		pending--

		var (
			length   uint64 // str/bin/ext payload bytes after the header
			children uint64 // values owed by an array or map
			extEnd   = -1   // for an ext scanned as a value: where it must end
		)
		if c-0xa0 < 0x20 { // fixstr, the most common value; checked first, it is faster than the table
			sz := 1 + int(c&0x1f)
			if sz > n-pos {
				return fail(start, exts, "truncated fixstr: need %d bytes, have %d", sz, n-pos)
			}
			pos += sz
			goto done
		}
		switch class[c] {
		case clsFixed:
			sz := int(fixedSize[c])
			if sz > n-pos {
				return fail(start, exts, "truncated 0x%02x value: need %d bytes, have %d", c, sz, n-pos)
			}
			pos += sz
			goto done
		case clsFixArr:
			pos++
			children = uint64(c & 0x0f)
			goto open
		case clsFixMap:
			pos++
			children = 2 * uint64(c&0x0f)
			goto open
		case clsBytes8:
			if n-pos < 2 {
				return fail(start, exts, "truncated 0x%02x header", c)
			}
			length = uint64(b[pos+1])
			pos += 2
		case clsBytes16:
			if n-pos < 3 {
				return fail(start, exts, "truncated 0x%02x header", c)
			}
			length = uint64(be16(b[pos+1:]))
			pos += 3
		case clsBytes32:
			if n-pos < 5 {
				return fail(start, exts, "truncated 0x%02x header", c)
			}
			length = uint64(be32(b[pos+1:]))
			pos += 5
		case clsFixExt:
			if n-pos < 2 {
				return fail(start, exts, "truncated fixext header")
			}
			length = uint64(fixedSize[c])
			pos += 2
			goto ext
		case clsExt8:
			if n-pos < 3 {
				return fail(start, exts, "truncated ext8 header")
			}
			length = uint64(b[pos+1])
			pos += 3
			goto ext
		case clsExt16:
			if n-pos < 4 {
				return fail(start, exts, "truncated ext16 header")
			}
			length = uint64(be16(b[pos+1:]))
			pos += 4
			goto ext
		case clsExt32:
			if n-pos < 6 {
				return fail(start, exts, "truncated ext32 header")
			}
			length = uint64(be32(b[pos+1:]))
			pos += 6
			goto ext
		case clsArr16:
			if n-pos < 3 {
				return fail(start, exts, "truncated array16 header")
			}
			children = uint64(be16(b[pos+1:]))
			pos += 3
			goto open
		case clsArr32:
			if n-pos < 5 {
				return fail(start, exts, "truncated array32 header")
			}
			children = uint64(be32(b[pos+1:]))
			pos += 5
			goto open
		case clsMap16:
			if n-pos < 3 {
				return fail(start, exts, "truncated map16 header")
			}
			children = 2 * uint64(be16(b[pos+1:]))
			pos += 3
			goto open
		case clsMap32:
			if n-pos < 5 {
				return fail(start, exts, "truncated map32 header")
			}
			children = 2 * uint64(be32(b[pos+1:]))
			pos += 5
			goto open
		default:
			return fail(start, exts, "reserved byte 0x%02x", c)
		}

		// str or bin payload.
		if left := uint64(n - pos); length > left {
			return fail(start, exts, "0x%02x payload of %d bytes but only %d remain", c, length, left)
		}
		pos += int(length)
		goto done

	ext:
		if left := uint64(n - pos); length > left {
			return fail(start, exts, "0x%02x payload of %d bytes but only %d remain", c, length, left)
		}
		if length == 0 {
			// msgpack, expecting a map, would read the next value instead.
			return fail(start, append(exts, extFrame{start: start}), "empty ext payload")
		}
		if p0 := b[pos]; p0 != 0xc0 && p0-0x80 >= 0x10 && p0 != 0xde && p0 != 0xdf {
			pos += int(length) // msgpack cannot read this payload as a map
			goto done
		}
		// Scan the payload in place as a one-value container that must end
		// exactly where the payload does.
		children = 1
		extEnd = pos + int(length)

	open:
		// Every value owed, by this container and by the enclosing ones,
		// needs at least one byte. This bounds children by len(b), so the
		// int conversions below cannot overflow.
		if left := uint64(n - pos); uint64(pending)+children > left {
			return fail(start, exts, "container of %d values but only %d bytes remain for %d values owed",
				children, left, uint64(pending)+children)
		}
		if uint64(committed)+children > uint64(maxItems) {
			return fail(start, exts, "container of %d values exceeds MaxItems %d", children, maxItems)
		}
		if len(stack) >= maxDepth {
			return fail(start, exts, "nesting deeper than MaxDepth %d", maxDepth)
		}
		if children > 0 {
			if extEnd >= 0 {
				exts = append(exts, extFrame{start: start, level: len(stack), from: extEnd - int(length), end: extEnd})
			}
			stack = append(stack, pending)
			pending += int(children)
			committed += int(children)
			continue // its children are still owed
		}

	done:
		// Close every container this value completed.
		for len(stack) > 0 && stack[len(stack)-1] == pending {
			stack = stack[:len(stack)-1]
			if len(exts) > 0 && exts[len(exts)-1].level == len(stack) {
				if e := exts[len(exts)-1]; pos != e.end {
					return fail(e.start, exts, "its %d-byte payload holds a value of %d bytes", e.end-e.from, pos-e.from)
				}
				exts = exts[:len(exts)-1]
			}
		}
	}

	if pos != n {
		return fail(pos, nil, "%d trailing byte(s) after value", n-pos)
	}
	return nil
}

func be16(b []byte) uint16 { _ = b[1]; return uint16(b[0])<<8 | uint16(b[1]) }

func be32(b []byte) uint32 {
	_ = b[3]
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
