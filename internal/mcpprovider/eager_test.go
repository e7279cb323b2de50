package mcpprovider_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/internal/providers"
)

// slowStart is an MCP server (its listing fresh for an hour) whose start (its initialize) takes longer
// than a turn's resolution may wait: a stdio server npx must download.
func slowStart(d time.Duration) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "slow", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "a", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
		})
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "initialize" || method == "server/discover" {
				time.Sleep(d)
			}
			res, err := next(ctx, method, req)
			if l, ok := res.(*mcp.ListToolsResult); ok && err == nil {
				l.TTLMs = 3600000 // fresh for an hour
			}
			return res, err
		}
	})
	return s
}

// firstTurn is the first turn's listing on a kernel whose resolution
// waits at most 200ms for p.
func firstTurn(t *testing.T, p providers.ContextToolProvider) actors.ToolList {
	t.Helper()
	src, err := authority.NewStaticSource(map[[2]string][]authority.GrantSpec{{"acme", "ada"}: {{ID: "g", Capability: "mcp.**", Resource: "mcp/**"}}})
	if err != nil {
		t.Fatal(err)
	}
	k, err := actors.New(actors.Options{Node: "n1", Providers: []providers.ContextToolProvider{p}, Authority: src, Sink: audit.NewMemory(),
		ResolveTimeout: 200 * time.Millisecond, CallTimeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Shutdown(context.Background()) })
	_, who := openTurn(t, k)
	l, err := k.ListTools(ctxT(t), who)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// discovery: lazy (the default) starts the server when the first turn
// asks, and a start slower than the resolution's wait leaves that turn
// without its tools, degraded, saying why; eager starts and discovers at
// start, so once the provider is warmed the first turn has them.
func TestEagerDiscoveryServesTheFirstTurn(t *testing.T) {
	srv := slowStart(time.Second)
	newP := func(mode string) *mcpprovider.Provider {
		p, err := mcpprovider.New("work", mcpprovider.Config{Transport: "memory", Server: "slow", Discovery: mode},
			&mcpprovider.Options{Memory: func(string) (*mcp.Server, bool) { return srv, true }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		return p
	}

	lazy := newP("")
	select {
	case <-lazy.Warmed():
	default:
		t.Fatal("a lazy provider is not warmed at once")
	}
	l := firstTurn(t, lazy)
	if len(l.Tools) != 0 || len(l.Degraded) != 1 || l.Degraded[0].Provider != "work" || l.Degraded[0].Status != "failed" || l.Degraded[0].Reason != "provider_timeout" {
		t.Fatalf("lazy first turn: %v degraded %+v", aliases(l), l.Degraded)
	}

	eager := newP("eager")
	<-eager.Warmed()
	l = firstTurn(t, eager)
	if !slices.Equal(aliases(l), []string{"work_a"}) || len(l.Degraded) != 0 {
		t.Fatalf("eager first turn: %v degraded %+v", aliases(l), l.Degraded)
	}
	if eager.Discoveries() != 1 {
		t.Fatalf("%d discoveries: the turn did not take the eager snapshot", eager.Discoveries())
	}
}

func TestDiscoveryModeValidated(t *testing.T) {
	if _, err := mcpprovider.New("work", mcpprovider.Config{Transport: "memory", Server: "x", Discovery: "sometimes"}, nil); err == nil {
		t.Fatal("discovery: sometimes accepted")
	}
}
