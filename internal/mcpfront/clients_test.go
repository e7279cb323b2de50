package mcpfront_test

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	m3client "github.com/mark3labs/mcp-go/client"
	m3transport "github.com/mark3labs/mcp-go/client/transport"
	m3 "github.com/mark3labs/mcp-go/mcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/mcpfront"
)

// A second, independent client (mark3labs/mcp-go) at its latest revision
// and at every revision the front offers: connect, list, call, refusals, step ceiling, and
// refused after the turn closes.
func TestSecondClientMark3labs(t *testing.T) {
	for _, v := range append([]string{""}, mcpfront.Versions()...) {
		t.Run("version="+v, func(t *testing.T) {
			e := newEnv(t, func(o *actors.Options) { o.StepCeiling = 1 }, nil)
			who, tok := e.open(t, conformance.Ada)
			c, err := m3client.NewStreamableHttpClient(e.url, m3transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + tok.Token}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			ctx := testCtx(t)
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			init, err := c.Initialize(ctx, m3.InitializeRequest{Params: m3.InitializeParams{ProtocolVersion: v, ClientInfo: m3.Implementation{Name: "m3", Version: "1"}}})
			if err != nil {
				t.Fatal(err)
			}
			if v != "" && init.ProtocolVersion != v {
				t.Fatalf("negotiated %s", init.ProtocolVersion)
			}
			if init.Capabilities.Tools == nil || init.Capabilities.Tools.ListChanged {
				t.Fatalf("tools capability %+v", init.Capabilities.Tools)
			}
			l, err := c.ListTools(ctx, m3.ListToolsRequest{})
			if err != nil || len(l.Tools) != 2 {
				t.Fatalf("list: %+v %v", l, err)
			}
			call := func(ws string) *m3.CallToolResult {
				t.Helper()
				res, err := c.CallTool(ctx, m3.CallToolRequest{Params: m3.CallToolParams{Name: "notion_search", Arguments: callArgs(ws)}})
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			code := func(res *m3.CallToolResult) string {
				t.Helper()
				b, _ := json.Marshal(res.StructuredContent)
				var r mcpfront.Refusal
				_ = json.Unmarshal(b, &r)
				if !res.IsError {
					t.Fatalf("allowed: %s", b)
				}
				return r.Code
			}
			if got := code(call("globex")); got != "no_matching_grant" {
				t.Fatalf("outside the grant: %s", got)
			}
			if res := call("acme"); res.IsError {
				t.Fatalf("inside the grant: %+v", res)
			}
			if got := code(call("acme")); got != "step_ceiling_exceeded" {
				t.Fatalf("past the ceiling: %s", got)
			}
			if _, err := c.CallTool(ctx, m3.CallToolRequest{Params: m3.CallToolParams{Name: "never_shown", Arguments: map[string]any{}}}); err == nil {
				t.Fatal("an unknown name was not a protocol error")
			}
			if err := e.k.Close(ctx, who, who.LeaseID); err != nil {
				t.Fatal(err)
			}
			if _, err := c.ListTools(ctx, m3.ListToolsRequest{}); err == nil || !strings.Contains(err.Error(), "403") && !strings.Contains(strings.ToLower(err.Error()), "forbidden") {
				t.Fatalf("after close: %v, want 403", err)
			}
		})
	}
}

// The official SDK's client over stdio, through the bridge `node mcp`
// runs, to the endpoint: list, call, refusal, then refused after close.
func TestOfficialClientOverStdio(t *testing.T) {
	for _, v := range []string{"2026-07-28", "2025-11-25", "2025-06-18"} {
		t.Run("version="+v, func(t *testing.T) {
			e := newEnv(t, nil, nil)
			who, tok := e.open(t, conformance.Ada)
			// Sandbox -> bridge and bridge -> sandbox pipes.
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			ctx, cancel := context.WithCancel(testCtx(t))
			done := make(chan error, 1)
			go func() {
				done <- mcpfront.ServeStdio(ctx, inR, outW, mcpfront.StdioOptions{URL: e.url, Token: tok.Token})
				outW.Close()
			}()
			t.Cleanup(func() {
				inW.Close()
				cancel()
				<-done
			})
			c := mcp.NewClient(&mcp.Implementation{Name: "stdio-test", Version: "1"}, nil)
			s, err := c.Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, &mcp.ClientSessionOptions{ProtocolVersion: v})
			if err != nil {
				t.Fatal(err)
			}
			l, err := s.ListTools(ctx, nil)
			if err != nil || len(l.Tools) != 2 {
				t.Fatalf("list: %+v %v", l, err)
			}
			res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "notion_search", Arguments: callArgs("acme")})
			if err != nil || res.IsError {
				t.Fatalf("call: %+v %v", res, err)
			}
			res, err = s.CallTool(ctx, &mcp.CallToolParams{Name: "notion_search", Arguments: callArgs("globex")})
			if err != nil {
				t.Fatal(err)
			}
			if code := refusalCode(t, res); code != "no_matching_grant" {
				t.Fatalf("refusal %s", code)
			}
			if _, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "never_shown", Arguments: map[string]any{}}); err == nil || !strings.Contains(err.Error(), "never_shown") {
				t.Fatalf("unknown tool over stdio: %v", err)
			}
			if err := e.k.Close(ctx, who, who.LeaseID); err != nil {
				t.Fatal(err)
			}
			_, err = s.CallTool(ctx, &mcp.CallToolParams{Name: "notion_search", Arguments: callArgs("acme")})
			if err == nil || !strings.Contains(err.Error(), "forbidden") || !strings.Contains(err.Error(), "is closed") {
				t.Fatalf("after close over stdio: %v", err)
			}
		})
	}
}
