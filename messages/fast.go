package messages

import (
	"encoding/binary"
	"math"
	"slices"
)

// Reflection-free encoding and decoding of the messages on the hot path
// (open, invoke, close, and the provider's invoke).
//
// Encoding produces exactly the bytes msgpack.Marshal produces for the same
// value (fast_test.go proves it): struct fields as a map in declaration
// order, omitempty fields left out when empty, ints in their shortest form,
// uint32 and int64 fields at fixed width, strings in the shortest str
// format, byte slices as bin (nil as nil). The one freedom msgpack.Marshal
// has — the order of a map's entries, which follows Go's map iteration —
// is fixed here to sorted keys.
//
// Decoding takes the shape msgpack.Marshal produces (a map of the known
// keys, each once, with the value types above) into a zero value, and
// reports false for anything else — another encoder's choices, unknown
// keys, trailing bytes, a destination that is not zero — without touching
// the destination, so Decode falls back to the reflective decoder and the
// result is what it would have been. Either decoder only sees frames the
// shape check (shape.go) passed: maps with str keys all the way down.

// fastMessage is implemented by the messages with a fast path.
type fastMessage interface {
	Message
	appendMsgpack(b []byte) []byte
	// decodeMsgpack decodes b into the (zero) receiver, or reports false
	// and leaves it untouched.
	decodeMsgpack(b []byte) bool
}

var (
	_ fastMessage = (*OpenRequest)(nil)
	_ fastMessage = (*OpenReply)(nil)
	_ fastMessage = (*TurnRequest)(nil)
	_ fastMessage = (*AckReply)(nil)
	_ fastMessage = (*InvokeRequest)(nil)
	_ fastMessage = (*InvokeReply)(nil)
	_ fastMessage = (*CloseRequest)(nil)
	_ fastMessage = (*ProviderInvokeRequest)(nil)
	_ fastMessage = (*ProviderInvokeReply)(nil)
)

// ---- encoding ----

func appendMapLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x80|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdf), uint32(n))
}

func appendArrayLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
}

func appendStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 256:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

// appendBin writes v as bin, or nil when v is nil.
func appendBin(b []byte, v []byte) []byte {
	if v == nil {
		return append(b, 0xc0)
	}
	n := len(v)
	switch {
	case n < 256:
		b = append(b, 0xc4, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xc5), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
	}
	return append(b, v...)
}

// appendUint is msgpack's EncodeUint: the shortest form.
func appendUint(b []byte, n uint64) []byte {
	switch {
	case n <= math.MaxInt8:
		return append(b, byte(n))
	case n <= math.MaxUint8:
		return append(b, 0xcc, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(n))
	case n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), n)
}

// appendInt is msgpack's EncodeInt (an int field): the shortest form.
func appendInt(b []byte, n int64) []byte {
	switch {
	case n >= 0:
		return appendUint(b, uint64(n))
	case n >= -32:
		return append(b, byte(n))
	case n >= math.MinInt8:
		return append(b, 0xd0, byte(n))
	case n >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(n))
	case n >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(n))
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 0xc3)
	}
	return append(b, 0xc2)
}

func appendStrSlice(b []byte, s []string) []byte {
	if s == nil {
		return append(b, 0xc0)
	}
	b = appendArrayLen(b, len(s))
	for _, v := range s {
		b = appendStr(b, v)
	}
	return b
}

func appendStrMap(b []byte, m map[string]string) []byte {
	if m == nil {
		return append(b, 0xc0)
	}
	b = appendMapLen(b, len(m))
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b = appendStr(appendStr(b, k), m[k])
	}
	return b
}

// fields counts the fields an encoding writes.
func count(present ...bool) int {
	n := 0
	for _, p := range present {
		if p {
			n++
		}
	}
	return n
}

func (a *Access) appendMsgpack(b []byte) []byte {
	b = appendMapLen(b, 2+count(a.Credential != "", a.TurnID != "", len(a.Namespaces) > 0, len(a.Attributes) > 0, a.Lease != ""))
	b = appendStr(appendStr(b, "tenant"), a.Tenant)
	b = appendStr(appendStr(b, "principal"), a.Principal)
	if a.Credential != "" {
		b = appendStr(appendStr(b, "credential"), a.Credential)
	}
	if a.TurnID != "" {
		b = appendStr(appendStr(b, "turn"), a.TurnID)
	}
	if len(a.Namespaces) > 0 {
		b = appendStrSlice(appendStr(b, "namespaces"), a.Namespaces)
	}
	if len(a.Attributes) > 0 {
		b = appendStrMap(appendStr(b, "attributes"), a.Attributes)
	}
	if a.Lease != "" {
		b = appendStr(appendStr(b, "lease"), a.Lease)
	}
	return b
}

func (e *Error) appendMsgpack(b []byte) []byte {
	b = appendMapLen(b, 1+count(e.Message != "", e.RetryAfterMs != 0))
	b = appendStr(appendStr(b, "code"), e.Code)
	if e.Message != "" {
		b = appendStr(appendStr(b, "message"), e.Message)
	}
	if e.RetryAfterMs != 0 {
		b = binary.BigEndian.AppendUint32(append(appendStr(b, "retry_after_ms"), 0xce), e.RetryAfterMs)
	}
	return b
}

func appendV(b []byte, v int) []byte { return appendInt(appendStr(b, "v"), int64(v)) }

func appendTimeout(b []byte, ms uint32) []byte {
	if ms == 0 {
		return b
	}
	return binary.BigEndian.AppendUint32(append(appendStr(b, "timeout_ms"), 0xce), ms)
}

func appendError(b []byte, e *Error) []byte {
	if e == nil {
		return b
	}
	return e.appendMsgpack(appendStr(b, "error"))
}

func appendOptStr(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	return appendStr(appendStr(b, key), v)
}

func appendOptBin(b []byte, key string, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	return appendBin(appendStr(b, key), v)
}

func (m *OpenRequest) appendMsgpack(b []byte) []byte {
	b = appendMapLen(b, 2+count(m.TimeoutMs != 0))
	b = m.Access.appendMsgpack(appendStr(appendV(b, m.V), "access"))
	return appendTimeout(b, m.TimeoutMs)
}

func (m *TurnRequest) appendMsgpack(b []byte) []byte {
	b = appendMapLen(b, 2+count(m.TimeoutMs != 0))
	b = m.Access.appendMsgpack(appendStr(appendV(b, m.V), "access"))
	return appendTimeout(b, m.TimeoutMs)
}

func (m *OpenReply) appendMsgpack(b []byte) []byte {
	b = appendMapLen(b, 1+count(m.Error != nil, m.Node != "", m.TurnID != "", m.LeaseID != "", m.Attached))
	b = appendError(appendV(b, m.V), m.Error)
	b = appendOptStr(b, "node", m.Node)
	b = appendOptStr(b, "turn", m.TurnID)
	b = appendOptStr(b, "lease", m.LeaseID)
	if m.Attached {
		b = appendBool(appendStr(b, "attached"), true)
	}
	return b
}

func (m *AckReply) appendMsgpack(b []byte) []byte {
	b = appendMapLen(b, 1+count(m.Error != nil))
	return appendError(appendV(b, m.V), m.Error)
}

func (m *InvokeRequest) appendMsgpack(b []byte) []byte {
	b = appendMapLen(b, 3+count(len(m.Args) > 0, m.TimeoutMs != 0, m.RequestID != "", m.Profile != "", m.Approval != ""))
	b = m.Access.appendMsgpack(appendStr(appendV(b, m.V), "access"))
	b = appendStr(appendStr(b, "tool"), m.Tool)
	b = appendOptBin(b, "args", m.Args)
	b = appendTimeout(b, m.TimeoutMs)
	b = appendOptStr(b, "request_id", m.RequestID)
	b = appendOptStr(b, "profile", m.Profile)
	return appendOptStr(b, "approval", m.Approval)
}

func (m *InvokeReply) appendMsgpack(b []byte) []byte {
	b = appendMapLen(b, 1+count(m.Error != nil, m.CallID != "", m.CatalogHash != "", m.Alias != "", m.Provider != "",
		m.Name != "", m.Text != "", len(m.Structured) > 0, m.IsError, m.DurationUs != 0, m.Dispatched != nil))
	b = appendError(appendV(b, m.V), m.Error)
	b = appendOptStr(b, "call", m.CallID)
	b = appendOptStr(b, "catalog_hash", m.CatalogHash)
	b = appendOptStr(b, "alias", m.Alias)
	b = appendOptStr(b, "provider", m.Provider)
	b = appendOptStr(b, "name", m.Name)
	b = appendOptStr(b, "text", m.Text)
	b = appendOptBin(b, "structured", m.Structured)
	if m.IsError {
		b = appendBool(appendStr(b, "is_error"), true)
	}
	if m.DurationUs != 0 {
		b = binary.BigEndian.AppendUint64(append(appendStr(b, "duration_us"), 0xd3), uint64(m.DurationUs))
	}
	if m.Dispatched != nil {
		b = appendBool(appendStr(b, "dispatched"), *m.Dispatched)
	}
	return b
}

func (m *CloseRequest) appendMsgpack(b []byte) []byte {
	b = appendMapLen(b, 3+count(m.TimeoutMs != 0))
	b = m.Access.appendMsgpack(appendStr(appendV(b, m.V), "access"))
	b = appendStr(appendStr(b, "lease"), m.LeaseID)
	return appendTimeout(b, m.TimeoutMs)
}

func (m *ProviderInvokeRequest) appendMsgpack(b []byte) []byte {
	b = appendMapLen(b, 5+count(len(m.Args) > 0, m.Resource != "", m.TimeoutMs != 0, len(m.Grant) > 0, len(m.GrantSig) > 0, m.GrantKey != ""))
	b = m.Access.appendMsgpack(appendStr(appendV(b, m.V), "access"))
	b = appendStr(appendStr(b, "call"), m.CallID)
	b = appendStr(appendStr(b, "tool"), m.Tool)
	b = appendStr(appendStr(b, "revision"), m.Revision)
	b = appendOptBin(b, "args", m.Args)
	b = appendOptStr(b, "resource", m.Resource)
	b = appendTimeout(b, m.TimeoutMs)
	b = appendOptBin(b, "grant", m.Grant)
	b = appendOptBin(b, "grant_sig", m.GrantSig)
	return appendOptStr(b, "grant_key", m.GrantKey)
}

func (m *ProviderInvokeReply) appendMsgpack(b []byte) []byte {
	b = appendMapLen(b, 1+count(m.Error != nil, m.Text != "", len(m.Structured) > 0, m.IsError))
	b = appendError(appendV(b, m.V), m.Error)
	b = appendOptStr(b, "text", m.Text)
	b = appendOptBin(b, "structured", m.Structured)
	if m.IsError {
		b = appendBool(appendStr(b, "is_error"), true)
	}
	return b
}

// ---- decoding ----

// reader reads the msgpack shapes the encoder above writes. Every method
// reports false (and the whole fast decode gives up) on anything else.
type reader struct {
	b []byte
	i int
}

func (r *reader) next() (byte, bool) {
	if r.i >= len(r.b) {
		return 0, false
	}
	c := r.b[r.i]
	r.i++
	return c, true
}

// uintN reads an n-byte big-endian unsigned number.
func (r *reader) uintN(n int) (uint64, bool) {
	if len(r.b)-r.i < n {
		return 0, false
	}
	var v uint64
	for _, c := range r.b[r.i : r.i+n] {
		v = v<<8 | uint64(c)
	}
	r.i += n
	return v, true
}

// take returns the next n bytes without copying.
func (r *reader) take(n uint64) ([]byte, bool) {
	if uint64(len(r.b)-r.i) < n {
		return nil, false
	}
	out := r.b[r.i : r.i+int(n)]
	r.i += int(n)
	return out, true
}

func (r *reader) mapLen() (int, bool) {
	c, ok := r.next()
	switch {
	case !ok:
		return 0, false
	case c&0xf0 == 0x80:
		return int(c & 0x0f), true
	case c == 0xde:
		n, ok := r.uintN(2)
		return int(n), ok
	case c == 0xdf:
		n, ok := r.uintN(4)
		return int(n), ok
	}
	return 0, false
}

// strBytes reads a str value, uncopied.
func (r *reader) strBytes() ([]byte, bool) {
	c, ok := r.next()
	var n uint64
	switch {
	case !ok:
		return nil, false
	case c&0xe0 == 0xa0:
		n = uint64(c & 0x1f)
	case c == 0xd9:
		n, ok = r.uintN(1)
	case c == 0xda:
		n, ok = r.uintN(2)
	case c == 0xdb:
		n, ok = r.uintN(4)
	default:
		return nil, false
	}
	if !ok {
		return nil, false
	}
	return r.take(n)
}

func (r *reader) str() (string, bool) {
	b, ok := r.strBytes()
	return string(b), ok
}

// bin reads a bin value (copied) or nil.
func (r *reader) bin() ([]byte, bool) {
	c, ok := r.next()
	var n uint64
	switch {
	case !ok:
		return nil, false
	case c == 0xc0:
		return nil, true
	case c == 0xc4:
		n, ok = r.uintN(1)
	case c == 0xc5:
		n, ok = r.uintN(2)
	case c == 0xc6:
		n, ok = r.uintN(4)
	default:
		return nil, false
	}
	if !ok {
		return nil, false
	}
	b, ok := r.take(n)
	if !ok {
		return nil, false
	}
	return append(make([]byte, 0, len(b)), b...), true
}

// int reads any msgpack integer that fits an int64.
func (r *reader) int() (int64, bool) {
	c, ok := r.next()
	switch {
	case !ok:
		return 0, false
	case c <= 0x7f:
		return int64(c), true
	case c >= 0xe0:
		return int64(int8(c)), true
	case c == 0xcc, c == 0xcd, c == 0xce, c == 0xcf:
		v, ok := r.uintN(1 << (c - 0xcc))
		if !ok || v > math.MaxInt64 {
			return 0, false
		}
		return int64(v), true
	case c == 0xd0:
		v, ok := r.uintN(1)
		return int64(int8(v)), ok
	case c == 0xd1:
		v, ok := r.uintN(2)
		return int64(int16(v)), ok
	case c == 0xd2:
		v, ok := r.uintN(4)
		return int64(int32(v)), ok
	case c == 0xd3:
		v, ok := r.uintN(8)
		return int64(v), ok
	}
	return 0, false
}

func (r *reader) uint32() (uint32, bool) {
	v, ok := r.int()
	if !ok || v < 0 || v > math.MaxUint32 {
		return 0, false
	}
	return uint32(v), true
}

func (r *reader) bool() (bool, bool) {
	switch c, ok := r.next(); {
	case ok && c == 0xc3:
		return true, true
	case ok && c == 0xc2:
		return false, true
	}
	return false, false
}

func (r *reader) strSlice() ([]string, bool) {
	c, ok := r.next()
	var n uint64
	switch {
	case !ok:
		return nil, false
	case c == 0xc0:
		return nil, true
	case c&0xf0 == 0x90:
		n = uint64(c & 0x0f)
	case c == 0xdc:
		n, ok = r.uintN(2)
	case c == 0xdd:
		n, ok = r.uintN(4)
	default:
		return nil, false
	}
	// Every element takes at least a byte: a claim beyond what remains
	// is refused before anything is allocated for it.
	if !ok || n > uint64(len(r.b)-r.i) {
		return nil, false
	}
	out := make([]string, n)
	for i := range out {
		if out[i], ok = r.str(); !ok {
			return nil, false
		}
	}
	return out, true
}

func (r *reader) strMap() (map[string]string, bool) {
	if r.i < len(r.b) && r.b[r.i] == 0xc0 {
		r.i++
		return nil, true
	}
	n, ok := r.mapLen()
	if !ok || n > (len(r.b)-r.i)/2 {
		return nil, false
	}
	m := make(map[string]string, n)
	for range n {
		k, ok := r.str()
		if !ok {
			return nil, false
		}
		if _, dup := m[k]; dup {
			return nil, false
		}
		if m[k], ok = r.str(); !ok {
			return nil, false
		}
	}
	return m, true
}

// fields walks a map of known keys: field reads the value of key and
// returns the key's bit (each key must come once).
func (r *reader) fields(field func(key []byte) (bit uint, ok bool)) bool {
	n, ok := r.mapLen()
	if !ok {
		return false
	}
	var seen uint64
	for range n {
		k, ok := r.strBytes()
		if !ok {
			return false
		}
		bit, ok := field(k)
		if !ok || seen&(1<<bit) != 0 {
			return false
		}
		seen |= 1 << bit
	}
	return true
}

// done reports whether the whole frame was read.
func (r *reader) done() bool { return r.i == len(r.b) }

func (r *reader) access(a *Access) bool {
	return r.fields(func(k []byte) (bit uint, ok bool) {
		switch string(k) {
		case "tenant":
			bit = 0
			a.Tenant, ok = r.str()
		case "principal":
			bit = 1
			a.Principal, ok = r.str()
		case "credential":
			bit = 2
			a.Credential, ok = r.str()
		case "turn":
			bit = 3
			a.TurnID, ok = r.str()
		case "namespaces":
			bit = 4
			a.Namespaces, ok = r.strSlice()
		case "attributes":
			bit = 5
			a.Attributes, ok = r.strMap()
		case "lease":
			bit = 6
			a.Lease, ok = r.str()
		}
		return bit, ok
	})
}

// errorPtr reads an *Error: nil or a map.
func (r *reader) errorPtr() (*Error, bool) {
	if r.i < len(r.b) && r.b[r.i] == 0xc0 {
		r.i++
		return nil, true
	}
	e := &Error{}
	return e, r.fields(func(k []byte) (bit uint, ok bool) {
		switch string(k) {
		case "code":
			bit = 0
			e.Code, ok = r.str()
		case "message":
			bit = 1
			e.Message, ok = r.str()
		case "retry_after_ms":
			bit = 2
			e.RetryAfterMs, ok = r.uint32()
		}
		return bit, ok
	})
}

func (r *reader) v(v *int) bool {
	n, ok := r.int()
	if !ok || n < math.MinInt || n > math.MaxInt {
		return false
	}
	*v = int(n)
	return true
}

func zeroAccess(a *Access) bool {
	return a.Tenant == "" && a.Principal == "" && a.Credential == "" && a.TurnID == "" && a.Namespaces == nil && a.Attributes == nil && a.Lease == ""
}

// decodeInto decodes b into *m through a copy when m is the zero value,
// and reports false (m untouched) otherwise or when b has another shape.
func decodeInto[T any](m *T, isZero bool, b []byte, field func(r *reader, v *T, key []byte) (uint, bool)) bool {
	if !isZero {
		return false
	}
	var v T
	r := &reader{b: b}
	if !r.fields(func(k []byte) (uint, bool) { return field(r, &v, k) }) || !r.done() {
		return false
	}
	*m = v
	return true
}

func (m *OpenRequest) decodeMsgpack(b []byte) bool {
	return decodeInto(m, m.V == 0 && zeroAccess(&m.Access) && m.TimeoutMs == 0, b, func(r *reader, v *OpenRequest, k []byte) (bit uint, ok bool) {
		switch string(k) {
		case "v":
			bit = 0
			ok = r.v(&v.V)
		case "access":
			bit = 1
			ok = r.access(&v.Access)
		case "timeout_ms":
			bit = 2
			v.TimeoutMs, ok = r.uint32()
		}
		return bit, ok
	})
}

func (m *TurnRequest) decodeMsgpack(b []byte) bool {
	return decodeInto(m, m.V == 0 && zeroAccess(&m.Access) && m.TimeoutMs == 0, b, func(r *reader, v *TurnRequest, k []byte) (bit uint, ok bool) {
		switch string(k) {
		case "v":
			bit = 0
			ok = r.v(&v.V)
		case "access":
			bit = 1
			ok = r.access(&v.Access)
		case "timeout_ms":
			bit = 2
			v.TimeoutMs, ok = r.uint32()
		}
		return bit, ok
	})
}

func (m *OpenReply) decodeMsgpack(b []byte) bool {
	return decodeInto(m, *m == OpenReply{}, b, func(r *reader, v *OpenReply, k []byte) (bit uint, ok bool) {
		switch string(k) {
		case "v":
			bit = 0
			ok = r.v(&v.V)
		case "error":
			bit = 1
			v.Error, ok = r.errorPtr()
		case "node":
			bit = 2
			v.Node, ok = r.str()
		case "turn":
			bit = 3
			v.TurnID, ok = r.str()
		case "lease":
			bit = 4
			v.LeaseID, ok = r.str()
		case "attached":
			bit = 5
			v.Attached, ok = r.bool()
		}
		return bit, ok
	})
}

func (m *AckReply) decodeMsgpack(b []byte) bool {
	return decodeInto(m, *m == AckReply{}, b, func(r *reader, v *AckReply, k []byte) (bit uint, ok bool) {
		switch string(k) {
		case "v":
			bit = 0
			ok = r.v(&v.V)
		case "error":
			bit = 1
			v.Error, ok = r.errorPtr()
		}
		return bit, ok
	})
}

func (m *InvokeRequest) decodeMsgpack(b []byte) bool {
	zero := m.V == 0 && zeroAccess(&m.Access) && m.Tool == "" && m.Args == nil && m.TimeoutMs == 0 && m.RequestID == "" && m.Profile == "" && m.Approval == ""
	return decodeInto(m, zero, b, func(r *reader, v *InvokeRequest, k []byte) (bit uint, ok bool) {
		switch string(k) {
		case "v":
			bit = 0
			ok = r.v(&v.V)
		case "access":
			bit = 1
			ok = r.access(&v.Access)
		case "tool":
			bit = 2
			v.Tool, ok = r.str()
		case "args":
			bit = 3
			v.Args, ok = r.bin()
		case "timeout_ms":
			bit = 4
			v.TimeoutMs, ok = r.uint32()
		case "request_id":
			bit = 5
			v.RequestID, ok = r.str()
		case "profile":
			bit = 6
			v.Profile, ok = r.str()
		case "approval":
			bit = 7
			v.Approval, ok = r.str()
		}
		return bit, ok
	})
}

func (m *InvokeReply) decodeMsgpack(b []byte) bool {
	zero := m.V == 0 && m.Error == nil && m.CallID == "" && m.CatalogHash == "" && m.Alias == "" && m.Provider == "" &&
		m.Name == "" && m.Text == "" && m.Structured == nil && !m.IsError && m.DurationUs == 0 && m.Dispatched == nil
	return decodeInto(m, zero, b, func(r *reader, v *InvokeReply, k []byte) (bit uint, ok bool) {
		switch string(k) {
		case "v":
			bit = 0
			ok = r.v(&v.V)
		case "error":
			bit = 1
			v.Error, ok = r.errorPtr()
		case "call":
			bit = 2
			v.CallID, ok = r.str()
		case "catalog_hash":
			bit = 3
			v.CatalogHash, ok = r.str()
		case "alias":
			bit = 4
			v.Alias, ok = r.str()
		case "provider":
			bit = 5
			v.Provider, ok = r.str()
		case "name":
			bit = 6
			v.Name, ok = r.str()
		case "text":
			bit = 7
			v.Text, ok = r.str()
		case "structured":
			bit = 8
			v.Structured, ok = r.bin()
		case "is_error":
			bit = 9
			v.IsError, ok = r.bool()
		case "duration_us":
			bit = 10
			v.DurationUs, ok = r.int()
		case "dispatched":
			bit = 11
			var d bool
			d, ok = r.bool()
			v.Dispatched = &d
		}
		return bit, ok
	})
}

func (m *CloseRequest) decodeMsgpack(b []byte) bool {
	zero := m.V == 0 && zeroAccess(&m.Access) && m.LeaseID == "" && m.TimeoutMs == 0
	return decodeInto(m, zero, b, func(r *reader, v *CloseRequest, k []byte) (bit uint, ok bool) {
		switch string(k) {
		case "v":
			bit = 0
			ok = r.v(&v.V)
		case "access":
			bit = 1
			ok = r.access(&v.Access)
		case "lease":
			bit = 2
			v.LeaseID, ok = r.str()
		case "timeout_ms":
			bit = 3
			v.TimeoutMs, ok = r.uint32()
		}
		return bit, ok
	})
}

func (m *ProviderInvokeRequest) decodeMsgpack(b []byte) bool {
	zero := m.V == 0 && zeroAccess(&m.Access) && m.CallID == "" && m.Tool == "" && m.Revision == "" && m.Args == nil &&
		m.Resource == "" && m.TimeoutMs == 0 && m.Grant == nil && m.GrantSig == nil && m.GrantKey == ""
	return decodeInto(m, zero, b, func(r *reader, v *ProviderInvokeRequest, k []byte) (bit uint, ok bool) {
		switch string(k) {
		case "v":
			bit = 0
			ok = r.v(&v.V)
		case "access":
			bit = 1
			ok = r.access(&v.Access)
		case "call":
			bit = 2
			v.CallID, ok = r.str()
		case "tool":
			bit = 3
			v.Tool, ok = r.str()
		case "revision":
			bit = 4
			v.Revision, ok = r.str()
		case "args":
			bit = 5
			v.Args, ok = r.bin()
		case "resource":
			bit = 6
			v.Resource, ok = r.str()
		case "timeout_ms":
			bit = 7
			v.TimeoutMs, ok = r.uint32()
		case "grant":
			bit = 8
			v.Grant, ok = r.bin()
		case "grant_sig":
			bit = 9
			v.GrantSig, ok = r.bin()
		case "grant_key":
			bit = 10
			v.GrantKey, ok = r.str()
		}
		return bit, ok
	})
}

func (m *ProviderInvokeReply) decodeMsgpack(b []byte) bool {
	zero := m.V == 0 && m.Error == nil && m.Text == "" && m.Structured == nil && !m.IsError
	return decodeInto(m, zero, b, func(r *reader, v *ProviderInvokeReply, k []byte) (bit uint, ok bool) {
		switch string(k) {
		case "v":
			bit = 0
			ok = r.v(&v.V)
		case "error":
			bit = 1
			v.Error, ok = r.errorPtr()
		case "text":
			bit = 2
			v.Text, ok = r.str()
		case "structured":
			bit = 3
			v.Structured, ok = r.bin()
		case "is_error":
			bit = 4
			v.IsError, ok = r.bool()
		}
		return bit, ok
	})
}
