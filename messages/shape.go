package messages

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// The shape check: every message is a msgpack map with string keys, and so
// is every message struct inside it (access, error, tools entries, …).
//
// msgpack.Unmarshal is more lenient: it decodes an array laid out like a
// struct's fields into the struct, takes bin or nil as a key, and reads a
// map out of an ext's payload. None of that is the protocol, and a frame a
// node accepts must mean the same to every implementation, so Decode
// refuses such frames (ErrMalformed, invalid_request on the wire) before
// either decoder sees them.
//
// The rule, checked against the destination's type:
//   - the frame is a map; every key of it is a str;
//   - the value of a key naming a struct field (or pointer to one) is a map
//     checked by the same rule, or nil;
//   - the value of a key naming a slice of structs is an array (or nil)
//     whose every element is such a map;
//   - the value of a key naming a map field is a map (or nil) whose keys
//     are str, and whose values follow the rule if they are structs;
//   - values of unknown keys, and of other fields, are not looked into
//     (unknown keys are ignored; the decoder checks scalar types).
//
// checkShape runs after Guard, so lengths are known to fit and nesting is
// bounded. It reads the frame once, does not allocate (except to build a
// type's shape on its first use), and its recursion follows the types', not
// the frame's, nesting.

// shape is what a struct's map must hold: its keys, each with its field's shape.
type shape struct {
	name string
	// fields are the keys that need a look (structs, lists of structs,
	// maps); a linear scan of a few beats hashing the key.
	fields []namedField
}

type namedField struct {
	key string
	*fieldShape
}

// field returns the shape of key's value, or nil (skip it).
func (s *shape) field(key []byte) *fieldShape {
	for i := range s.fields {
		if string(key) == s.fields[i].key {
			return s.fields[i].fieldShape
		}
	}
	return nil
}

type fieldKind uint8

const (
	fieldStruct  fieldKind = iota + 1 // a struct or pointer to one: map or nil
	fieldStructs                      // a slice/array of structs: array or nil of maps
	fieldMap                          // a map: map or nil with str keys
)

type fieldShape struct {
	kind fieldKind
	sub  *shape // the struct's shape; for maps, the values' (nil: not structs)
}

// shapes caches a shape per destination type (reflect.Type → *shape).
var shapes sync.Map

// shapeOf returns the shape of the struct m points to (nil if m is not a
// pointer to a struct: nothing to check beyond "a map").
func shapeOf(m Message) *shape {
	t := reflect.TypeOf(m)
	if s, ok := shapes.Load(t); ok {
		return s.(*shape)
	}
	var s *shape
	if t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
		s = buildShape(t.Elem(), map[reflect.Type]*shape{})
	}
	v, _ := shapes.LoadOrStore(t, s)
	return v.(*shape)
}

// buildShape reads the msgpack field names of t the way msgpack does: the
// tag's name, else the Go field name; "-" skips; an untagged embedded
// struct (or one tagged ",inline") has its fields inlined.
func buildShape(t reflect.Type, seen map[reflect.Type]*shape) *shape {
	if s, ok := seen[t]; ok {
		return s
	}
	s := &shape{name: t.Name()}
	seen[t] = s
	addFields(s, t, seen)
	return s
}

func addFields(s *shape, t reflect.Type, seen map[reflect.Type]*shape) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("msgpack")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		ft := f.Type
		if f.Anonymous && (name == "" && ft.Kind() == reflect.Struct || strings.Contains(opts, "inline")) {
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				addFields(s, ft, seen)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if fs := fieldShapeOf(ft, seen); fs != nil {
			s.fields = append(s.fields, namedField{key: name, fieldShape: fs})
		}
	}
}

// structType reports t (or what it points to) when that is a struct
// msgpack decodes field by field.
func structType(t reflect.Type) (reflect.Type, bool) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t.PkgPath() == "time" {
		return nil, false
	}
	return t, true
}

func fieldShapeOf(t reflect.Type, seen map[reflect.Type]*shape) *fieldShape {
	if st, ok := structType(t); ok {
		return &fieldShape{kind: fieldStruct, sub: buildShape(st, seen)}
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		if st, ok := structType(t.Elem()); ok {
			return &fieldShape{kind: fieldStructs, sub: buildShape(st, seen)}
		}
	case reflect.Map:
		fs := &fieldShape{kind: fieldMap}
		if st, ok := structType(t.Elem()); ok {
			fs.sub = buildShape(st, seen)
		}
		return fs
	}
	return nil
}

// checkShape refuses a (guarded) frame that is not a map with str keys
// shaped like m's type.
func checkShape(b []byte, m Message) error {
	w := shapeWalker{b: b}
	return w.object(shapeOf(m), false)
}

// shapeWalker reads a frame Guard accepted. It still checks every bound,
// so a frame that did not pass Guard is refused, never a panic.
type shapeWalker struct {
	b []byte
	i int
}

func (w *shapeWalker) fail(format string, args ...any) error {
	return fmt.Errorf("%w: %s at offset %d", ErrMalformed, fmt.Sprintf(format, args...), w.i)
}

func (w *shapeWalker) peek() (byte, bool) {
	if w.i >= len(w.b) {
		return 0, false
	}
	return w.b[w.i], true
}

func (w *shapeWalker) isNil() bool {
	c, ok := w.peek()
	return ok && c == 0xc0
}

// header reads a container header: its element count (a map's entries
// count once) and whether it is a map or array.
func (w *shapeWalker) header() (n int, isMap, ok bool) {
	c, ok := w.peek()
	if !ok {
		return 0, false, false
	}
	size := 1
	var v uint32
	switch {
	case class[c] == clsFixMap:
		v, isMap = uint32(c&0x0f), true
	case class[c] == clsFixArr:
		v = uint32(c & 0x0f)
	case c == 0xde || c == 0xdc:
		if len(w.b)-w.i < 3 {
			return 0, false, false
		}
		v, isMap, size = uint32(be16(w.b[w.i+1:])), c == 0xde, 3
	case c == 0xdf || c == 0xdd:
		if len(w.b)-w.i < 5 {
			return 0, false, false
		}
		v, isMap, size = be32(w.b[w.i+1:]), c == 0xdf, 5
	default:
		return 0, false, false
	}
	// Guard bounds counts by the bytes that remain; check it here too, so
	// the int below cannot overflow on a frame that skipped Guard.
	if uint64(v) > uint64(len(w.b)-w.i) {
		return 0, false, false
	}
	w.i += size
	return int(v), isMap, true
}

// key reads a map key, which must be a str.
func (w *shapeWalker) key() ([]byte, error) {
	c, ok := w.peek()
	if !ok {
		return nil, w.fail("truncated")
	}
	var n, size int
	switch {
	case class[c] == clsFixStr:
		n, size = int(c&0x1f), 1
	case c == 0xd9 && len(w.b)-w.i >= 2:
		n, size = int(w.b[w.i+1]), 2
	case c == 0xda && len(w.b)-w.i >= 3:
		n, size = int(be16(w.b[w.i+1:])), 3
	case c == 0xdb && len(w.b)-w.i >= 5:
		v := be32(w.b[w.i+1:])
		if uint64(v) > uint64(len(w.b)) {
			return nil, w.fail("truncated key")
		}
		n, size = int(v), 5
	default:
		return nil, w.fail("map key of type 0x%02x; keys must be strings", c)
	}
	if n > len(w.b)-w.i-size {
		return nil, w.fail("truncated key")
	}
	k := w.b[w.i+size : w.i+size+n]
	w.i += size + n
	return k, nil
}

// object checks a struct's map (or nil, when nilOK).
func (w *shapeWalker) object(s *shape, nilOK bool) error {
	if nilOK && w.isNil() {
		w.i++
		return nil
	}
	at := w.i
	n, isMap, ok := w.header()
	if !ok || !isMap {
		w.i = at
		if s != nil && s.name != "" {
			return w.fail("%s must be a map with string keys", s.name)
		}
		return w.fail("a message must be a map with string keys")
	}
	for range n {
		k, err := w.key()
		if err != nil {
			return err
		}
		var f *fieldShape
		if s != nil {
			f = s.field(k)
		}
		if err := w.value(f); err != nil {
			return err
		}
	}
	return nil
}

// value checks one field's value against its shape (nil: skip it).
func (w *shapeWalker) value(f *fieldShape) error {
	if f == nil {
		return w.skip()
	}
	switch f.kind {
	case fieldStruct:
		return w.object(f.sub, true)
	case fieldStructs:
		if w.isNil() {
			w.i++
			return nil
		}
		at := w.i
		n, isMap, ok := w.header()
		if !ok || isMap {
			w.i = at
			return w.fail("a list of %s must be an array", f.sub.name)
		}
		for range n {
			if err := w.object(f.sub, false); err != nil {
				return err
			}
		}
		return nil
	case fieldMap:
		if w.isNil() {
			w.i++
			return nil
		}
		at := w.i
		n, isMap, ok := w.header()
		if !ok || !isMap {
			w.i = at
			return w.fail("a map field must be a map with string keys")
		}
		for range n {
			if _, err := w.key(); err != nil {
				return err
			}
			var err error
			if f.sub != nil {
				err = w.object(f.sub, true)
			} else {
				err = w.skip()
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	return w.skip()
}

// skip steps over one value, whatever it holds, iteratively.
func (w *shapeWalker) skip() error {
	for pending := 1; pending > 0; pending-- {
		c, ok := w.peek()
		if !ok {
			return w.fail("truncated")
		}
		var hdr int
		var length uint64
		switch class[c] {
		case clsFixed:
			hdr = int(fixedSize[c])
		case clsFixStr:
			hdr, length = 1, uint64(c&0x1f)
		case clsFixArr, clsFixMap, clsArr16, clsArr32, clsMap16, clsMap32:
			n, isMap, ok := w.header()
			if !ok {
				return w.fail("truncated")
			}
			if isMap {
				n *= 2
			}
			pending += n
			continue
		case clsBytes8, clsBytes16, clsBytes32, clsExt8, clsExt16, clsExt32:
			var width int
			hdr, width = lengthHeader(class[c])
			if len(w.b)-w.i >= hdr {
				length = uintN(w.b[w.i+1:], width)
			}
		case clsFixExt:
			hdr, length = 2, uint64(fixedSize[c])
		default:
			return w.fail("reserved byte 0x%02x", c)
		}
		if hdr > len(w.b)-w.i || length > uint64(len(w.b)-w.i-hdr) {
			return w.fail("truncated")
		}
		w.i += hdr + int(length)
	}
	return nil
}

// lengthHeader is, for a str, bin or ext class, the size of the value's
// header and the width of the length in it (after the type byte; an ext
// has its own type byte after the length).
func lengthHeader(c uint8) (hdr, width int) {
	switch c {
	case clsBytes8:
		return 2, 1
	case clsBytes16:
		return 3, 2
	case clsBytes32:
		return 5, 4
	case clsExt8:
		return 3, 1
	case clsExt16:
		return 4, 2
	}
	return 6, 4 // clsExt32
}

// uintN reads a big-endian length of width 1, 2 or 4 bytes.
func uintN(b []byte, width int) uint64 {
	switch width {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(be16(b))
	}
	return uint64(be32(b))
}
