package mcpfront

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sharedos/sharedos/reason"
)

// StdioOptions configure ServeStdio.
type StdioOptions struct {
	// URL is the MCP endpoint (the token's audience) and Token the
	// execution token. Required.
	URL, Token string
	// Client sends the requests. Default: a client of its own whose
	// connections are dialed within ConnectTimeout; either way each request
	// is bounded by RequestTimeout.
	Client *http.Client
	// ConnectTimeout bounds connecting to the endpoint. Default 5s.
	ConnectTimeout time.Duration
	// RequestTimeout bounds one request, from sending it to its whole
	// answer. Default 2m10s: longer than the front's own request timeout
	// (2m), so a slow call is answered by the node's deadline_exceeded
	// rather than cut here.
	RequestTimeout time.Duration
	// MaxMessageBytes bounds one message read from the sandbox. Default 4 MiB.
	MaxMessageBytes int
	// MaxInFlight bounds requests forwarded at once. Default 32.
	MaxInFlight int
}

// ServeStdio serves a sandbox that speaks MCP over stdio (newline-
// delimited JSON-RPC on in and out) by forwarding each message to the
// node's MCP endpoint with the execution token, and writing back each
// answer. Everything the turn does is decided at the endpoint; this is
// only the stdio transport. It returns when in ends (after answering what
// was in flight) or ctx ends. A request the endpoint refuses (401, 403,
// ...) is answered with a JSON-RPC error carrying the HTTP status and
// reason, so the sandbox sees why; one the endpoint does not answer (not
// reachable within ConnectTimeout, no answer within RequestTimeout) is
// answered node_unavailable or deadline_exceeded (unreachable). A
// notification is never answered, whatever the endpoint says to it. On
// 2026-07-28 each request carries the Mcp-Method and Mcp-Name headers
// that revision requires on HTTP.
func ServeStdio(ctx context.Context, in io.Reader, out io.Writer, opts StdioOptions) error {
	if opts.URL == "" || opts.Token == "" {
		return errors.New("mcpfront: stdio needs the endpoint URL and a token")
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 5 * time.Second
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 2*time.Minute + 10*time.Second
	}
	if opts.Client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = (&net.Dialer{Timeout: opts.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext
		tr.TLSHandshakeTimeout = opts.ConnectTimeout
		opts.Client = &http.Client{Transport: tr}
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = 4 << 20
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 32
	}
	b := &bridge{opts: opts, out: out, sem: make(chan struct{}, opts.MaxInFlight)}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), opts.MaxMessageBytes)
	lines := make(chan []byte)
	scanErr := make(chan error, 1)
	go func() {
		defer close(lines)
		for sc.Scan() {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 {
				continue
			}
			select {
			case lines <- bytes.Clone(line):
			case <-ctx.Done():
				return
			}
		}
		scanErr <- sc.Err()
	}()
	defer b.wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case line, ok := <-lines:
			if !ok {
				select {
				case err := <-scanErr:
					if errors.Is(err, bufio.ErrTooLong) {
						b.writeError(nil, -32600, fmt.Sprintf("message longer than %d bytes", opts.MaxMessageBytes))
					}
					return err
				default:
					return ctx.Err()
				}
			}
			b.handle(ctx, line)
		}
	}
}

type bridge struct {
	opts StdioOptions
	sem  chan struct{}
	wg   sync.WaitGroup

	wmu sync.Mutex
	out io.Writer

	vmu     sync.Mutex
	version string // negotiated by initialize
}

// envelope is what the bridge reads of a message.
type envelope struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`

	// Of params, when it is an object: what the headers carry.
	version string // _meta's protocol version
	name    string // tools/call's and prompts/get's name, resources/read's uri
	hasName bool
}

// readEnvelope decodes what the bridge reads of line (a JSON object; the
// endpoint judges the rest).
func readEnvelope(line []byte) (envelope, error) {
	var env envelope
	if err := json.Unmarshal(line, &env); err != nil {
		return env, err
	}
	var p struct {
		Meta struct {
			Version string `json:"io.modelcontextprotocol/protocolVersion"`
		} `json:"_meta"`
		Name *string `json:"name"`
		URI  *string `json:"uri"`
	}
	if json.Unmarshal(env.Params, &p) == nil {
		env.version = p.Meta.Version
		switch env.Method {
		case "tools/call", "prompts/get":
			if p.Name != nil {
				env.name, env.hasName = *p.Name, true
			}
		case "resources/read":
			if p.URI != nil {
				env.name, env.hasName = *p.URI, true
			}
		}
	}
	return env, nil
}

func (b *bridge) handle(ctx context.Context, line []byte) {
	env, err := readEnvelope(line)
	if err != nil {
		b.writeError(nil, -32700, "parse error: "+err.Error())
		return
	}
	version := env.version
	if version == "" {
		b.vmu.Lock()
		version = b.version
		b.vmu.Unlock()
	}
	if env.Method == "initialize" || env.Method == "notifications/initialized" {
		// The handshake in order: what follows is sent at the version
		// initialize negotiates, after the client said it is initialized.
		b.forward(ctx, line, env, version)
		return
	}
	b.sem <- struct{}{}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer func() { <-b.sem }()
		b.forward(ctx, line, env, version)
	}()
}

func (b *bridge) forward(ctx context.Context, line []byte, env envelope, version string) {
	ctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.opts.URL, bytes.NewReader(line))
	if err != nil {
		b.writeError(env.ID, -32603, err.Error())
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+b.opts.Token)
	if version != "" {
		req.Header.Set("MCP-Protocol-Version", version)
	}
	if version >= modernRevision && env.Method != "" {
		// 2026-07-28 requires the method (and a call's name) in headers
		// on HTTP, equal to the body's; a value no header can carry is
		// sent as it is, and the endpoint refuses the mismatch.
		req.Header["Mcp-Method"] = []string{env.Method}
		if env.hasName {
			req.Header["Mcp-Name"] = []string{env.name}
		}
	}
	res, err := b.opts.Client.Do(req)
	if err != nil {
		b.unreachable(line, env, version, err)
		return
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, int64(b.opts.MaxMessageBytes)+1))
	if err != nil {
		b.unreachable(line, env, version, err)
		return
	}
	ct, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
	var msgs [][]byte
	switch {
	case len(env.ID) == 0:
		// A notification has no answer: whatever the endpoint said to it
		// (202, or a refusal once the turn closed) is not the sandbox's
		// to read, and a response without an id would break its reader.
	case res.StatusCode == http.StatusAccepted || res.StatusCode == http.StatusNoContent:
	case ct == "text/event-stream":
		for _, l := range strings.Split(string(body), "\n") {
			if d, ok := strings.CutPrefix(l, "data:"); ok {
				msgs = append(msgs, []byte(strings.TrimSpace(d)))
			}
		}
	case ct == "application/json" && json.Valid(body):
		msgs = append(msgs, bytes.TrimSpace(body))
	default:
		b.writeError(env.ID, -32001, fmt.Sprintf("HTTP %d: %s", res.StatusCode, strings.TrimSpace(string(body))))
	}
	for _, m := range msgs {
		if env.Method == "initialize" {
			var r struct {
				Result struct {
					ProtocolVersion string `json:"protocolVersion"`
				} `json:"result"`
			}
			if json.Unmarshal(m, &r) == nil && r.Result.ProtocolVersion != "" {
				b.vmu.Lock()
				b.version = r.Result.ProtocolVersion
				b.vmu.Unlock()
			}
		}
		b.write(m)
	}
}

// unreachable answers a request the endpoint did not answer (err: it
// could not be reached, or did not answer within RequestTimeout) as the
// front answers what fails on the servers' side (errorAnswer): a
// tools/call a tool error whose refusal says node_unavailable (not
// dispatched when no connection was made) or deadline_exceeded (the call
// may have run), any other request a JSON-RPC error with that reason in
// its data. A notification has no answer.
func (b *bridge) unreachable(line []byte, env envelope, version string, err error) {
	if len(env.ID) == 0 {
		return
	}
	code, dispatched := reason.NodeUnavailable, (*bool)(nil)
	var oe *net.OpError
	var ne net.Error
	switch {
	case errors.As(err, &oe) && oe.Op == "dial":
		dispatched = &notDispatched
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded):
		code = reason.DeadlineExceeded
	}
	msg := fmt.Sprintf("the node's MCP endpoint %s did not answer: %v", b.opts.URL, err)
	if code == reason.DeadlineExceeded {
		msg = fmt.Sprintf("the node's MCP endpoint %s did not answer within %s: %v", b.opts.URL, b.opts.RequestTimeout, err)
	}
	a := errorAnswer(line, version, http.StatusServiceUnavailable, dispatched, code, msg)
	b.write(bytes.TrimSpace(a.buf.Bytes()))
}

func (b *bridge) write(m []byte) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	_, _ = b.out.Write(append(bytes.Clone(m), '\n'))
}

func (b *bridge) writeError(id json.RawMessage, code int, msg string) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	m, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: id, Error: struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{code, msg}})
	b.write(m)
}
