package mcpprovider

import (
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

// resultOf is a tools/call result as the turn carries it: its content
// blocks typed, as the server sent them (annotations and _meta kept),
// structuredContent and isError as sent. A result of one plain, non-empty
// text block is carried as Text alone; nothing is flattened or copied
// (text is never made from structuredContent, nor the other way round).
func resultOf(res *mcp.CallToolResult) (providers.Result, error) {
	out := providers.Result{IsError: res.IsError}
	if res.StructuredContent != nil {
		s, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return providers.Result{}, reason.New(reason.ProviderError, "structured content: %v", err)
		}
		out.Structured = s
	}
	if len(res.Content) == 1 {
		if tc, ok := res.Content[0].(*mcp.TextContent); ok && tc.Text != "" && tc.Meta == nil && tc.Annotations == nil {
			out.Text = tc.Text
			return out, nil
		}
	}
	for _, c := range res.Content {
		b, err := contentOf(c)
		if err != nil {
			return providers.Result{}, reason.New(reason.ProviderError, "content: %v", err)
		}
		out.Content = append(out.Content, b)
	}
	return out, nil
}

// contentOf is one SDK content block as the wire's typed block.
func contentOf(c mcp.Content) (messages.Content, error) {
	var out messages.Content
	var meta mcp.Meta
	var ann *mcp.Annotations
	switch c := c.(type) {
	case *mcp.TextContent:
		out = messages.Content{Type: messages.ContentText, Text: c.Text}
		meta, ann = c.Meta, c.Annotations
	case *mcp.ImageContent:
		out = messages.Content{Type: messages.ContentImage, Data: c.Data, MIMEType: c.MIMEType}
		meta, ann = c.Meta, c.Annotations
	case *mcp.AudioContent:
		out = messages.Content{Type: messages.ContentAudio, Data: c.Data, MIMEType: c.MIMEType}
		meta, ann = c.Meta, c.Annotations
	case *mcp.ResourceLink:
		out = messages.Content{Type: messages.ContentResourceLink, URI: c.URI, Name: c.Name, Title: c.Title,
			Description: c.Description, MIMEType: c.MIMEType, Size: c.Size}
		if len(c.Icons) > 0 {
			b, err := json.Marshal(c.Icons)
			if err != nil {
				return out, err
			}
			out.Icons = b
		}
		meta, ann = c.Meta, c.Annotations
	case *mcp.EmbeddedResource:
		if c.Resource == nil {
			return out, fmt.Errorf("an embedded resource without contents")
		}
		out = messages.Content{Type: messages.ContentResource, Resource: &messages.Resource{
			URI: c.Resource.URI, MIMEType: c.Resource.MIMEType, Text: c.Resource.Text, Blob: c.Resource.Blob}}
		if c.Resource.Meta != nil {
			b, err := json.Marshal(c.Resource.Meta)
			if err != nil {
				return out, err
			}
			out.Resource.Meta = b
		}
		meta, ann = c.Meta, c.Annotations
	default:
		return out, fmt.Errorf("content block %T", c)
	}
	if meta != nil {
		b, err := json.Marshal(meta)
		if err != nil {
			return out, err
		}
		out.Meta = b
	}
	if ann != nil {
		b, err := json.Marshal(ann)
		if err != nil {
			return out, err
		}
		out.Annotations = b
	}
	return out, nil
}
