package mcpfront

import (
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/messages"
)

// callContent is a result's content as MCP blocks: its typed blocks as
// the tool sent them, else its Text as one text block. A result with
// structuredContent and no text gets no text block made from it (the
// revisions the front serves all carry structuredContent, and a copy
// would double the answer); a result with neither gets one empty text
// block.
func callContent(r *providers.Result) ([]mcp.Content, error) {
	if len(r.Content) == 0 {
		if r.Text == "" && len(r.Structured) > 0 {
			return []mcp.Content{}, nil
		}
		return []mcp.Content{&mcp.TextContent{Text: r.Text}}, nil
	}
	out := make([]mcp.Content, len(r.Content))
	for i := range r.Content {
		c, err := mcpContent(&r.Content[i])
		if err != nil {
			return nil, fmt.Errorf("content block %d: %w", i, err)
		}
		out[i] = c
	}
	return out, nil
}

// mcpContent is one typed block as the SDK's content.
func mcpContent(c *messages.Content) (mcp.Content, error) {
	var meta mcp.Meta
	if len(c.Meta) > 0 {
		if err := json.Unmarshal(c.Meta, &meta); err != nil {
			return nil, fmt.Errorf("_meta: %w", err)
		}
	}
	var ann *mcp.Annotations
	if len(c.Annotations) > 0 {
		ann = &mcp.Annotations{}
		if err := json.Unmarshal(c.Annotations, ann); err != nil {
			return nil, fmt.Errorf("annotations: %w", err)
		}
	}
	switch c.Type {
	case messages.ContentText:
		return &mcp.TextContent{Text: c.Text, Meta: meta, Annotations: ann}, nil
	case messages.ContentImage:
		return &mcp.ImageContent{Data: c.Data, MIMEType: c.MIMEType, Meta: meta, Annotations: ann}, nil
	case messages.ContentAudio:
		return &mcp.AudioContent{Data: c.Data, MIMEType: c.MIMEType, Meta: meta, Annotations: ann}, nil
	case messages.ContentResourceLink:
		l := &mcp.ResourceLink{URI: c.URI, Name: c.Name, Title: c.Title, Description: c.Description, MIMEType: c.MIMEType,
			Size: c.Size, Meta: meta, Annotations: ann}
		if len(c.Icons) > 0 {
			if err := json.Unmarshal(c.Icons, &l.Icons); err != nil {
				return nil, fmt.Errorf("icons: %w", err)
			}
		}
		return l, nil
	case messages.ContentResource:
		if c.Resource == nil {
			return nil, fmt.Errorf("an embedded resource without contents")
		}
		rc := &mcp.ResourceContents{URI: c.Resource.URI, MIMEType: c.Resource.MIMEType, Text: c.Resource.Text, Blob: c.Resource.Blob}
		if len(c.Resource.Meta) > 0 {
			if err := json.Unmarshal(c.Resource.Meta, &rc.Meta); err != nil {
				return nil, fmt.Errorf("resource _meta: %w", err)
			}
		}
		return &mcp.EmbeddedResource{Resource: rc, Meta: meta, Annotations: ann}, nil
	}
	return nil, fmt.Errorf("content type %q", c.Type)
}
