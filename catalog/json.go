package catalog

import (
	"encoding/json"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonKind classifies why decodeJSON refused its input; callers map it to
// their family's sentinel (a schema's or a call's arguments).
type jsonKind uint8

const (
	jsonSyntax jsonKind = iota
	jsonTooLarge
	jsonTooDeep
	jsonDuplicate
	jsonEncoding
)

type jsonError struct {
	kind jsonKind
	off  int
	msg  string
}

func (e *jsonError) Error() string { return fmt.Sprintf("json: %s at byte %d", e.msg, e.off) }

// decodeJSON decodes b strictly as I-JSON (RFC 7493): at most maxBytes,
// containers nested at most maxDepth, no object with the same key twice
// (compared after unescaping, at any depth), strings valid UTF-8 with no
// unpaired surrogate escapes, nothing after the value. Numbers are kept
// exact as json.Number; objects are map[string]any and arrays []any — the
// shapes the schema validator expects. Because nothing ambiguous is
// accepted, any two conforming JSON readers (first-key-wins or
// last-key-wins) read what was accepted as the same value.
func decodeJSON(b []byte, maxBytes, maxDepth int) (any, error) {
	if len(b) > maxBytes {
		return nil, &jsonError{jsonTooLarge, 0, fmt.Sprintf("%d bytes, limit %d", len(b), maxBytes)}
	}
	d := decoder{b: b, maxDepth: maxDepth}
	d.ws()
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.ws()
	if d.i != len(b) {
		return nil, d.fail(jsonSyntax, "data after the value")
	}
	return v, nil
}

type decoder struct {
	b        []byte
	i        int
	maxDepth int
}

func (d *decoder) fail(k jsonKind, msg string) error { return &jsonError{k, d.i, msg} }

func (d *decoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *decoder) peek() byte {
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

func (d *decoder) value(depth int) (any, error) {
	switch c := d.peek(); {
	case c == '{':
		return d.object(depth + 1)
	case c == '[':
		return d.array(depth + 1)
	case c == '"':
		s, err := d.str()
		if err != nil {
			return nil, err
		}
		return s, nil
	case c == 't':
		return d.literal("true", true)
	case c == 'f':
		return d.literal("false", false)
	case c == 'n':
		return d.literal("null", nil)
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	}
	return nil, d.fail(jsonSyntax, "expected a value")
}

func (d *decoder) object(depth int) (any, error) {
	if depth > d.maxDepth {
		return nil, d.fail(jsonTooDeep, fmt.Sprintf("nesting deeper than %d", d.maxDepth))
	}
	d.i++
	m := map[string]any{}
	d.ws()
	if d.peek() == '}' {
		d.i++
		return m, nil
	}
	for {
		if d.peek() != '"' {
			return nil, d.fail(jsonSyntax, "expected a key")
		}
		at := d.i
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		if _, dup := m[k]; dup {
			return nil, &jsonError{jsonDuplicate, at, fmt.Sprintf("duplicate key %q", k)}
		}
		d.ws()
		if d.peek() != ':' {
			return nil, d.fail(jsonSyntax, "expected ':'")
		}
		d.i++
		d.ws()
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		m[k] = v
		d.ws()
		switch d.peek() {
		case ',':
			d.i++
			d.ws()
		case '}':
			d.i++
			return m, nil
		default:
			return nil, d.fail(jsonSyntax, "expected ',' or '}'")
		}
	}
}

func (d *decoder) array(depth int) (any, error) {
	if depth > d.maxDepth {
		return nil, d.fail(jsonTooDeep, fmt.Sprintf("nesting deeper than %d", d.maxDepth))
	}
	d.i++
	a := []any{}
	d.ws()
	if d.peek() == ']' {
		d.i++
		return a, nil
	}
	for {
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		d.ws()
		switch d.peek() {
		case ',':
			d.i++
			d.ws()
		case ']':
			d.i++
			return a, nil
		default:
			return nil, d.fail(jsonSyntax, "expected ',' or ']'")
		}
	}
}

func (d *decoder) literal(word string, v any) (any, error) {
	if len(d.b)-d.i < len(word) || string(d.b[d.i:d.i+len(word)]) != word {
		return nil, d.fail(jsonSyntax, "unexpected character")
	}
	d.i += len(word)
	return v, nil
}

func (d *decoder) digits() int {
	n := 0
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
		n++
	}
	return n
}

func (d *decoder) number() (any, error) {
	start := d.i
	if d.b[d.i] == '-' {
		d.i++
	}
	switch {
	case d.peek() == '0':
		d.i++
	case d.digits() == 0:
		return nil, d.fail(jsonSyntax, "bad number")
	}
	if d.peek() == '.' {
		d.i++
		if d.digits() == 0 {
			return nil, d.fail(jsonSyntax, "bad number")
		}
	}
	if c := d.peek(); c == 'e' || c == 'E' {
		d.i++
		if c := d.peek(); c == '+' || c == '-' {
			d.i++
		}
		if d.digits() == 0 {
			return nil, d.fail(jsonSyntax, "bad number")
		}
	}
	return json.Number(d.b[start:d.i]), nil
}

// str decodes the string at d.i (its opening quote).
func (d *decoder) str() (string, error) {
	d.i++
	start, ascii := d.i, true
	for d.i < len(d.b) {
		switch c := d.b[d.i]; {
		case c == '"':
			s := d.b[start:d.i]
			if !ascii && !utf8.Valid(s) {
				return "", &jsonError{jsonEncoding, start, "invalid UTF-8 in a string"}
			}
			d.i++
			return string(s), nil
		case c == '\\':
			return d.escaped(start)
		case c < 0x20:
			return "", d.fail(jsonSyntax, "control character in a string")
		case c >= 0x80:
			ascii = false
		}
		d.i++
	}
	return "", d.fail(jsonSyntax, "unterminated string")
}

// escaped finishes a string that has escapes; d.i is at the first '\'.
func (d *decoder) escaped(start int) (string, error) {
	buf := append(make([]byte, 0, d.i-start+16), d.b[start:d.i]...)
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			// Escapes append only whole, valid sequences, so buf is valid
			// exactly when the raw bytes between them are.
			if !utf8.Valid(buf) {
				return "", &jsonError{jsonEncoding, start, "invalid UTF-8 in a string"}
			}
			d.i++
			return string(buf), nil
		case c < 0x20:
			return "", d.fail(jsonSyntax, "control character in a string")
		case c != '\\':
			buf = append(buf, c)
			d.i++
			continue
		}
		d.i++
		e := d.peek()
		d.i++
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, err := d.hex4()
			if err != nil {
				return "", err
			}
			if utf16.IsSurrogate(r) {
				lo := rune(-1)
				if r < 0xdc00 && d.peek() == '\\' && d.i+1 < len(d.b) && d.b[d.i+1] == 'u' {
					d.i += 2
					if lo, err = d.hex4(); err != nil {
						return "", err
					}
				}
				if r = utf16.DecodeRune(r, lo); r == utf8.RuneError {
					return "", d.fail(jsonEncoding, "unpaired surrogate escape")
				}
			}
			buf = utf8.AppendRune(buf, r)
		default:
			d.i--
			return "", d.fail(jsonSyntax, "bad escape")
		}
	}
	return "", d.fail(jsonSyntax, "unterminated string")
}

func (d *decoder) hex4() (rune, error) {
	if len(d.b)-d.i < 4 {
		return 0, d.fail(jsonSyntax, "bad \\u escape")
	}
	var r rune
	for _, c := range d.b[d.i : d.i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, d.fail(jsonSyntax, "bad \\u escape")
		}
	}
	d.i += 4
	return r, nil
}
