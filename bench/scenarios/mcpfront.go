package scenarios

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/bench/harness"
	"github.com/sharedos/sharedos/internal/mcpfront"
)

// The MCP front (issue #11): a model sandbox's tools/call through a turn
// served over MCP, against its floor, a bare net/http handler doing the
// same JSON-RPC round trip.
const (
	MCPFront      = "mcp"
	FloorMCPFront = "floor-mcp-http"
)

// mcpHTTP is the client both sides are measured with: the same loopback
// round trip, the same body, headers and checks.
type mcpHTTP struct {
	hc    *http.Client
	url   string
	token string
	args  json.RawMessage
}

// newHTTPClient keeps a connection per worker alive across turns.
func newHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute}}
}

func (c *mcpHTTP) call(ctx context.Context, i int) error {
	body := make([]byte, 0, 128+len(c.args))
	body = append(body, `{"jsonrpc":"2.0","id":`...)
	body = strconv.AppendInt(body, int64(i+1), 10)
	body = append(body, `,"method":"tools/call","params":{"name":"`+benchAlias+`","arguments":`...)
	body = append(body, c.args...)
	body = append(body, "}}"...)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"result"`)) || bytes.Contains(b, []byte(`"isError":true`)) {
		return fmt.Errorf("mcp: %d %s", res.StatusCode, b)
	}
	return nil
}

func listenHTTP(h http.Handler, c *closer) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	c.add(func(ctx context.Context) error { return srv.Shutdown(ctx) })
	return "http://" + ln.Addr().String() + mcpfront.Path, nil
}

// FloorMCPFrontHTTP is a bare net/http handler that decodes the JSON-RPC
// tools/call and answers it with the arguments as text: HTTP on loopback
// and JSON both ways, nothing else.
func (e *Env) FloorMCPFrontHTTP(name string) harness.Scenario {
	return harness.Scenario{
		Name: name, Description: "HTTP client → bare net/http JSON-RPC handler on loopback (the MCP front's floor)",
		Setup: func(ctx context.Context, p harness.Params) (harness.Target, error) {
			t := &funcTarget{}
			url, err := listenHTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var req struct {
					ID     json.RawMessage `json:"id"`
					Params struct {
						Name      string          `json:"name"`
						Arguments json.RawMessage `json:"arguments"`
					} `json:"params"`
				}
				if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				out, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": map[string]any{
					"content": []any{map[string]any{"type": "text", "text": string(req.Params.Arguments)}}}})
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write(out)
			}), &t.c)
			if err != nil {
				return nil, err
			}
			hc := newHTTPClient()
			t.c.add(func(context.Context) error { hc.CloseIdleConnections(); return nil })
			c := &mcpHTTP{hc: hc, url: url, args: payload(p.PayloadBytes)}
			t.call = c.call
			return t, nil
		},
	}
}

// MCPFrontScenario is a turn served by the MCP front: the runtime opens
// it in process and mints a token; the sandbox calls over HTTP with it.
func (e *Env) MCPFrontScenario(name, floor string) harness.Scenario {
	return harness.Scenario{
		Name: name, Floor: floor, Description: "HTTP client → node's MCP front (token verified, stateless SDK server) → turn actor, static tool, audit published async",
		Setup: func(ctx context.Context, p harness.Params) (_ harness.Target, err error) {
			n, err := e.startNode(ctx, nodeConfig{audit: AuditAsync, tool: ToolStatic, stepCeiling: max(64, p.CallsPerTurn), mcpFront: true})
			if err != nil {
				return nil, err
			}
			defer func() {
				if err != nil {
					_ = n.close(context.WithoutCancel(ctx))
				}
			}()
			_, key, _ := ed25519.GenerateKey(rand.Reader)
			// The front needs its URL, so the mux is served first and the
			// front mounted on it before any turn is opened.
			mux := http.NewServeMux()
			url, err := listenHTTP(mux, &n.closer)
			if err != nil {
				return nil, err
			}
			front, err := mcpfront.New(mcpfront.Options{Kernel: n.kernel, Key: key, URL: url, Logger: e.opts.Logger})
			if err != nil {
				return nil, err
			}
			front.Mount(mux)
			n.watch.Attach(front)
			hc := newHTTPClient()
			n.closer.add(func(context.Context) error { hc.CloseIdleConnections(); return nil })
			return &mcpFrontTarget{n: n, front: front, url: url, hc: hc, args: payload(p.PayloadBytes)}, nil
		},
	}
}

type mcpFrontTarget struct {
	n     *node
	front *mcpfront.Front
	url   string
	hc    *http.Client
	args  []byte
}

func (t *mcpFrontTarget) Open(ctx context.Context) (harness.Turn, error) {
	a, err := openTurn(ctx, t.n.kernel)
	if err != nil {
		return nil, err
	}
	tok, err := t.front.Mint(ctx, a, mcpfront.MaxTokenLifetime)
	if err != nil {
		return nil, errors.Join(err, t.n.kernel.Close(ctx, a, a.LeaseID))
	}
	return &mcpFrontTurn{t: t, access: a, c: &mcpHTTP{hc: t.hc, url: t.url, token: tok.Token, args: t.args}}, nil
}

func (t *mcpFrontTarget) Close(ctx context.Context) error { return t.n.close(ctx) }

func (t *mcpFrontTarget) Counters() harness.Counters { return t.n.counted.counters() }

type mcpFrontTurn struct {
	t      *mcpFrontTarget
	access authority.AccessContext
	c      *mcpHTTP
}

func (t *mcpFrontTurn) Call(ctx context.Context, i int) error { return t.c.call(ctx, i) }

func (t *mcpFrontTurn) Close(ctx context.Context) error {
	return t.t.n.kernel.Close(ctx, t.access, t.access.LeaseID)
}
