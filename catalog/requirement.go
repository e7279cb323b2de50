package catalog

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
)

// Requirement is a compiled resource template such as
// "notion/workspace/{workspace}/pages/{page_id}": literal path text with
// placeholders naming top-level arguments. Resolve fills the placeholders
// from a call's arguments (the ADR's resolveRequirement). Every tool
// declares one; a tool that touches no particular resource declares a
// literal template such as "notion/search". The zero value resolves to the
// empty resource, which no grant covers.
type Requirement struct {
	template string
	parts    []reqPart
}

type reqPart struct {
	literal string
	arg     string // placeholder name when non-empty
}

const maxPlaceholderValue = 256

// ParseRequirement compiles a template. Placeholders are {name}, name a
// non-empty run of letters, digits, '_' and '-'.
func ParseRequirement(template string) (Requirement, error) {
	r := Requirement{template: template}
	rest := template
	for rest != "" {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			if strings.IndexByte(rest, '}') >= 0 {
				return Requirement{}, fmt.Errorf("requirement %q: unbalanced }", template)
			}
			r.parts = append(r.parts, reqPart{literal: rest})
			break
		}
		if strings.IndexByte(rest[:open], '}') >= 0 {
			return Requirement{}, fmt.Errorf("requirement %q: unbalanced }", template)
		}
		if open > 0 {
			r.parts = append(r.parts, reqPart{literal: rest[:open]})
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return Requirement{}, fmt.Errorf("requirement %q: unclosed {", template)
		}
		name := rest[open+1 : open+end]
		if name == "" || strings.IndexFunc(name, func(c rune) bool {
			return !(c == '_' || c == '-' || unicode.IsLetter(c) || unicode.IsDigit(c))
		}) >= 0 {
			return Requirement{}, fmt.Errorf("requirement %q: bad placeholder {%s}", template, name)
		}
		r.parts = append(r.parts, reqPart{arg: name})
		rest = rest[open+end+1:]
	}
	return r, nil
}

// String returns the template.
func (r Requirement) String() string { return r.template }

// Placeholders returns the argument names the template reads.
func (r Requirement) Placeholders() []string {
	var out []string
	for _, p := range r.parts {
		if p.arg != "" {
			out = append(out, p.arg)
		}
	}
	return out
}

// Resolve fills the template from args, the decoded top-level argument
// object. Each placeholder must name a string (or an integer) that is a
// single safe path segment: non-empty, at most 256 bytes, no '/', no
// control characters, and not "." or "..". A value that could climb or
// widen the resource tree is refused, never escaped.
func (r Requirement) Resolve(args map[string]any) (string, error) {
	if len(r.parts) == 1 && r.parts[0].arg == "" {
		return r.parts[0].literal, nil
	}
	var b strings.Builder
	for _, p := range r.parts {
		if p.arg == "" {
			b.WriteString(p.literal)
			continue
		}
		raw, ok := args[p.arg]
		if !ok {
			return "", fmt.Errorf("requirement %q: argument %q is missing", r.template, p.arg)
		}
		var v string
		switch x := raw.(type) {
		case string:
			v = x
		case json.Number:
			if _, err := x.Int64(); err != nil {
				return "", fmt.Errorf("requirement %q: argument %q is not an integer", r.template, p.arg)
			}
			v = x.String()
		default:
			return "", fmt.Errorf("requirement %q: argument %q is not a string", r.template, p.arg)
		}
		if err := safeSegment(v); err != nil {
			return "", fmt.Errorf("requirement %q: argument %q: %w", r.template, p.arg, err)
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

func safeSegment(v string) error {
	switch {
	case v == "":
		return fmt.Errorf("empty value")
	case len(v) > maxPlaceholderValue:
		return fmt.Errorf("value longer than %d bytes", maxPlaceholderValue)
	case v == "." || v == "..":
		return fmt.Errorf("value %q is a relative path segment", v)
	case strings.ContainsRune(v, '/'):
		return fmt.Errorf("value contains '/'")
	case strings.IndexFunc(v, unicode.IsControl) >= 0:
		return fmt.Errorf("value contains a control character")
	}
	return nil
}
