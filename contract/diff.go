package contract

import (
	"fmt"
	"strings"
)

// Diff writes a readable structural diff of the change from prev to cur
// (either may be nil) for a reviewer: one line per difference, the text
// fields in full with Hidden characters made visible, the schemas as the
// structural differences CompareSchemas found (a JSON pointer, what
// changed, widened/narrowed/changed), annotations key by key. It never
// prints a whole schema; identical contracts give no lines.
func Diff(prev, cur *Contract) []string {
	ch := Classify(prev, cur)
	var out []string
	line := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	switch {
	case ch.Unchanged():
		return nil
	case prev == nil:
		line("new tool %s/%s", Visible(cur.Provider), Visible(cur.Name))
		if cur.Title != "" {
			line("title: %s", quote(cur.Title))
		}
		line("description: %s", quote(cur.Description))
		line("capability: %s  requirement: %s", Visible(cur.Capability), Visible(cur.Requirement))
		for _, h := range FindHidden(*cur) {
			line("hidden characters in %s", h)
		}
		return out
	case cur == nil:
		line("removed: %s/%s", Visible(prev.Provider), Visible(prev.Name))
		return out
	}
	line("classes: %s", ch)
	if prev.Title != cur.Title {
		line("title: %s → %s", quote(prev.Title), quote(cur.Title))
	}
	if prev.Description != cur.Description {
		line("description:")
		line("  - %s", quote(prev.Description))
		line("  + %s", quote(cur.Description))
	}
	for _, d := range ch.InputDetails {
		line("input %s", d)
	}
	if ch.Has(OutputChanged) {
		line("output schema %s", ch.Output)
		for _, d := range ch.OutputDetails {
			line("output %s", d)
		}
	}
	for _, a := range ch.Annotations {
		line("annotation %s: %s → %s", Visible(a.Key), orNone(a.From), orNone(a.To))
	}
	if len(ch.RiskierHints) > 0 {
		line("riskier hints: %s (advisory: they grant nothing, but a reviewer should know)", strings.Join(ch.RiskierHints, ", "))
	}
	if prev.Capability != cur.Capability {
		line("capability: %s → %s", Visible(prev.Capability), Visible(cur.Capability))
	}
	if prev.Requirement != cur.Requirement {
		line("requirement: %s → %s", Visible(prev.Requirement), Visible(cur.Requirement))
	}
	if prev.Namespace != cur.Namespace {
		line("namespace: %s → %s", Visible(prev.Namespace), Visible(cur.Namespace))
	}
	for _, h := range FindHidden(*cur) {
		line("hidden characters in %s", h)
	}
	return out
}

func quote(s string) string {
	return `"` + Visible(strings.ReplaceAll(s, "\n", "⏎")) + `"`
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return Visible(s)
}
