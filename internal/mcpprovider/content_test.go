package mcpprovider_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/internal/mcpprovider"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/provider"
)

// An MCP server's content blocks come through typed when the provider is
// its own process over NATS (provider SDK, Remote): the image's bytes,
// the text's annotations, the structured content.
func TestContentBlocksOverNATSThroughTheProviderSDK(t *testing.T) {
	img := bytes.Repeat([]byte{0x89, 0x50}, 300)
	srv := mcp.NewServer(&mcp.Implementation{Name: "imgs", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "render", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.TextContent{Text: "rendered", Annotations: &mcp.Annotations{Priority: 1}},
			&mcp.ImageContent{Data: img, MIMEType: "image/png"},
		}, StructuredContent: map[string]any{"w": 1.0}}, nil
	})
	p, err := mcpprovider.New("tracker", mcpprovider.Config{Transport: "memory", Server: "imgs"},
		&mcpprovider.Options{Memory: func(string) (*mcp.Server, bool) { return srv, true }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	_, nc := natstest.Start(t, false)
	h, err := provider.Serve(nc, "tracker", p.SDK(), &provider.Options{TrustedKeys: []ed25519.PublicKey{nodeKey.Public().(ed25519.PublicKey)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Stop(context.Background()) })
	k, _ := kernelWith(t, providers.NewRemote(nc, "tracker", "sharedos", providers.WithSigner(nodeKey)))
	_, who := openTurn(t, k)
	if _, err := k.ListTools(ctxT(t), who); err != nil {
		t.Fatal(err)
	}
	res, err := k.Invoke(ctxT(t), who, "tracker_render", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	c := res.Result.Content
	if len(c) != 2 || c[0].Type != messages.ContentText || c[0].Text != "rendered" || string(c[0].Annotations) != `{"priority":1}` ||
		c[1].Type != messages.ContentImage || !bytes.Equal(c[1].Data, img) || c[1].MIMEType != "image/png" ||
		string(res.Result.Structured) != `{"w":1}` || res.Result.Text != "" {
		t.Fatalf("result %+v", res.Result)
	}
}
