package mcpprovider

import (
	"log/slog"
	"slices"
	"strings"

	"github.com/sharedos/sharedos/contract"
)

// contractOf is t's contract as the server sent it, for classification.
func contractOf(t *Tool) *contract.Contract {
	return &contract.Contract{Provider: t.Server, Name: t.Name, Title: t.Title, Description: t.Description,
		InputSchema: t.InputSchema, OutputSchema: t.OutputSchema, Annotations: t.Annotations}
}

// driftOf classifies, by tool name, how the tools of next differ from
// those of prev (the kernel's classification, package contract): tools
// whose source revision is the same are left out.
func driftOf(prev, next *snapshot) map[string][]contract.Class {
	if prev == nil || next == nil {
		return nil
	}
	out := map[string][]contract.Class{}
	for name, t := range next.byName {
		old := prev.byName[name]
		switch {
		case old == nil:
			out[name] = []contract.Class{contract.New}
		case old.SourceRevision != t.SourceRevision:
			if ch := contract.Classify(contractOf(old), contractOf(t)); !ch.Unchanged() {
				out[name] = ch.Classes
			}
		}
	}
	for name := range prev.byName {
		if next.byName[name] == nil {
			out[name] = []contract.Class{contract.Removed}
		}
	}
	return out
}

// logDrift logs each tool a re-discovery found changed, with its classes:
// what the next turn's resolution will classify (and hold, under drift:
// hold) against the tenant's accepted baseline.
func logDrift(log *slog.Logger, profile string, prev, next *snapshot) {
	d := driftOf(prev, next)
	names := make([]string, 0, len(d))
	for n := range d {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		cs := make([]string, len(d[n]))
		for i, c := range d[n] {
			cs[i] = string(c)
		}
		log.Info("mcp tool contract changed", "profile", profile, "tool", n, "classes", strings.Join(cs, ","))
	}
}
