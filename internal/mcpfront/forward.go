package mcpfront

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/reason"
)

// Any node serves any turn (docs/mcp.md, "A cluster: any node serves any
// turn"). A request whose verified token names another node of the
// cluster (the token verifies: every node signs with the one cluster key)
// is forwarded whole over NATS to that node, on ForwardSubject(prefix,
// node), and that node's answer is relayed to the client. One hop: a
// forwarded request is served by the receiving node's front with
// forwarding off, so it is answered, or refused, there.
//
// The edge (the node the client reached) makes the checks that are about
// the client's HTTP connection: the Origin allow-list and the localhost
// DNS-rebinding check (Host against a loopback listener). The owning node
// makes every check about the token and the turn (signature, expiry,
// audience — the token's audience is the owning node's endpoint — the
// turn open, its authority and catalogue) and answers exactly as its own
// /mcp would. The forwarding subject is served in the nodes' account
// only: node identities may publish to it; runtimes, whose accounts import
// only the turn protocol's subjects, and providers and audit readers,
// whose permissions name their own subjects, cannot.

// ForwardSubject is the subject node serves forwarded MCP requests on.
func ForwardSubject(prefix, node string) string { return prefix + ".mcp." + node }

// Headers of a forwarded request and its answer besides the HTTP headers
// carried (forwardedHeader).
const (
	hdrMethod  = "Sos-Fwd-Method"
	hdrHost    = "Sos-Fwd-Host"
	hdrTimeout = "Sos-Fwd-Timeout-Ms"
	hdrFrom    = "Sos-Fwd-From"
	hdrStatus  = "Sos-Fwd-Status"
)

// forwardedHeader reports whether an HTTP request header is carried to
// the owning node: what the MCP transport and its checks read, and
// nothing else (no cookies, no proxies' headers).
func forwardedHeader(k string) bool {
	switch http.CanonicalHeaderKey(k) {
	case "Authorization", "Content-Type", "Accept", "Origin", "Last-Event-Id", "User-Agent":
		return true
	}
	return strings.HasPrefix(http.CanonicalHeaderKey(k), "Mcp-")
}

// hopHeader reports whether an answer's header is the HTTP connection's,
// not the answer's (recomputed by the edge's server).
func hopHeader(k string) bool {
	switch http.CanonicalHeaderKey(k) {
	case "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive":
		return true
	}
	return false
}

// maxForwardsInFlight bounds the forwarded requests a node serves at once;
// beyond it they are answered 503 overloaded.
const maxForwardsInFlight = 1024

type forwardedKey struct{}

// isForwarded reports whether r came over the bus from another node.
func isForwarded(r *http.Request) bool {
	v, _ := r.Context().Value(forwardedKey{}).(bool)
	return v
}

// forwards reports whether a request bearing c goes to another node.
func (f *Front) forwards(c *Claims, r *http.Request) bool {
	return f.opts.Bus != nil && c.Node != f.k.Node() && !isForwarded(r)
}

// ServeBus serves the requests other nodes forward to this node's turns
// (on ForwardSubject). Without Options.Bus it does nothing. Stop with
// Close.
func (f *Front) ServeBus() error {
	if f.opts.Bus == nil {
		return nil
	}
	// The forwarded request is served as the owning node's /mcp would
	// serve it, less the edge's checks (made where the client connected):
	// f.busHandler.
	f.fwdSlots = make(chan struct{}, maxForwardsInFlight)
	sub, err := f.opts.Bus.Subscribe(ForwardSubject(f.opts.BusPrefix, f.k.Node()), f.serveForwarded)
	if err != nil {
		return fmt.Errorf("mcpfront: serving forwarded requests: %w", err)
	}
	f.sub = sub
	return nil
}

// Close stops serving forwarded requests.
func (f *Front) Close() error {
	if f.sub != nil {
		return f.sub.Unsubscribe()
	}
	return nil
}

// forward sends r (its token naming node c.Node) to that node and relays
// the answer.
func (f *Front) forward(w http.ResponseWriter, r *http.Request, c *Claims) {
	// (The DNS-rebinding check on the edge's listener is checkOrigin's,
	// made before; the owning node's request has no listener to check.)
	if !validNodeID(c.Node) {
		f.refuse(w, r, nil, http.StatusForbidden, nil, reason.TurnNotFound, "turn %s names node %q, which is not a node id", c.Turn, c.Node)
		return
	}
	var body []byte
	if r.Body != nil {
		var err error
		body, err = io.ReadAll(io.LimitReader(r.Body, f.opts.MaxRequestBodyBytes+1))
		if err != nil {
			http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if int64(len(body)) > f.opts.MaxRequestBodyBytes {
			http.Error(w, fmt.Sprintf("request body exceeds %d bytes", f.opts.MaxRequestBodyBytes), http.StatusRequestEntityTooLarge)
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), f.opts.RequestTimeout)
	defer cancel()
	dl, _ := ctx.Deadline()
	msg := nats.NewMsg(ForwardSubject(f.opts.BusPrefix, c.Node))
	for k, vs := range r.Header {
		if forwardedHeader(k) {
			msg.Header[http.CanonicalHeaderKey(k)] = vs
		}
	}
	msg.Header.Set(hdrMethod, r.Method)
	msg.Header.Set(hdrHost, r.Host)
	msg.Header.Set(hdrFrom, f.k.Node())
	msg.Header.Set(hdrTimeout, strconv.FormatInt(max(time.Until(dl).Milliseconds(), 1), 10))
	msg.Data = body
	resp, err := f.opts.Bus.RequestMsgWithContext(ctx, msg)
	switch {
	case err == nil:
	case errors.Is(err, nats.ErrMaxPayload):
		f.refuse(w, r, body, http.StatusRequestEntityTooLarge, &notDispatched, reason.InvalidRequest,
			"the request (%d bytes with its headers) is larger than the bus carries (%d bytes): it cannot be forwarded to node %s, which serves turn %s",
			len(body)+headerBytes(msg.Header), f.opts.Bus.MaxPayload(), c.Node, c.Turn)
		return
	case errors.Is(err, nats.ErrNoResponders):
		f.refuse(w, r, body, http.StatusServiceUnavailable, &notDispatched, reason.NodeUnavailable,
			"turn %s is served by node %s, which does not answer (stopped or unreachable)", c.Turn, c.Node)
		return
	case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
		f.refuse(w, r, body, http.StatusGatewayTimeout, nil, reason.DeadlineExceeded,
			"node %s, which serves turn %s, did not answer within %v (a call may have run there)", c.Node, c.Turn, f.opts.RequestTimeout)
		return
	case r.Context().Err() != nil:
		return // the client went away
	default:
		f.refuse(w, r, body, http.StatusBadGateway, nil, reason.NodeUnavailable,
			"forwarding to node %s, which serves turn %s: %v", c.Node, c.Turn, err)
		return
	}
	status, err := strconv.Atoi(resp.Header.Get(hdrStatus))
	if err != nil || status < 100 || status > 599 {
		f.refuse(w, r, body, http.StatusBadGateway, nil, reason.Internal, "node %s answered a forwarded request without a status", c.Node)
		return
	}
	h := w.Header()
	for k, vs := range resp.Header {
		if k == hdrStatus || hopHeader(k) {
			continue
		}
		h[http.CanonicalHeaderKey(k)] = vs
	}
	h.Set("Content-Length", strconv.Itoa(len(resp.Data)))
	w.WriteHeader(status)
	_, _ = w.Write(resp.Data)
}

// serveForwarded serves one request forwarded from another node.
func (f *Front) serveForwarded(m *nats.Msg) {
	select {
	case f.fwdSlots <- struct{}{}:
	default:
		f.replyForwarded(m, errorAnswer(m.Data, m.Header.Get(hdrVersion), http.StatusServiceUnavailable, &notDispatched, reason.Overloaded,
			fmt.Sprintf("node %s serves %d forwarded requests already", f.k.Node(), maxForwardsInFlight)))
		return
	}
	go func() {
		defer func() { <-f.fwdSlots }()
		f.replyForwarded(m, f.answerForwarded(m))
	}()
}

// answerForwarded is this node's answer to m, as its /mcp would give it.
func (f *Front) answerForwarded(m *nats.Msg) *bufferedWriter {
	timeout := f.opts.RequestTimeout
	if ms, err := strconv.ParseInt(m.Header.Get(hdrTimeout), 10, 64); err == nil && ms > 0 && time.Duration(ms)*time.Millisecond < timeout {
		timeout = time.Duration(ms) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), forwardedKey{}, true), timeout)
	defer cancel()
	method := m.Header.Get(hdrMethod)
	if method == "" {
		method = http.MethodPost
	}
	r, err := http.NewRequestWithContext(ctx, method, f.opts.URL, bytes.NewReader(m.Data))
	if err != nil {
		return errorAnswer(m.Data, m.Header.Get(hdrVersion), http.StatusBadRequest, &notDispatched, reason.InvalidRequest, "forwarded request: "+err.Error())
	}
	for k, vs := range m.Header {
		if forwardedHeader(k) {
			r.Header[http.CanonicalHeaderKey(k)] = vs
		}
	}
	if h := m.Header.Get(hdrHost); h != "" {
		r.Host = h
	}
	r.ContentLength = int64(len(m.Data))
	r.RemoteAddr = "node:" + m.Header.Get(hdrFrom)
	bw := &bufferedWriter{header: http.Header{}}
	if int64(len(m.Data)) > f.opts.MaxRequestBodyBytes {
		http.Error(bw, fmt.Sprintf("request body exceeds %d bytes", f.opts.MaxRequestBodyBytes), http.StatusRequestEntityTooLarge)
		return bw
	}
	f.busHandler.ServeHTTP(bw, r)
	if bw.status == 0 {
		bw.status = http.StatusOK
	}
	// Stateless and answering with JSON, the front never streams; should
	// an answer be an event stream, it is not forwarded.
	if ct := baseMediaType(bw.header.Get("Content-Type")); ct == "text/event-stream" {
		return errorAnswer(m.Data, m.Header.Get(hdrVersion), http.StatusNotImplemented, nil, reason.InvalidRequest,
			fmt.Sprintf("node %s answered with an event stream, which is not forwarded between nodes: connect to %s", f.k.Node(), f.opts.URL))
	}
	return bw
}

// replyForwarded sends an answer back to the forwarding node; an answer
// larger than the bus carries is replaced by a refusal saying so.
func (f *Front) replyForwarded(m *nats.Msg, a *bufferedWriter) {
	out := answerMsg(m.Reply, a)
	err := m.RespondMsg(out)
	if errors.Is(err, nats.ErrMaxPayload) {
		size := len(out.Data) + headerBytes(out.Header)
		a = errorAnswer(m.Data, m.Header.Get(hdrVersion), http.StatusBadGateway, nil, reason.ResultTooLarge,
			fmt.Sprintf("node %s's answer (%d bytes with its headers) is larger than the bus carries (%d bytes): the request was served there, but its answer cannot be relayed; connect to %s",
				f.k.Node(), size, f.opts.Bus.MaxPayload(), f.opts.URL))
		err = m.RespondMsg(answerMsg(m.Reply, a))
	}
	if err != nil {
		f.opts.Logger.Warn("mcpfront: answering a forwarded request", "from", m.Header.Get(hdrFrom), "err", err)
	}
}

// answerMsg is the message carrying answer a to reply: its headers less
// the connection's, and its status.
func answerMsg(reply string, a *bufferedWriter) *nats.Msg {
	out := nats.NewMsg(reply)
	for k, vs := range a.header {
		if !hopHeader(k) {
			out.Header[k] = vs
		}
	}
	out.Header.Set(hdrStatus, strconv.Itoa(a.status))
	out.Data = a.buf.Bytes()
	return out
}

// refuse answers r, whose body is body, with errorAnswer.
func (f *Front) refuse(w http.ResponseWriter, r *http.Request, body []byte, status int, dispatched *bool, code reason.Code, format string, args ...any) {
	a := errorAnswer(body, r.Header.Get(hdrVersion), status, dispatched, code, fmt.Sprintf(format, args...))
	for k, vs := range a.header {
		w.Header()[k] = vs
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.buf.Bytes())
}

// hdrVersion is the MCP protocol-version header.
const hdrVersion = "Mcp-Protocol-Version"

// notDispatched is a Refusal's dispatched: false (the call never reached
// the turn's node, or was refused there before the turn saw it).
var notDispatched = false

// errorAnswer is the front's own refusal of the request whose body is
// body, in a form MCP clients read. A failure on the server's side
// (status 5xx: the turn's node gone, silent or overloaded, an answer the
// bus cannot carry) of a JSON-RPC request is answered as MCP's
// Streamable HTTP transport answers a request that reached the server:
// HTTP 200 with a JSON-RPC response — for tools/call a tool error
// (isError, structuredContent a Refusal with the reason code, as the turn's
// own refusals), for any other method a JSON-RPC error (code CodeRefused,
// data {code, message}, as a refused listing). Clients read neither from
// a 5xx (the official Go SDK's client reports only the status text), so
// status is used only for what is not a request (a notification, a
// batch, a body that is not JSON-RPC), with the JSON-RPC error and id
// null. A 4xx status (a request larger than the bus carries, a token
// naming no node) is kept, with the JSON-RPC error: clients read those.
// version is the request's protocol-version header.
func errorAnswer(body []byte, version string, status int, dispatched *bool, code reason.Code, msg string) *bufferedWriter {
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	isRequest := json.Unmarshal(body, &req) == nil && req.Method != "" && len(req.ID) > 0 &&
		(req.ID[0] == '"' || req.ID[0] == '-' || req.ID[0] >= '0' && req.ID[0] <= '9') // a string or a number
	if !isRequest {
		req.ID = nil // answered with id null
	}
	a := &bufferedWriter{header: http.Header{}, status: status}
	a.header.Set("Content-Type", "application/json")
	var out []byte
	if isRequest && status >= 500 {
		a.status = http.StatusOK
		a.header.Set("Cache-Control", "no-cache, no-transform")
		if req.Method == "tools/call" {
			res := &mcp.CallToolResult{
				IsError:           true,
				Content:           []mcp.Content{&mcp.TextContent{Text: string(code) + ": " + msg}},
				StructuredContent: Refusal{Code: string(code), Message: msg, Dispatched: dispatched},
			}
			if version == modernRevision {
				annotate(&res.Meta)
				markComplete(res)
			}
			result, err := sdkMarshal(res)
			if err == nil {
				out = rpcResult(req.ID, result)
			}
		}
	}
	if out == nil {
		out = rpcRefusal(req.ID, msg, code, msg)
	}
	a.buf.Write(out)
	return a
}

// rpcRefusal is the front's own refusal as a JSON-RPC error answering id
// (null when nil): code CodeRefused, message, and data {code, detail}, as
// a refused listing carries (refusedError).
func rpcRefusal(id json.RawMessage, message string, code reason.Code, detail string) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{
		"code": CodeRefused, "message": message, "data": map[string]string{"code": string(code), "message": detail}}})
	return b
}

// headerBytes is about what h takes on the wire.
func headerBytes(h nats.Header) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// validNodeID reports whether id can be a subject token.
func validNodeID(id string) bool {
	return id != "" && !strings.ContainsAny(id, ".*> \t\r\n")
}
