package mcpfront

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The fast path answers the two hot methods, tools/call and tools/list,
// without the SDK's per-request session (a throwaway ServerSession, its
// jsonrpc2 connection and goroutines, and the SDK's JSON decoding), after
// exactly the checks the SDK's stateless handler (go-sdk v1.8.0,
// streamable.go) would make for the request, and answers it with the
// bytes the SDK would write: the same handlers (Front.list, Front.call),
// the same JSON-RPC framing (jsonrpc.EncodeMessage), the same headers and
// statuses. It sits after the Origin check and in front of the token
// check, bind and rewrite: it takes a request only when its token is one
// the SDK's bearer middleware would take (in its plain spelling, "Bearer
// <token>") and verify (Front.verify) and bind would admit (Front.admit),
// and makes rewrite's adjustment itself; anything else goes down the
// chain, where those checks answer it. Anything it does not recognise as a plain,
// well-formed single call it leaves to the SDK untouched (the body is put
// back as read): initialize, server/discover, notifications, batches,
// other methods, revisions other than the three it knows, a body over the
// bound, any header the SDK would refuse, any _meta or params field it
// does not know, any id it could not echo byte for byte. Equivalence is
// tested request by request against the SDK path (fast_test.go).

// fastVersions are the revisions the fast path serves (the MCP-Protocol-
// Version header must name one): every revision the front offers
// (Versions).
var fastVersions = [...]string{modernRevision, "2025-11-25", "2025-06-18"}

// implementation is what the turn's server says it is (newServer), and
// what results carry in _meta on 2026-07-28 (the SDK's annotateServerInfo).
var implementation = &mcp.Implementation{Name: "sharedos", Title: "SharedOS turn", Version: Version}

// sdkMaxDepth is the SDK's JSON nesting bound (internal/json): deeper
// bodies are refused by it, so they are left to it.
const sdkMaxDepth = 1000

// fastRequest is a request the fast path serves, decoded.
type fastRequest struct {
	id     jsonrpc.ID
	rawID  []byte // as sent: what the SDK writes back for id
	method string // "tools/call" or "tools/list"
	name   string
	args   json.RawMessage
	cursor string
	modern bool // MCP-Protocol-Version 2026-07-28
}

// fast serves what it can and passes the rest to next (the token check,
// bind, rewrite and the SDK handler).
func (f *Front) fast(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			if tok, ok := plainBearer(r.Header.Get("Authorization")); ok {
				v, err := f.verifyToken(tok, r)
				if errors.Is(err, auth.ErrInvalidToken) {
					// As the SDK's bearer middleware answers it (not
					// verifying a bad signature twice).
					w.Header().Add("WWW-Authenticate", "Bearer resource_metadata="+strconv.Quote(f.metaURL))
					http.Error(w, err.Error(), http.StatusUnauthorized)
					return
				}
				if err == nil && !f.forwards(v.c, r) {
					if e, _, _ := f.admit(v.c); e != nil && f.serveFast(w, r, e, v.info) {
						f.fastServed.Add(1)
						return
					}
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// plainBearer is the token of an Authorization header "Bearer <token>"
// ("bearer" in any ASCII case, one space, a token of printable ASCII):
// exactly the token the SDK's bearer middleware reads from it (it splits
// the header with strings.Fields and compares the scheme lower-cased).
// Any other spelling is left to that middleware.
func plainBearer(h string) (string, bool) {
	const scheme = "bearer "
	if len(h) <= len(scheme) {
		return "", false
	}
	for i := 0; i < len(scheme); i++ {
		c := h[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != scheme[i] {
			return "", false
		}
	}
	tok := h[len(scheme):]
	for i := 0; i < len(tok); i++ {
		if tok[i] <= ' ' || tok[i] >= 0x7f {
			return "", false
		}
	}
	return tok, true
}

// serveFast answers r, whose verified token (info) bind admits for e, and
// reports true, or reports false with r as it came (its body restored)
// for the chain to answer.
func (f *Front) serveFast(w http.ResponseWriter, r *http.Request, e *turnEntry, info *auth.TokenInfo) bool {
	// (The DNS-rebinding check is checkOrigin's, made before.) The SDK's
	// protocol-version check, and its stateless POST checks: Content-Type,
	// Accept, no Last-Event-ID.
	version := r.Header.Get("Mcp-Protocol-Version")
	known := false
	for _, v := range fastVersions {
		known = known || v == version
	}
	if !known {
		return false
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" && baseMediaType(ct) != "application/json" {
		return false
	}
	if jsonOK, streamOK := streamableAccepts(r.Header.Values("Accept")); !jsonOK || !streamOK {
		return false
	}
	if len(r.Header.Values("Last-Event-ID")) > 0 || r.Body == nil {
		return false
	}
	body, err := f.readBody(r)
	if err != nil {
		return false
	}
	req, ok := decodeFast(body, version)
	if ok && req.modern {
		// The SDK's standard-header check (validateMcpHeaders): the
		// method, and for tools/call the tool's name, repeated in headers.
		// (No tool is registered on the turn's server, so no Mcp-Param-*
		// header is checked.)
		ok = r.Header.Get("Mcp-Method") == req.method && (req.method != "tools/call" || r.Header.Get("Mcp-Name") != "" && r.Header.Get("Mcp-Name") == req.name)
	}
	if !ok {
		// Put the body back as read, for the SDK.
		r.Body = readCloser{bytes.NewReader(body), r.Body}
		return false
	}
	f.answerFast(w, r, e, info, req)
	return true
}

// loopbackAddr is sdkIsLoopback(a.String()) without formatting a TCP
// address (a v4-mapped address is printed, and so parsed, as its v4 form).
func loopbackAddr(a net.Addr) bool {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.IsLoopback()
	}
	return sdkIsLoopback(a.String())
}

// readBody reads r's body up to the bound. On any failure (too large, a
// read error) it puts back what it read in front of the rest, with the
// same error, so the SDK reads and answers exactly what it would have; on
// success the caller puts it back if it leaves the request to the SDK.
func (f *Front) readBody(r *http.Request) ([]byte, error) {
	limit := f.opts.MaxRequestBodyBytes
	n := int64(bytes.MinRead)
	if r.ContentLength > 0 && r.ContentLength <= limit {
		// Room for the body and the read that finds its end, so that
		// ReadFrom (which wants MinRead free before each read) does not
		// grow the buffer.
		n = r.ContentLength + bytes.MinRead + 1
	}
	buf := bytes.NewBuffer(make([]byte, 0, n))
	_, err := buf.ReadFrom(io.LimitReader(r.Body, limit+1))
	if err == nil && int64(buf.Len()) <= limit {
		return buf.Bytes(), nil
	}
	rest := io.Reader(r.Body)
	if err != nil {
		rest = errReader{err}
	}
	r.Body = readCloser{io.MultiReader(bytes.NewReader(buf.Bytes()), rest), r.Body}
	if err == nil {
		err = errTooLarge
	}
	return nil, err
}

var errTooLarge = errors.New("body over the bound")

type readCloser struct {
	io.Reader
	io.Closer
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// decodeFast decodes body as one JSON-RPC call of tools/call or
// tools/list in the form the fast path serves, into concrete fields (raw
// JSON only for the arguments, which the turn actor checks against the
// tool's schema). ok false: leave it to the SDK.
func decodeFast(body []byte, version string) (req fastRequest, ok bool) {
	// Valid JSON (one value, nothing after it), valid UTF-8, nested no
	// deeper than the SDK allows.
	if !json.Valid(body) || !utf8.Valid(body) || exceedsDepth(body, sdkMaxDepth) {
		return req, false
	}
	var top [4]json.RawMessage // jsonrpc, id, method, params
	if !objectFields(body, topKeys, top[:]) {
		return req, false
	}
	if string(top[0]) != `"2.0"` {
		return req, false
	}
	if req.id, ok = echoableID(top[1]); !ok {
		return req, false
	}
	req.rawID = top[1]
	switch string(top[2]) {
	case `"tools/call"`:
		req.method = "tools/call"
	case `"tools/list"`:
		req.method = "tools/list"
	default:
		return req, false
	}
	req.modern = version == modernRevision
	params := top[3]
	if params == nil {
		// tools/list may omit params (the SDK: missingParamsOK); on
		// 2026-07-28 every call carries _meta, so the SDK refuses it.
		return req, req.method == "tools/list" && !req.modern
	}
	var p [4]json.RawMessage // name, arguments, cursor, _meta
	if !objectFields(params, paramKeys, p[:]) {
		return req, false
	}
	if req.method == "tools/call" {
		if p[2] != nil || !decodeString(p[0], &req.name) {
			return req, false
		}
		switch {
		case p[1] == nil, string(p[1]) == "null", len(p[1]) > 0 && p[1][0] == '{':
			req.args = p[1]
		default:
			return req, false
		}
	} else {
		if p[0] != nil || p[1] != nil {
			return req, false
		}
		if p[2] != nil {
			if !decodeString(p[2], &req.cursor) {
				return req, false
			}
		}
	}
	if !req.modern {
		// Before 2026-07-28 a _meta is left to the SDK (a protocolVersion
		// in it brings the per-request rules into play).
		return req, p[3] == nil
	}
	return req, modernMeta(p[3], version)
}

// modernMeta checks a 2026-07-28 call's _meta as the SDK would accept it
// (servePOST and validateRequestMeta): protocolVersion equal to the
// header's, clientCapabilities decoding as capabilities, clientInfo (if
// any) as an implementation, logLevel (if any) a string; nothing else.
func modernMeta(raw json.RawMessage, version string) bool {
	if raw == nil {
		return false
	}
	var m [4]json.RawMessage
	if !objectFields(raw, metaKeys, m[:]) {
		return false
	}
	if string(m[0]) != `"`+version+`"` {
		return false
	}
	if len(m[1]) == 0 || m[1][0] != '{' {
		return false
	}
	var caps struct {
		mcp.ClientCapabilities
		Roots *mcp.RootCapabilities `json:"roots,omitempty"`
	}
	if string(m[1]) != "{}" && !strictDecode(m[1], &caps) {
		return false
	}
	if m[2] != nil {
		var impl mcp.Implementation
		if len(m[2]) == 0 || m[2][0] != '{' || !strictDecode(m[2], &impl) {
			return false
		}
	}
	if m[3] != nil && !isJSONString(m[3]) {
		return false
	}
	return true
}

// strictDecode decodes raw into v, refusing what the SDK's case-sensitive
// decoder might read differently: unknown fields, which include keys that
// differ from a field's only by case.
func strictDecode(raw json.RawMessage, v any) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v) == nil
}

// objectFields reads data, valid JSON (json.Valid), as one object whose
// keys are among keys, each at most once and spelled exactly (the SDK's
// decoder matches keys case-sensitively; a key with an escape is left to
// it), into out: out[i] the raw value of keys[i], a slice of data.
func objectFields(data []byte, keys []string, out []json.RawMessage) bool {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return true
	}
	for i < len(data) {
		if data[i] != '"' {
			return false
		}
		end := bytes.IndexByte(data[i+1:], '"')
		if end < 0 {
			return false
		}
		key := data[i+1 : i+1+end]
		if bytes.IndexByte(key, '\\') >= 0 {
			return false
		}
		k := -1
		for j, name := range keys {
			if name == string(key) {
				k = j
				break
			}
		}
		if k < 0 || out[k] != nil {
			return false
		}
		i = skipSpace(data, i+2+end)
		if i >= len(data) || data[i] != ':' {
			return false
		}
		i = skipSpace(data, i+1)
		vend := skipValue(data, i)
		if vend <= i {
			return false
		}
		out[k] = data[i:vend]
		i = skipSpace(data, vend)
		if i >= len(data) {
			return false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return true
		default:
			return false
		}
	}
	return false
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// skipValue is the end of the (valid) JSON value starting at i.
func skipValue(data []byte, i int) int {
	depth := 0
	for ; i < len(data); i++ {
		switch c := data[i]; c {
		case '"':
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				return i + 1
			}
			if depth < 0 {
				return i
			}
		case ',', ' ', '\t', '\n', '\r', ':':
			if depth == 0 {
				return i
			}
		}
	}
	return i
}

var (
	topKeys   = []string{"jsonrpc", "id", "method", "params"}
	paramKeys = []string{"name", "arguments", "cursor", "_meta"}
	metaKeys  = []string{mcp.MetaKeyProtocolVersion, mcp.MetaKeyClientCapabilities, mcp.MetaKeyClientInfo, mcp.MetaKeyLogLevel}
)

func isJSONString(raw json.RawMessage) bool { return len(raw) >= 2 && raw[0] == '"' }

// decodeString decodes a JSON string (valid JSON already) into s.
func decodeString(raw json.RawMessage, s *string) bool {
	if !isJSONString(raw) {
		return false
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		*s = string(raw[1 : len(raw)-1])
		return true
	}
	return json.Unmarshal(raw, s) == nil
}

// echoableID is a request id the fast path echoes exactly as the SDK
// would: a non-negative integer of at most 15 digits (the SDK reads ids
// as float64) or a short string of plain characters (no escapes).
func echoableID(raw json.RawMessage) (jsonrpc.ID, bool) {
	s := string(raw)
	switch {
	case len(s) == 0:
	case s[0] >= '0' && s[0] <= '9':
		if len(s) > 15 || (s[0] == '0' && len(s) > 1) {
			return jsonrpc.ID{}, false
		}
		var n int64
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return jsonrpc.ID{}, false
			}
			n = n*10 + int64(s[i]-'0')
		}
		id, err := jsonrpc.MakeID(float64(n))
		return id, err == nil
	case s[0] == '"' && len(s) >= 3 && len(s) <= 130 && s[len(s)-1] == '"':
		for i := 1; i < len(s)-1; i++ {
			c := s[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
				return jsonrpc.ID{}, false
			}
		}
		id, err := jsonrpc.MakeID(s[1 : len(s)-1])
		return id, err == nil
	}
	return jsonrpc.ID{}, false
}

// answerFast answers req through the same handlers the SDK path calls,
// and writes what the SDK's stateless handler would: JSON response mode,
// Cache-Control and Content-Type set, the result or error as one JSON-RPC
// response; on 2026-07-28 the server's identity in the result's _meta, a
// listing and a call's result marked resultType "complete", and -32602 answered with status
// 400.
func (f *Front) answerFast(w http.ResponseWriter, r *http.Request, e *turnEntry, info *auth.TokenInfo, req fastRequest) {
	ctx := r.Context()
	if !req.modern {
		// As the SDK: a request before 2026-07-28 runs to its end even if
		// the client goes away (its handler's context does not inherit the
		// request's cancellation); on 2026-07-28 the front asks the SDK to
		// propagate it (PropagateRequestCancellation).
		ctx = context.WithoutCancel(ctx)
	}
	ctx, span := f.startSpan(ctx, e, req.method, req.name, nil, r.Header, req.rawID)
	var result []byte
	var err error
	if req.method == "tools/list" {
		lr := &mcp.ListToolsRequest{Params: &mcp.ListToolsParams{Cursor: req.cursor}, Extra: &mcp.RequestExtra{TokenInfo: info, Header: r.Header}}
		var res *mcp.ListToolsResult
		if res, err = f.list(ctx, e, lr); err == nil {
			if req.modern {
				res.ResultType = "complete"
				annotate(&res.Meta)
			}
			result, err = sdkMarshal(res)
		}
	} else {
		var res *mcp.CallToolResult
		if res, err = f.callTool(ctx, e, info, req.name, req.args, ""); err == nil {
			if req.modern {
				annotate(&res.Meta)
				markComplete(res)
			}
			result, err = marshalCallResult(res, req.modern)
		}
	}
	endFast(span, req.method, result, err)
	var resp *jsonrpc.Response
	status := http.StatusOK
	if err != nil {
		var je *jsonrpc.Error
		if !errors.As(err, &je) {
			je = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
		}
		resp = &jsonrpc.Response{ID: req.id, Error: je}
		if req.modern {
			// The SDK's extractErrorStatus (SEP-2575).
			switch je.Code {
			case jsonrpc.CodeMethodNotFound:
				status = http.StatusNotFound
			case jsonrpc.CodeInvalidParams, -32022, -32021: // and UnsupportedProtocolVersion, MissingRequiredClientCapabilities
				status = http.StatusBadRequest
			}
		}
	}
	var data []byte
	if err == nil {
		// jsonrpc.EncodeMessage's bytes for a result, without re-encoding
		// it: the id as sent (echoableID), the result already compact.
		data = rpcResult(req.rawID, result)
	} else {
		data, err = jsonrpc.EncodeMessage(resp)
	}
	h := w.Header()
	h["Cache-Control"] = hdrNoCache
	h["Content-Type"] = hdrJSON
	if err != nil {
		status, data = http.StatusInternalServerError, nil
	}
	// What rewrite does to the SDK's answers: only a listing can carry
	// what it adjusts (a call's result has neither capabilities nor ttlMs
	// at its top level, so rewrite leaves it as it is).
	if req.method == "tools/list" && status == http.StatusOK {
		if out, ok := adjust(data, r.Header.Get("MCP-Protocol-Version")); ok {
			data = out
			h.Set("Content-Length", strconv.Itoa(len(data)))
		}
	}
	if status != http.StatusOK {
		w.WriteHeader(status)
	}
	_, _ = w.Write(data)
}

// rpcResult is the JSON-RPC response of id (as sent) with result
// (compact JSON): jsonrpc.EncodeMessage's bytes, without re-encoding.
func rpcResult(id, result []byte) []byte {
	out := make([]byte, 0, len(result)+len(id)+32)
	out = append(out, `{"jsonrpc":"2.0","id":`...)
	out = append(out, id...)
	out = append(out, `,"result":`...)
	return append(append(out, result...), '}')
}

// The values of the headers every fast answer carries, as Header.Set
// would store them (shared: net/http only reads them).
var (
	hdrNoCache = []string{"no-cache, no-transform"}
	hdrJSON    = []string{"application/json"}
)

// annotate is the SDK's annotateServerInfo.
func annotate(m *mcp.Meta) {
	if *m == nil {
		*m = mcp.Meta{}
	}
	if _, ok := (*m)[mcp.MetaKeyServerInfo]; !ok {
		(*m)[mcp.MetaKeyServerInfo] = implementation
	}
}

// marshalCallResult is sdkMarshal(res), byte for byte, written directly
// for the results the front builds (call): a text content, _meta with
// the front's keys, structuredContent raw JSON or none; anything else is
// left to sdkMarshal. (The SDK's encoding, which this follows: the
// result's MarshalJSON marshals with encoding/json, which escapes HTML in
// strings and compacts raw JSON; fields in declaration order, _meta's
// keys sorted, omitempty but for content.)
//
// complete says res was marked by markComplete (the SDK writes its
// resultType after isError).
func marshalCallResult(res *mcp.CallToolResult, complete bool) ([]byte, error) {
	if len(res.Content) != 1 || res.InputRequests != nil || res.RequestState != "" {
		return sdkMarshal(res)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok || tc.Meta != nil || tc.Annotations != nil {
		return sdkMarshal(res)
	}
	var structured json.RawMessage
	switch sc := res.StructuredContent.(type) {
	case nil:
	case json.RawMessage:
		if sc == nil {
			return sdkMarshal(res)
		}
		structured = sc
	default:
		return sdkMarshal(res)
	}
	// _meta: at most the server's identity and the front's two keys,
	// written in sorted order.
	var callID, hash string
	var hasCallID, hasHash, hasInfo bool
	for k, v := range res.Meta {
		switch k {
		case mcp.MetaKeyServerInfo:
			if v != implementation {
				return sdkMarshal(res)
			}
			hasInfo = true
		case MetaCallID:
			if callID, hasCallID = v.(string); !hasCallID {
				return sdkMarshal(res)
			}
		case MetaCatalogHash:
			if hash, hasHash = v.(string); !hasHash {
				return sdkMarshal(res)
			}
		default:
			return sdkMarshal(res)
		}
	}
	out := make([]byte, 0, 160+len(tc.Text)+len(structured)+len(hash))
	if len(res.Meta) > 0 {
		out = append(out, `{"_meta":{`...)
		sep := false
		key := func(k string) {
			if sep {
				out = append(out, ',')
			}
			sep = true
			out = append(append(append(out, '"'), k...), `":`...)
		}
		// Sorted: "io.modelcontextprotocol/…" < "io.sharedos/callId" <
		// "io.sharedos/catalogHash".
		if hasInfo {
			key(mcp.MetaKeyServerInfo)
			out = append(out, implementationJSON...)
		}
		if hasCallID {
			key(MetaCallID)
			out = appendJSONString(out, callID)
		}
		if hasHash {
			key(MetaCatalogHash)
			out = appendJSONString(out, hash)
		}
		out = append(out, `},"content":[{"type":"text","text":`...)
	} else {
		out = append(out, `{"content":[{"type":"text","text":`...)
	}
	out = appendJSONString(out, tc.Text)
	out = append(out, "}]"...)
	if structured != nil {
		b, err := json.Marshal(structured) // compacted, HTML escaped
		if err != nil {
			return nil, err
		}
		out = append(append(out, `,"structuredContent":`...), b...)
	}
	if res.IsError {
		out = append(out, `,"isError":true`...)
	}
	if complete {
		out = append(out, `,"resultType":"complete"`...)
	}
	return append(out, '}'), nil
}

// implementationJSON is the server's identity as encoding/json writes it.
var implementationJSON = func() []byte {
	b, err := json.Marshal(implementation)
	if err != nil {
		panic(err)
	}
	return b
}()

// appendJSONString appends s as encoding/json writes a string (HTML
// characters, U+2028 and U+2029 escaped, invalid UTF-8 replaced): ASCII
// here, anything else by encoding/json.
func appendJSONString(out []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			b, _ := json.Marshal(s)
			return append(out, b...)
		}
	}
	const hex = "0123456789abcdef"
	out = append(out, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
			continue
		}
		out = append(out, s[start:i]...)
		switch c {
		case '"', '\\':
			out = append(out, '\\', c)
		case '\b':
			out = append(out, '\\', 'b')
		case '\f':
			out = append(out, '\\', 'f')
		case '\n':
			out = append(out, '\\', 'n')
		case '\r':
			out = append(out, '\\', 'r')
		case '\t':
			out = append(out, '\\', 't')
		default:
			out = append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	return append(append(out, s[start:]...), '"')
}

// sdkMarshal marshals as the SDK's jsonrpc2 does (no HTML escaping).
func sdkMarshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// exceedsDepth is the SDK's checkMaxDepth (internal/json): nesting of
// objects and arrays deeper than max, strings skipped.
func exceedsDepth(data []byte, max int) bool {
	depth, inString, escaped := 0, false, false
	for _, b := range data {
		if inString {
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
			continue
		}
		switch b {
		case '"':
			inString = true
		case '{', '[':
			if depth++; depth > max {
				return true
			}
		case '}', ']':
			depth--
		}
	}
	return false
}

// sdkIsLoopback is the SDK's util.IsLoopback.
func sdkIsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// streamableAccepts is the SDK's Accept check.
func streamableAccepts(values []string) (jsonOK, streamOK bool) {
	for _, value := range values {
		for raw := range strings.SplitSeq(value, ",") {
			base, _, _ := strings.Cut(strings.TrimSpace(raw), ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	return jsonOK, streamOK
}

// baseMediaType is the SDK's Content-Type check.
func baseMediaType(value string) string {
	mediaType, _, err := mime.ParseMediaType(value)
	if err != nil {
		return ""
	}
	return mediaType
}
