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
	"net/http"
	"strings"
	"sync"
)

// StdioOptions configure ServeStdio.
type StdioOptions struct {
	// URL is the MCP endpoint (the token's audience) and Token the
	// execution token. Required.
	URL, Token string
	// Client sends the requests. Default: a client of its own.
	Client *http.Client
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
// reason, so the sandbox sees why.
func ServeStdio(ctx context.Context, in io.Reader, out io.Writer, opts StdioOptions) error {
	if opts.URL == "" || opts.Token == "" {
		return errors.New("mcpfront: stdio needs the endpoint URL and a token")
	}
	if opts.Client == nil {
		opts.Client = &http.Client{}
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
	Params struct {
		Meta map[string]any `json:"_meta"`
	} `json:"params"`
}

const metaProtocolVersion = "io.modelcontextprotocol/protocolVersion"

func (b *bridge) handle(ctx context.Context, line []byte) {
	var env envelope
	if err := json.Unmarshal(line, &env); err != nil {
		b.writeError(nil, -32700, "parse error: "+err.Error())
		return
	}
	version, _ := env.Params.Meta[metaProtocolVersion].(string)
	if version == "" {
		b.vmu.Lock()
		version = b.version
		b.vmu.Unlock()
	}
	if env.Method == "initialize" {
		// In order: what follows is sent at the version it negotiates.
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
	res, err := b.opts.Client.Do(req)
	if err != nil {
		b.writeError(env.ID, -32603, "the node's MCP endpoint did not answer: "+err.Error())
		return
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, int64(b.opts.MaxMessageBytes)+1))
	if err != nil {
		b.writeError(env.ID, -32603, "reading the answer: "+err.Error())
		return
	}
	ct, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
	var msgs [][]byte
	switch {
	case res.StatusCode == http.StatusAccepted || res.StatusCode == http.StatusNoContent:
	case ct == "text/event-stream":
		for _, l := range strings.Split(string(body), "\n") {
			if d, ok := strings.CutPrefix(l, "data:"); ok {
				msgs = append(msgs, []byte(strings.TrimSpace(d)))
			}
		}
	case ct == "application/json" && json.Valid(body):
		msgs = append(msgs, bytes.TrimSpace(body))
	case len(env.ID) > 0:
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
