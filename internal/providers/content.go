package providers

import (
	"encoding/json"
	"fmt"

	"github.com/sharedos/sharedos/messages"
)

// maxContentJSONDepth bounds the nesting of a content block's JSON
// fields (annotations, _meta, icons), as catalogue limits bound schemas'.
const maxContentJSONDepth = 32

// CheckContent reports the first thing wrong with the content blocks a
// provider process sent, before anything decodes their JSON: a type MCP
// does not define, a resource block without its resource, an annotations
// or _meta that is not a JSON object, icons that are not a JSON array,
// or any of them nested deeper than 32.
func CheckContent(blocks []Content) error {
	for i := range blocks {
		c := &blocks[i]
		switch c.Type {
		case messages.ContentText, messages.ContentImage, messages.ContentAudio, messages.ContentResourceLink:
		case messages.ContentResource:
			if c.Resource == nil {
				return fmt.Errorf("content %d: a resource block without its resource", i)
			}
			if err := checkJSON(c.Resource.Meta, '{'); err != nil {
				return fmt.Errorf("content %d: resource meta: %w", i, err)
			}
		default:
			return fmt.Errorf("content %d: type %q", i, c.Type)
		}
		for _, f := range []struct {
			name string
			b    []byte
			open byte
		}{{"annotations", c.Annotations, '{'}, {"meta", c.Meta, '{'}, {"icons", c.Icons, '['}} {
			if err := checkJSON(f.b, f.open); err != nil {
				return fmt.Errorf("content %d: %s: %w", i, f.name, err)
			}
		}
	}
	return nil
}

// checkJSON reports whether b (absent is fine) is one valid JSON value
// opening with open and nested at most maxContentJSONDepth deep.
func checkJSON(b []byte, open byte) error {
	if len(b) == 0 {
		return nil
	}
	depth, inString, escaped := 0, false, false
	first := byte(0)
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			continue
		}
		if first == 0 {
			first = c
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			if depth++; depth > maxContentJSONDepth {
				return fmt.Errorf("nested deeper than %d", maxContentJSONDepth)
			}
		case '}', ']':
			depth--
		}
	}
	if first != open {
		return fmt.Errorf("not a JSON %s", map[byte]string{'{': "object", '[': "array"}[open])
	}
	if !json.Valid(b) {
		return fmt.Errorf("not valid JSON")
	}
	return nil
}
