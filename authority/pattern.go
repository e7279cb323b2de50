package authority

import (
	"fmt"
	"strings"
)

// Pattern is a compiled capability or resource pattern. The zero value
// matches nothing.
type Pattern struct {
	raw      string
	segs     []string
	sep      byte
	trailing bool // last segment was "**"
}

// ParseCapabilityPattern compiles a dotted capability pattern such as
// "notion.search", "notion.*" or "notion.**".
func ParseCapabilityPattern(s string) (Pattern, error) { return parsePattern(s, '.') }

// ParseResourcePattern compiles a path resource pattern such as
// "notion/workspace/acme/**".
func ParseResourcePattern(s string) (Pattern, error) { return parsePattern(s, '/') }

func parsePattern(s string, sep byte) (Pattern, error) {
	if s == "" {
		return Pattern{}, fmt.Errorf("authority: empty pattern")
	}
	segs := strings.Split(s, string(sep))
	p := Pattern{raw: s, sep: sep}
	for i, seg := range segs {
		switch {
		case seg == "":
			return Pattern{}, fmt.Errorf("authority: pattern %q has an empty segment", s)
		case seg == "**" && i != len(segs)-1:
			return Pattern{}, fmt.Errorf("authority: pattern %q: ** is only allowed as the last segment", s)
		case seg == "**":
			p.trailing = true
		case seg != "*" && strings.Contains(seg, "*"):
			return Pattern{}, fmt.Errorf("authority: pattern %q: * must be a whole segment", s)
		}
	}
	if p.trailing {
		segs = segs[:len(segs)-1]
	}
	p.segs = segs
	return p, nil
}

// String returns the pattern as written.
func (p Pattern) String() string { return p.raw }

// Match reports whether name, a dotted capability or a path resource, is
// covered by the pattern. It does not allocate.
func (p Pattern) Match(name string) bool {
	if p.raw == "" || name == "" {
		return false
	}
	rest := name
	for _, seg := range p.segs {
		if rest == "" {
			return false
		}
		var head string
		if i := strings.IndexByte(rest, p.sep); i >= 0 {
			head, rest = rest[:i], rest[i+1:]
			if rest == "" { // trailing separator: empty segment
				return false
			}
		} else {
			head, rest = rest, ""
		}
		if head == "" || (seg != "*" && seg != head) {
			return false
		}
	}
	if p.trailing {
		return rest != "" && !hasEmptySegment(rest, p.sep)
	}
	return rest == ""
}

func hasEmptySegment(s string, sep byte) bool {
	if s[0] == sep || s[len(s)-1] == sep {
		return true
	}
	for i := 1; i < len(s); i++ {
		if s[i] == sep && s[i-1] == sep {
			return true
		}
	}
	return false
}
