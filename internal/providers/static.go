package providers

import (
	"context"
	"fmt"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/reason"
)

// StaticTool is a configured tool and the handler that runs it.
type StaticTool struct {
	Definition catalog.Definition
	Handler    Handler
}

// Static serves a fixed set of tools (the static tools of cluster.yaml).
// Its catalogue is the same for every context. Safe for concurrent use;
// it holds no mutable state of its own.
type Static struct {
	id    string
	defs  []catalog.Definition
	byRev map[string]Handler
}

// NewStatic validates the tools (each must normalize) and returns the provider.
func NewStatic(id string, tools []StaticTool) (*Static, error) {
	s := &Static{id: id, byRev: make(map[string]Handler, len(tools))}
	for _, t := range tools {
		if t.Handler == nil {
			return nil, fmt.Errorf("provider %s: tool %s has no handler", id, t.Definition.Name)
		}
		rev, err := revisionOf(id, t.Definition)
		if err != nil {
			return nil, err
		}
		s.defs = append(s.defs, t.Definition)
		s.byRev[rev] = t.Handler
	}
	return s, nil
}

// ID returns the provider id.
func (s *Static) ID() string { return s.id }

// Catalog returns the configured definitions.
func (s *Static) Catalog(context.Context, authority.AccessContext) (Catalog, error) {
	return Catalog{Definitions: append([]catalog.Definition(nil), s.defs...), Freshness: Freshness{Scope: "global"}}, nil
}

// Invoke runs the configured handler for call.Revision.
func (s *Static) Invoke(ctx context.Context, call Call) (Result, error) {
	h, ok := s.byRev[call.Revision]
	if !ok {
		return Result{}, reason.New(reason.CapabilityChanged, "%s: revision %.12s is not offered", call.Tool, call.Revision)
	}
	return h(ctx, call)
}
