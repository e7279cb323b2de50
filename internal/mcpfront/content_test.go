package mcpfront_test

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/mcpfront"
	"github.com/sharedos/sharedos/internal/mcpprovider"
)

var (
	png  = append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{0, 1, 2, 0xff}, 1000)...)
	wav  = append([]byte("RIFF"), bytes.Repeat([]byte{7, 0x80}, 500)...)
	blob = bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 256)
	size = int64(4033)
)

// richResult is one of every content block MCP defines, each with
// annotations or _meta, and structured content.
func richResult() *mcp.CallToolResult {
	return &mcp.CallToolResult{
		Content: []mcp.Content{
			&mcp.TextContent{Text: "three pages", Annotations: &mcp.Annotations{Audience: []mcp.Role{"user"}, Priority: 0.5}, Meta: mcp.Meta{"k": "v"}},
			&mcp.ImageContent{Data: png, MIMEType: "image/png", Annotations: &mcp.Annotations{LastModified: "2026-12-01T12:00:00Z"}},
			&mcp.AudioContent{Data: wav, MIMEType: "audio/wav", Meta: mcp.Meta{"seconds": 1.5}},
			&mcp.ResourceLink{URI: "file:///pages/a.md", Name: "a.md", Title: "Page A", Description: "the first page", MIMEType: "text/markdown", Size: &size,
				Icons: []mcp.Icon{{Source: "https://example.com/md.png", MIMEType: "image/png"}}},
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///pages/b.md", MIMEType: "text/markdown", Text: "# B", Meta: mcp.Meta{"rev": 3.0}}},
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///pages/c.bin", MIMEType: "application/octet-stream", Blob: blob}, Annotations: &mcp.Annotations{Priority: 1}},
		},
		StructuredContent: map[string]any{"pages": 3.0},
	}
}

// contentServer offers "rich" (richResult), "structured" (structured
// content only, no text) and "failing" (a tool error with an image).
func contentServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "backend", Version: "1"}, nil)
	add := func(name string, res func() *mcp.CallToolResult) {
		s.AddTool(&mcp.Tool{Name: name, InputSchema: workspaceSchema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return res(), nil
		})
	}
	add("rich", richResult)
	add("structured", func() *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{}, StructuredContent: map[string]any{"file": strings.Repeat("x", 64<<10)}}
	})
	add("failing", func() *mcp.CallToolResult {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "render failed"}, &mcp.ImageContent{Data: png, MIMEType: "image/png"}}}
	})
	return s
}

// canon is v's JSON decoded into plain values, for comparing.
func canon(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// Every content block an MCP server returns (text, image, audio,
// resource link, embedded text and blob resources, with annotations and
// _meta), its structuredContent and isError reach the turn's MCP client
// as the server sent them, at every revision; a result of structured
// content alone is not doubled with a text copy.
func TestContentBlocksReachTheClientAsSent(t *testing.T) {
	e := backedEnv(t, contentServer(), mcpprovider.Config{})
	_, tok := e.open(t, conformance.Ada)
	args := map[string]any{"workspace": "acme"}
	for _, v := range mcpfront.Versions() {
		s := e.connect(t, tok.Token, v)
		res, err := s.CallTool(testCtx(t), &mcp.CallToolParams{Name: "notion_rich", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		want := richResult()
		if got, w := canon(t, res.Content), canon(t, want.Content); !reflect.DeepEqual(got, w) {
			t.Errorf("%s: content\n got %v\nwant %v", v, got, w)
		}
		if got, w := canon(t, res.StructuredContent), canon(t, want.StructuredContent); !reflect.DeepEqual(got, w) || res.IsError {
			t.Errorf("%s: structured %v (want %v), isError %v", v, got, w, res.IsError)
		}

		res, err = s.CallTool(testCtx(t), &mcp.CallToolParams{Name: "notion_structured", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Content) != 0 || res.StructuredContent == nil {
			t.Errorf("%s: structured only: %d content blocks, structured %v", v, len(res.Content), res.StructuredContent != nil)
		}

		res, err = s.CallTool(testCtx(t), &mcp.CallToolParams{Name: "notion_failing", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Content) != 2 || !res.IsError {
			t.Fatalf("%s: tool error %+v", v, res)
		}
		if img, ok := res.Content[1].(*mcp.ImageContent); !ok || !bytes.Equal(img.Data, png) {
			t.Errorf("%s: tool error's image %+v", v, res.Content[1])
		}
	}
}

// The official TypeScript client reads the same blocks at every revision.
func TestTypeScriptClientReadsContentBlocks(t *testing.T) {
	for _, v := range mcpfront.Versions() {
		t.Run(v, func(t *testing.T) {
			tsClientDir(t)
			e := backedEnv(t, contentServer(), mcpprovider.Config{})
			_, tok := e.open(t, conformance.Ada)
			cfg := map[string]any{"url": e.url, "token": tok.Token, "version": v, "tool": "notion_rich",
				"okArgs": map[string]any{"workspace": "acme"}, "refusedArgs": map[string]any{"workspace": "globex"}}
			steps := runTSClient(t, cfg)
			if steps["call"].Error != "" {
				t.Fatalf("call: %s", steps["call"])
			}
			var got struct {
				Content           any `json:"content"`
				StructuredContent any `json:"structuredContent"`
			}
			if err := json.Unmarshal(steps["call"].OK, &got); err != nil {
				t.Fatal(err)
			}
			want := richResult()
			if w := canon(t, want.Content); !reflect.DeepEqual(got.Content, w) {
				t.Errorf("content\n got %v\nwant %v", got.Content, w)
			}
			if w := canon(t, want.StructuredContent); !reflect.DeepEqual(got.StructuredContent, w) {
				t.Errorf("structured %v", got.StructuredContent)
			}
		})
	}
}
