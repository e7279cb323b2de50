package mcpprovider

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The SDK decodes a tools/list answer into its own Tool type, which does
// not round-trip the wire (a readOnlyHint that is absent and one that is
// false decode alike). The provider hashes and validates what the server
// actually sent, so every transport it builds tees tools/list answers:
// the raw "result" of each answer goes to the exchange carried by the
// request's context, in page order.
//
// The tee also takes ttlMs out of what the SDK sees (it is set to 0), so
// the SDK's own per-session list cache — which nothing outside it can
// invalidate — never answers from memory: every tools/list the provider
// asks for reaches the server, and freshness is the provider's alone.

// exchange collects what one operation (a connect, a discovery, a call)
// observed on the wire. Safe for concurrent use.
type exchange struct {
	limit int // bytes of one tools/list result; beyond it the answer is refused

	mu       sync.Mutex
	pages    []json.RawMessage
	status   int   // the last HTTP status that was not 2xx (0: none)
	tooLarge int64 // size of a refused answer (0: none)
	// written: a tools/call request was written whole to the session's
	// connection (stdio, in-memory: the connection's Write returned nil;
	// HTTP: the request was written to a TCP connection), so the server
	// may have run it.
	written bool
	// challenge: the WWW-Authenticate values of the last 401 or 403.
	challenge []string
}

func (x *exchange) setChallenge(v []string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.challenge = v
}

func (x *exchange) challenges() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.challenge
}

func (x *exchange) setWritten() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.written = true
}

func (x *exchange) wasWritten() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.written
}

type exchangeKey struct{}

func withExchange(ctx context.Context, x *exchange) context.Context {
	return context.WithValue(ctx, exchangeKey{}, x)
}

func exchangeOf(ctx context.Context) *exchange {
	x, _ := ctx.Value(exchangeKey{}).(*exchange)
	return x
}

func (x *exchange) addPage(raw json.RawMessage) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.pages = append(x.pages, raw)
}

func (x *exchange) setStatus(code int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.status = code
}

func (x *exchange) setTooLarge(n int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.tooLarge = n
}

func (x *exchange) pageCount() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.pages)
}

// takePages returns the pages collected so far and forgets them.
func (x *exchange) takePages() []json.RawMessage {
	x.mu.Lock()
	defer x.mu.Unlock()
	p := x.pages
	x.pages = nil
	return p
}

func (x *exchange) observed() (status int, tooLarge int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.status, x.tooLarge
}

// errTooLarge is the JSON-RPC error a refused (oversized) answer is
// replaced with, so the SDK never decodes it.
var errTooLarge = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "sharedos: answer over the response byte limit"}

// stripTTL returns result with "ttlMs" set to 0 for the SDK's eyes.
// result is bounded by the caller; it is decoded one level deep only.
func stripTTL(result json.RawMessage) json.RawMessage {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(result, &top); err != nil {
		return result // the SDK will refuse it; the raw copy is classified by the provider
	}
	if _, ok := top["ttlMs"]; !ok {
		return result
	}
	top["ttlMs"] = json.RawMessage("0")
	b, err := json.Marshal(top)
	if err != nil {
		return result
	}
	return b
}

// teeTransport wraps a transport whose connections the client SDK does
// not need to see through (stdio, in-memory): it correlates tools/list
// requests with their answers by JSON-RPC id.
type teeTransport struct {
	inner mcp.Transport
	limit int
}

func (t *teeTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &teeConn{Connection: c, limit: t.limit, pending: map[any]*exchange{}}, nil
}

// maxPending bounds the tools/list requests a connection remembers.
const maxPending = 1024

type teeConn struct {
	mcp.Connection
	limit int

	mu      sync.Mutex
	pending map[any]*exchange
}

func (c *teeConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "tools/list" && req.IsCall() {
		if x := exchangeOf(ctx); x != nil {
			c.mu.Lock()
			if len(c.pending) >= maxPending { // answers that never came (calls given up)
				clear(c.pending)
			}
			c.pending[req.ID.Raw()] = x
			c.mu.Unlock()
		}
	}
	err := c.Connection.Write(ctx, msg)
	if req, ok := msg.(*jsonrpc.Request); ok && err == nil && req.Method == "tools/call" {
		if x := exchangeOf(ctx); x != nil {
			x.setWritten()
		}
	}
	return err
}

func (c *teeConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err != nil {
		return msg, err
	}
	resp, ok := msg.(*jsonrpc.Response)
	if !ok {
		return msg, nil
	}
	c.mu.Lock()
	x := c.pending[resp.ID.Raw()]
	delete(c.pending, resp.ID.Raw())
	c.mu.Unlock()
	if x == nil || resp.Error != nil {
		return msg, nil
	}
	if len(resp.Result) > c.limit {
		x.setTooLarge(int64(len(resp.Result)))
		return &jsonrpc.Response{ID: resp.ID, Error: errTooLarge}, nil
	}
	x.addPage(bytes.Clone(resp.Result))
	return &jsonrpc.Response{ID: resp.ID, Result: stripTTL(resp.Result), Extra: resp.Extra}, nil
}

// teeRoundTripper is the HTTP transport under the SDK's streamable client
// (whose connection must not be wrapped: the SDK tells it the session's
// protocol version). It adds the credential profile's headers, records
// non-2xx statuses for classification, bounds every POST answer to limit
// bytes, tees tools/list answers (JSON or SSE) and reports the end of
// long-lived streams (the standalone GET, subscriptions/listen).
type teeRoundTripper struct {
	base    http.RoundTripper
	host    string      // the configured endpoint's host: the only one headers go to
	headers http.Header // added to requests to host; may carry the credential
	limit   int
	// onStreamEnd is called when a long-lived stream's body ends.
	onStreamEnd func()
	// bearer, for an OAuth profile, gives the access token each request
	// carries (Authorization: Bearer), current at the time of the request.
	bearer func(context.Context) (string, error)
}

// rpcHead is the part of a JSON-RPC message the tee reads.
type rpcHead struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

func (t *teeRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	if req.URL.Host != t.host {
		// Never another server's: not even one the endpoint points at.
		return nil, fmt.Errorf("mcpprovider: request to %s, not the configured endpoint", req.URL.Host)
	}
	for k, vs := range t.headers {
		req.Header[k] = vs
	}
	if t.bearer != nil {
		tok, err := t.bearer(req.Context())
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	var head rpcHead
	if req.Method == http.MethodPost && req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			b, _ := io.ReadAll(io.LimitReader(body, 1<<20)) // our own request
			_ = body.Close()
			_ = json.Unmarshal(b, &head)
		}
	}
	x := exchangeOf(req.Context())
	if x != nil && head.Method == "tools/call" {
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			WroteRequest: func(i httptrace.WroteRequestInfo) {
				if i.Err == nil {
					x.setWritten()
				}
			},
		}))
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if x != nil && (resp.StatusCode < 200 || resp.StatusCode > 299) {
		x.setStatus(resp.StatusCode)
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			x.setChallenge(resp.Header.Values("WWW-Authenticate"))
		}
	}
	stream := (req.Method == http.MethodGet || head.Method == "subscriptions/listen") &&
		resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	switch {
	case stream:
		resp.Body = &endNotifier{ReadCloser: resp.Body, onEnd: t.onStreamEnd}
	case req.Method == http.MethodPost:
		var tools *teeTarget
		if head.Method == "tools/list" && len(head.ID) > 0 && x != nil {
			tools = &teeTarget{id: string(head.ID), x: x}
		}
		resp.Body = t.bounded(resp, tools)
	}
	return resp, nil
}

type teeTarget struct {
	id string // the request's raw JSON id
	x  *exchange
}

// bounded limits a POST answer to t.limit bytes and, for a tools/list
// request, tees and rewrites its answer.
func (t *teeRoundTripper) bounded(resp *http.Response, tools *teeTarget) io.ReadCloser {
	body := resp.Body
	limited := &limitReader{r: body, n: int64(t.limit) + 1}
	if tools == nil || resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &readCloser{Reader: limited, Closer: body}
	}
	if ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";"); ct == "text/event-stream" {
		pr, pw := io.Pipe()
		go rewriteSSE(pw, limited, int64(t.limit), tools)
		return &readCloser{Reader: pr, Closer: closers{pr, body}}
	}
	data, err := io.ReadAll(limited)
	_ = body.Close()
	if tl := (*tooLargeError)(nil); errors.As(err, &tl) {
		tools.x.setTooLarge(int64(t.limit) + 1)
		return io.NopCloser(bytes.NewReader(tooLargeAnswer(tools.id)))
	}
	if err != nil {
		return &readCloser{Reader: io.MultiReader(bytes.NewReader(data), errReader{err}), Closer: io.NopCloser(nil)}
	}
	return io.NopCloser(bytes.NewReader(teeMessage(data, tools)))
}

// teeMessage captures one JSON-RPC message if it answers tools and
// returns what the SDK is to see instead.
func teeMessage(data []byte, tools *teeTarget) []byte {
	var m rpcHead
	if json.Unmarshal(data, &m) != nil || string(m.ID) != tools.id || len(m.Result) == 0 {
		return data
	}
	tools.x.addPage(bytes.Clone(m.Result))
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return data
	}
	top["result"] = stripTTL(m.Result)
	b, err := json.Marshal(top)
	if err != nil {
		return data
	}
	return b
}

func tooLargeAnswer(id string) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":%q}}`, id, errTooLarge.Code, errTooLarge.Message)
}

// rewriteSSE copies an event stream, replacing the data of the event that
// answers tools (teed and stripped of its TTL). At most limit bytes are
// read; beyond that the stream ends with an error.
func rewriteSSE(w *io.PipeWriter, r io.Reader, limit int64, tools *teeTarget) {
	br := bufio.NewReaderSize(r, 64<<10)
	var event [][]byte // the lines of the event being read, without newlines
	var data bytes.Buffer
	flush := func() error {
		out := &bytes.Buffer{}
		if data.Len() > 0 {
			msg := teeMessage(bytes.TrimSuffix(data.Bytes(), []byte("\n")), tools)
			for _, l := range event {
				if !bytes.HasPrefix(l, []byte("data:")) {
					out.Write(l)
					out.WriteByte('\n')
				}
			}
			out.WriteString("data: ")
			out.Write(msg)
			out.WriteByte('\n')
		} else {
			for _, l := range event {
				out.Write(l)
				out.WriteByte('\n')
			}
		}
		out.WriteByte('\n')
		event = event[:0]
		data.Reset()
		_, err := w.Write(out.Bytes())
		return err
	}
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			l := bytes.TrimRight(line, "\r\n")
			if len(l) == 0 {
				if ferr := flush(); ferr != nil {
					_ = w.CloseWithError(ferr)
					return
				}
			} else {
				event = append(event, bytes.Clone(l))
				if d, ok := bytes.CutPrefix(l, []byte("data:")); ok {
					data.Write(bytes.TrimPrefix(d, []byte(" ")))
					data.WriteByte('\n')
				}
			}
		}
		if err != nil {
			var tl *tooLargeError
			if errors.As(err, &tl) {
				tools.x.setTooLarge(limit + 1)
			}
			if len(event) > 0 && !errors.As(err, &tl) {
				_ = flush()
			}
			if errors.Is(err, io.EOF) {
				err = nil
			}
			_ = w.CloseWithError(err)
			return
		}
	}
}

// limitReader reads at most n-1 bytes, then fails with tooLargeError.
type limitReader struct {
	r io.Reader
	n int64
}

type tooLargeError struct{}

func (*tooLargeError) Error() string { return "mcpprovider: answer over the response byte limit" }

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n <= 1 {
		return 0, &tooLargeError{}
	}
	if int64(len(p)) > l.n-1 {
		p = p[:l.n-1]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

type readCloser struct {
	io.Reader
	io.Closer
}

type closers []io.Closer

func (cs closers) Close() error {
	var err error
	for _, c := range cs {
		err = errors.Join(err, c.Close())
	}
	return err
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// endNotifier calls onEnd once when its body ends or is closed.
type endNotifier struct {
	io.ReadCloser
	onEnd func()
	once  sync.Once
}

func (e *endNotifier) Read(p []byte) (int, error) {
	n, err := e.ReadCloser.Read(p)
	if err != nil {
		e.end()
	}
	return n, err
}

func (e *endNotifier) Close() error {
	e.end()
	return e.ReadCloser.Close()
}

func (e *endNotifier) end() {
	if e.onEnd != nil {
		e.once.Do(e.onEnd)
	}
}
