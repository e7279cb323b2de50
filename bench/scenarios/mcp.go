package scenarios

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/bench/harness"
)

// The MCP scenarios: the same echo tool on an MCP server built with the
// SDK, served over streamable HTTP on loopback (2026-07-28, stateless,
// ttlMs five minutes). The floor is the SDK's own client calling it
// directly; the scenario is a turn in the kernel (in process, audit
// published async) whose tool is served by the MCP-backed provider.
const (
	MCPProvider    = "mcp-provider"
	FloorMCPDirect = "floor-mcp-direct"
	mcpServerID    = "bench"
	mcpTTL         = 5 * time.Minute
)

// mcpEchoServer starts the MCP server on loopback and returns its URL.
func mcpEchoServer(c *closer) (string, error) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "bench-echo", Version: "1"}, &mcp.ServerOptions{
		SetCacheable: func(_ context.Context, _ mcp.Request, cc *mcp.Cacheable) {
			cc.TTLMs, cc.CacheScope = int(mcpTTL/time.Millisecond), "public"
		},
	})
	srv.AddTool(&mcp.Tool{Name: "echo", Description: echoDefinition.Description, InputSchema: echoDefinition.InputSchema,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}, StructuredContent: req.Params.Arguments}, nil
		})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	hs := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	c.add(hs.Shutdown)
	return "http://" + ln.Addr().String() + "/mcp", nil
}

// FloorMCP is the SDK's client calling the MCP server directly: one
// session, shared by the workers, as the provider shares one per
// credential profile.
func (e *Env) FloorMCP(name string) harness.Scenario {
	return harness.Scenario{
		Name: name, Description: "MCP SDK client → MCP server over streamable HTTP on loopback (the MCP provider's floor)",
		Setup: func(ctx context.Context, p harness.Params) (harness.Target, error) {
			t := &funcTarget{}
			url, err := mcpEchoServer(&t.c)
			if err != nil {
				return nil, err
			}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench-floor", Version: "1"}, nil).Connect(ctx,
				&mcp.StreamableClientTransport{Endpoint: url, DisableStandaloneSSE: true}, nil)
			if err != nil {
				_ = t.c.close(context.WithoutCancel(ctx))
				return nil, err
			}
			t.c.add(func(context.Context) error { return cs.Close() })
			args := json.RawMessage(payload(p.PayloadBytes))
			t.call = func(ctx context.Context, _ int) error {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: args})
				if err != nil {
					return err
				}
				if res.IsError {
					return fmt.Errorf("tool error")
				}
				return nil
			}
			return t, nil
		},
	}
}

// MCPProviderScenario is a turn whose tool is served by the MCP-backed
// provider in front of the same server. Its counters are the kernel's
// catalogue calls (one per turn); the provider's discoveries are printed
// at the end, per 1,000 turns (one per cache lifetime is the promise).
func (e *Env) MCPProviderScenario(name, floor string) harness.Scenario {
	return harness.Scenario{
		Name: name, Floor: floor, Description: "kernel API in process → MCP-backed provider → MCP server over streamable HTTP, audit published async",
		Setup: func(ctx context.Context, p harness.Params) (harness.Target, error) {
			n, err := e.startNode(ctx, nodeConfig{audit: AuditAsync, tool: toolMCP, stepCeiling: max(64, p.CallsPerTurn)})
			if err != nil {
				return nil, err
			}
			return &mcpTarget{kernelTarget: kernelTarget{n: n, args: payload(p.PayloadBytes)}}, nil
		},
	}
}

// mcpTarget is a kernelTarget that counts its turns.
type mcpTarget struct {
	kernelTarget
	turns atomic.Int64
}

func (t *mcpTarget) Open(ctx context.Context) (harness.Turn, error) {
	t.turns.Add(1)
	return t.kernelTarget.Open(ctx)
}

func (t *mcpTarget) Close(ctx context.Context) error {
	if n := t.turns.Load(); n > 0 {
		fmt.Fprintf(os.Stderr, "%s: %d discoveries over %d turns (%.2f per 1,000 turns)\n", MCPProvider, t.n.mcp.Discoveries(), n, float64(t.n.mcp.Discoveries())*1000/float64(n))
	}
	return t.n.close(ctx)
}
