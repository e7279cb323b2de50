package mcpfront_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/mcpfront"
	"github.com/sharedos/sharedos/internal/mcpprovider"
)

// A tool's title, icons and output schema, as an MCP server declares
// them, reach the turn's MCP clients through discovery, the turn and the
// front unchanged.
func TestToolTitleIconsOutputSchemaSurviveDiscovery(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "backend", Version: "1"}, nil)
	icons := []mcp.Icon{{Source: "https://example.com/s.png", MIMEType: "image/png", Sizes: []string{"48x48"}}, {Source: "data:image/svg+xml;base64,PHN2Zy8+"}}
	out := json.RawMessage(`{"type":"object","properties":{"hits":{"type":"integer"}},"required":["hits"]}`)
	srv.AddTool(&mcp.Tool{Name: "find", Title: "Find pages", Description: "Finds pages.", Icons: icons, InputSchema: workspaceSchema, OutputSchema: out},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{StructuredContent: map[string]any{"hits": 1}, Content: []mcp.Content{&mcp.TextContent{Text: `{"hits":1}`}}}, nil
		})
	e := backedEnv(t, srv, mcpprovider.Config{})
	_, tok := e.open(t, conformance.Ada)
	for _, v := range []string{"2026-07-28", "2025-11-25", "2025-06-18"} {
		s := e.connect(t, tok.Token, v)
		l, err := s.ListTools(testCtx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		var got *mcp.Tool
		for _, tl := range l.Tools {
			if tl.Name == "notion_find" {
				got = tl
			}
		}
		if got == nil {
			t.Fatalf("%s: notion_find not listed: %+v", v, l.Tools)
		}
		if got.Title != "Find pages" || !reflect.DeepEqual(got.Icons, icons) {
			t.Errorf("%s: title %q icons %+v", v, got.Title, got.Icons)
		}
		var gotOut, wantOut any
		b, _ := json.Marshal(got.OutputSchema)
		_ = json.Unmarshal(b, &gotOut)
		_ = json.Unmarshal(out, &wantOut)
		if !reflect.DeepEqual(gotOut, wantOut) {
			t.Errorf("%s: output schema %s", v, b)
		}
	}
}

// A turn whose resolution did not get a provider whole says so in its
// listing's _meta (io.sharedos/degraded), at every revision.
func TestListingSaysResolutionDegraded(t *testing.T) {
	e := backedEnv(t, nil, mcpprovider.Config{Transport: "memory", Server: "missing"})
	_, tok := e.open(t, conformance.Ada)
	for _, v := range mcpfront.Versions() {
		s := e.connect(t, tok.Token, v)
		l, err := s.ListTools(testCtx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(l.Meta[mcpfront.MetaDegraded])
		var d []mcpfront.Degraded
		if err := json.Unmarshal(b, &d); err != nil || len(d) != 1 || d[0].Provider != "notion" || d[0].Status != "failed" || d[0].Code == "" || d[0].Message == "" {
			t.Fatalf("%s: degraded %s", v, b)
		}
	}
	// A whole resolution has none.
	e = newEnv(t, nil, nil)
	_, tok = e.open(t, conformance.Ada)
	l, err := e.connect(t, tok.Token, "2026-07-28").ListTools(testCtx(t), nil)
	if err != nil || l.Meta[mcpfront.MetaDegraded] != nil {
		t.Fatalf("whole: %v %v", l.Meta, err)
	}
}
