package messages

// Content is one typed block of a tool's result, as MCP defines content
// blocks: Type is "text" (Text), "image" or "audio" (Data, the bytes
// themselves, not base64, and MIMEType), "resource_link" (URI, Name and
// the optional Title, Description, MIMEType, Size, Icons) or "resource"
// (an embedded Resource). Annotations and Meta are the block's
// annotations and _meta, JSON objects as the tool sent them. A result
// travels in one bus message, so what it carries is bounded by the bus's
// message size (a larger one is refused result_too_large, never cut).
type Content struct {
	Type        string    `msgpack:"type"`
	Text        string    `msgpack:"text,omitempty"`
	Data        []byte    `msgpack:"data,omitempty"`
	MIMEType    string    `msgpack:"mime_type,omitempty"`
	URI         string    `msgpack:"uri,omitempty"`
	Name        string    `msgpack:"name,omitempty"`
	Title       string    `msgpack:"title,omitempty"`
	Description string    `msgpack:"description,omitempty"`
	Size        *int64    `msgpack:"size,omitempty"`
	Icons       []byte    `msgpack:"icons,omitempty"`
	Resource    *Resource `msgpack:"resource,omitempty"`
	Annotations []byte    `msgpack:"annotations,omitempty"`
	Meta        []byte    `msgpack:"meta,omitempty"`
}

// Resource is an embedded resource's contents: Text or Blob (bytes).
type Resource struct {
	URI      string `msgpack:"uri"`
	MIMEType string `msgpack:"mime_type,omitempty"`
	Text     string `msgpack:"text,omitempty"`
	Blob     []byte `msgpack:"blob,omitempty"`
	Meta     []byte `msgpack:"meta,omitempty"`
}

// Content types.
const (
	ContentText         = "text"
	ContentImage        = "image"
	ContentAudio        = "audio"
	ContentResourceLink = "resource_link"
	ContentResource     = "resource"
)

// Bytes is about what c takes in a message: its strings and documents.
func (c *Content) Bytes() int {
	n := 16 + len(c.Type) + len(c.Text) + len(c.Data) + len(c.MIMEType) + len(c.URI) + len(c.Name) + len(c.Title) +
		len(c.Description) + len(c.Icons) + len(c.Annotations) + len(c.Meta)
	if r := c.Resource; r != nil {
		n += len(r.URI) + len(r.MIMEType) + len(r.Text) + len(r.Blob) + len(r.Meta)
	}
	return n
}
