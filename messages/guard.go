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
	MaxDepth int // nesting of arrays/maps; default 32 (clamped to 1024)
	MaxItems int // total count of values in the frame; default 65536
}

// Default limits; see Limits.
const (
	defaultMaxBytes = 1 << 20
	defaultMaxDepth = 32
	defaultMaxItems = 65536

	// maxGuardDepth is the hard ceiling on Limits.MaxDepth. msgpack decodes
	// recursively, so very deep frames cost stack (≈250 B per level in
	// msgpack v5.4.1; a ~4 MiB frame of nested fixarrays overflows the 1 GB
	// goroutine stack and kills the process). Larger MaxDepth values are
	// clamped to this.
	maxGuardDepth = 1024
)

// inlineDepth is how many nesting levels Guard tracks in a stack-allocated
// array; deeper frames (when allowed by MaxDepth) cost one heap growth
// proportional to the actual nesting, never to a claimed length.
const inlineDepth = 64

// DefaultLimits returns the defaults above.
func DefaultLimits() Limits {
	return Limits{MaxBytes: defaultMaxBytes, MaxDepth: defaultMaxDepth, MaxItems: defaultMaxItems}
}

// ErrMalformed is returned (wrapped, with detail and byte offset) for any frame the guard refuses.
var ErrMalformed = errors.New("messages: malformed frame")

// errAmbiguousExt is also wrapped when an ext value could be read two ways
// (see Guard).
var errAmbiguousExt = errors.New("ext payload that msgpack would decode as a map where a map is expected is not exactly one well-formed value")

func malformed(off int, format string, args ...any) error {
	return fmt.Errorf("%w: %s at offset %d", ErrMalformed, fmt.Sprintf(format, args...), off)
}

// Format classes for the first byte of a msgpack value.
const (
	clsInvalid = iota // 0xc1 (never used)
	clsFixed          // total size (header included) in fixedSize
	clsFixStr         // 0xa0-0xbf: length in low 5 bits
	clsFixArr         // 0x90-0x9f
	clsFixMap         // 0x80-0x8f
	clsBytes8         // str8/bin8: 1-byte length, then payload
	clsBytes16        // str16/bin16
	clsBytes32        // str32/bin32
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
var (
	class     [256]uint8
	fixedSize [256]uint8
)

func init() {
	for c := 0; c < 256; c++ {
		switch {
		case c <= 0x7f, c >= 0xe0: // positive / negative fixint
			class[c], fixedSize[c] = clsFixed, 1
		case c <= 0x8f:
			class[c] = clsFixMap
		case c <= 0x9f:
			class[c] = clsFixArr
		case c <= 0xbf:
			class[c] = clsFixStr
		}
	}
	fixed := map[byte]uint8{
		0xc0: 1, 0xc2: 1, 0xc3: 1, // nil, false, true
		0xca: 5, 0xcb: 9, // float32, float64
		0xcc: 2, 0xcd: 3, 0xce: 5, 0xcf: 9, // uint8..64
		0xd0: 2, 0xd1: 3, 0xd2: 5, 0xd3: 9, // int8..64
	}
	for c, n := range fixed {
		class[c], fixedSize[c] = clsFixed, n
	}
	for c, n := range map[byte]uint8{0xd4: 1, 0xd5: 2, 0xd6: 4, 0xd7: 8, 0xd8: 16} {
		class[c], fixedSize[c] = clsFixExt, n // payload size
	}
	for c, k := range map[byte]uint8{
		0xc4: clsBytes8, 0xc5: clsBytes16, 0xc6: clsBytes32, // bin
		0xd9: clsBytes8, 0xda: clsBytes16, 0xdb: clsBytes32, // str
		0xc7: clsExt8, 0xc8: clsExt16, 0xc9: clsExt32,
		0xdc: clsArr16, 0xdd: clsArr32,
		0xde: clsMap16, 0xdf: clsMap32,
	} {
		class[c] = k
	}
	class[0xc1] = clsInvalid
}

// Guard walks b once without allocating proportional to any claimed length and returns nil
// only if b holds exactly one well-formed msgpack value (no trailing bytes) such that:
//   - every str/bin/ext length fits in the bytes that remain;
//   - every array/map element count could fit in the bytes that remain (each element needs >= 1 byte; map entries >= 2);
//   - nesting depth <= MaxDepth, total values <= MaxItems, len(b) <= MaxBytes;
//   - no reserved byte 0xc1.
//
// Errors wrap ErrMalformed (use fmt.Errorf("%w: ...at offset %d", ErrMalformed, ...)); callers test with errors.Is.
//
// The length checks are global: all values still owed by every open
// container must fit (one byte each) in the bytes that remain, which implies
// the per-container rule above. Every value counts towards MaxItems: map keys,
// map values, array elements and the containers themselves. Depth counts
// containers only, so 32 nested fixarrays around a nil have depth 32.
//
// Guard is iterative and does not allocate for frames nested at most 64
// deep; it is safe for concurrent use.
func Guard(b []byte, lim Limits) error {
	maxBytes, maxDepth, maxItems := lim.MaxBytes, lim.MaxDepth, lim.MaxItems
	if maxBytes <= 0 {
		maxBytes = defaultMaxBytes
	}
	if maxDepth <= 0 {
		maxDepth = defaultMaxDepth
	}
	if maxDepth > maxGuardDepth {
		maxDepth = maxGuardDepth
	}
	if maxItems <= 0 {
		maxItems = defaultMaxItems
	}

	n := len(b)
	if n == 0 {
		return malformed(0, "empty frame")
	}
	if n > maxBytes {
		return malformed(0, "frame of %d bytes exceeds MaxBytes %d", n, maxBytes)
	}

	// pending counts the values still owed: the top-level value plus every
	// child announced by an open container and not yet read. Reading a
	// value decrements it; opening a container with k children adds k.
	// stack holds, for each open non-empty container, the value pending
	// will have when its last child is complete, so a container closes when
	// pending falls back to its entry (no per-level counts to decrement).
	// committed is the number of values the frame has announced so far
	// (read or pending); it only grows when a container opens, so MaxItems
	// is checked there.
	var inline [inlineDepth]int
	stack := inline[:0]
	var extInline [4]extFrame
	exts := extInline[:0] // open exts scanned as values, innermost last
	pos, pending, committed := 0, 1, 1

	for pending > 0 {
		if pos >= n {
			return malformed(pos, "truncated: %d more value(s) expected", pending)
		}
		start := pos
		c := b[pos]
		pending--

		var (
			length   uint64 // str/bin/ext payload bytes after the header
			children uint64 // values owed by an array/map
			extEnd   = -1   // for an ext scanned as a value: where it must end
		)
		if c-0xa0 < 0x20 { // fixstr, the most common value in our frames
			sz := 1 + int(c&0x1f)
			if sz > n-pos {
				return malformed(start, "truncated fixstr: need %d bytes, have %d", sz, n-pos)
			}
			pos += sz
			goto done
		}
		switch class[c] {
		case clsFixed:
			sz := int(fixedSize[c])
			if sz > n-pos {
				return malformed(start, "truncated 0x%02x value: need %d bytes, have %d", c, sz, n-pos)
			}
			pos += sz
			goto done
		case clsFixStr:
			pos++
			length = uint64(c & 0x1f)
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
				return malformed(start, "truncated 0x%02x header", c)
			}
			length = uint64(b[pos+1])
			pos += 2
		case clsBytes16:
			if n-pos < 3 {
				return malformed(start, "truncated 0x%02x header", c)
			}
			length = uint64(be16(b[pos+1:]))
			pos += 3
		case clsBytes32:
			if n-pos < 5 {
				return malformed(start, "truncated 0x%02x header", c)
			}
			length = uint64(be32(b[pos+1:]))
			pos += 5
		case clsFixExt:
			if n-pos < 2 {
				return malformed(start, "truncated fixext header")
			}
			length = uint64(fixedSize[c])
			pos += 2
			goto ext
		case clsExt8:
			if n-pos < 3 {
				return malformed(start, "truncated ext8 header")
			}
			length = uint64(b[pos+1])
			pos += 3
			goto ext
		case clsExt16:
			if n-pos < 4 {
				return malformed(start, "truncated ext16 header")
			}
			length = uint64(be16(b[pos+1:]))
			pos += 4
			goto ext
		case clsExt32:
			if n-pos < 6 {
				return malformed(start, "truncated ext32 header")
			}
			length = uint64(be32(b[pos+1:]))
			pos += 6
			goto ext
		case clsArr16:
			if n-pos < 3 {
				return malformed(start, "truncated array16 header")
			}
			children = uint64(be16(b[pos+1:]))
			pos += 3
			goto open
		case clsArr32:
			if n-pos < 5 {
				return malformed(start, "truncated array32 header")
			}
			children = uint64(be32(b[pos+1:]))
			pos += 5
			goto open
		case clsMap16:
			if n-pos < 3 {
				return malformed(start, "truncated map16 header")
			}
			children = 2 * uint64(be16(b[pos+1:]))
			pos += 3
			goto open
		case clsMap32:
			if n-pos < 5 {
				return malformed(start, "truncated map32 header")
			}
			children = 2 * uint64(be32(b[pos+1:]))
			pos += 5
			goto open
		default:
			return malformed(start, "reserved byte 0x%02x", c)
		}

		// str or bin payload.
		if left := uint64(n - pos); length > left {
			return malformed(start, "0x%02x payload of %d bytes but only %d remain", c, length, left)
		}
		pos += int(length)
		goto done

	ext:
		if left := uint64(n - pos); length > left {
			return malformed(start, "0x%02x payload of %d bytes but only %d remain", c, length, left)
		}
		// msgpack v5.4.1 (Decoder.DecodeMapLen) skips an ext header where
		// it expects a map and reads the map from the payload onwards,
		// ignoring the ext length. Only a payload starting with nil or a map
		// header gets past its first byte; such a payload must be exactly
		// one well-formed value, so both readings agree. An empty payload
		// would make msgpack read the following value instead.
		if length == 0 {
			return fmt.Errorf("%w: %w at offset %d", ErrMalformed, errAmbiguousExt, start)
		}
		if p0 := b[pos]; p0 != 0xc0 && p0-0x80 >= 0x10 && p0 != 0xde && p0 != 0xdf {
			pos += int(length)
			goto done
		}
		// Scan the payload in place as a one-value container that must
		// end exactly where the payload does.
		children = 1
		extEnd = pos + int(length)

	open:
		// Every value owed, by this container and by the enclosing ones,
		// needs at least one byte. This bounds children by len(b), so the
		// int conversions below cannot overflow.
		if left := uint64(n - pos); uint64(pending)+children > left {
			return malformed(start, "container claims %d values but only %d bytes remain for %d owed", children, left, uint64(pending)+children)
		}
		if uint64(committed)+children > uint64(maxItems) {
			return malformed(start, "container of %d values exceeds MaxItems %d", children, maxItems)
		}
		if len(stack) >= maxDepth {
			return malformed(start, "nesting deeper than MaxDepth %d", maxDepth)
		}
		if children > 0 {
			if extEnd >= 0 {
				exts = append(exts, extFrame{level: len(stack), start: start, end: extEnd})
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
				if pos != exts[len(exts)-1].end {
					return fmt.Errorf("%w: %w at offset %d", ErrMalformed, errAmbiguousExt, exts[len(exts)-1].start)
				}
				exts = exts[:len(exts)-1]
			}
		}
	}

	if pos != n {
		return malformed(pos, "%d trailing byte(s) after value", n-pos)
	}
	return nil
}

// extFrame records an ext whose payload Guard scans as a value: the stack
// level of its one-value container, its offset and where the payload ends.
type extFrame struct{ level, start, end int }

func be16(b []byte) uint16 { _ = b[1]; return uint16(b[0])<<8 | uint16(b[1]) }

func be32(b []byte) uint32 {
	_ = b[3]
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
