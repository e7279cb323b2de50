package contract

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode"
)

// Hidden reports whether r is a character a reader cannot see or that
// reorders what they see: format characters (zero-width spaces and
// joiners, bidirectional embeddings, overrides and isolates, the byte
// order mark, soft hyphens, tag characters), control characters other
// than newline and tab, variation selectors and the Hangul fillers that
// render as blanks. A description carrying them can say one thing to a
// reviewer and another to a model.
func Hidden(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case unicode.Is(unicode.Cf, r), unicode.Is(unicode.Cc, r):
		return true
	case 0xFE00 <= r && r <= 0xFE0F, 0xE0100 <= r && r <= 0xE01EF: // variation selectors
		return true
	case r == 0x034F, r == 0x115F, r == 0x1160, r == 0x3164, r == 0xFFA0, r == 0x2800: // grapheme joiner, fillers, blank braille
		return true
	}
	return false
}

// Visible writes s with every Hidden character as ⟦U+XXXX⟧, so that a
// review shows what a model would read.
func Visible(s string) string {
	if !strings.ContainsFunc(s, Hidden) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if Hidden(r) {
			fmt.Fprintf(&b, "⟦U+%04X⟧", r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// HiddenIn lists the distinct Hidden characters in s, in order.
func HiddenIn(s string) []rune {
	var out []rune
	for _, r := range s {
		if Hidden(r) && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// HiddenText is where a contract's model-facing text carries Hidden
// characters: its title, description, and every string (keys included)
// of its schemas and annotations. Empty when there are none.
type HiddenText struct {
	Field string // "title", "description", "input_schema", "output_schema", "annotations"
	Runes []rune
}

func (h HiddenText) String() string {
	cs := make([]string, len(h.Runes))
	for i, r := range h.Runes {
		cs[i] = fmt.Sprintf("U+%04X", r)
	}
	return h.Field + ": " + strings.Join(cs, " ")
}

// FindHidden lists the fields of c whose model-facing text carries Hidden
// characters.
func FindHidden(c Contract) []HiddenText {
	var out []HiddenText
	add := func(field string, rs []rune) {
		if len(rs) > 0 {
			out = append(out, HiddenText{Field: field, Runes: rs})
		}
	}
	add("title", HiddenIn(c.Title))
	add("description", HiddenIn(c.Description))
	add("input_schema", hiddenInJSON(c.InputSchema))
	add("output_schema", hiddenInJSON(c.OutputSchema))
	add("annotations", hiddenInJSON(c.Annotations))
	return out
}

// hiddenInJSON scans every string of a JSON document, keys included. A
// document that does not tokenize is scanned as text.
func hiddenInJSON(raw json.RawMessage) []rune {
	if len(raw) == 0 {
		return nil
	}
	d := json.NewDecoder(strings.NewReader(string(raw)))
	var out []rune
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return HiddenIn(string(raw))
		}
		if s, ok := tok.(string); ok {
			for _, r := range HiddenIn(s) {
				if !slices.Contains(out, r) {
					out = append(out, r)
				}
			}
		}
	}
	return out
}
