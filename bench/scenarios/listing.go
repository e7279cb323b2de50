package scenarios

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sharedos/sharedos/bench/harness"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/providers"
)

// ModelListing500 is the scenario of a model-facing listing: each call
// of a turn asks the node, over NATS, for the turn's 500 visible tools
// translated for a model API (anthropic: every tool sent, none past a
// request limit). The first listing of a revision translates it; every
// later one is served from the kernel's translation cache, which is what
// the figure measures (docs/model-facing.md).
const ModelListing500 = "model-listing-500"

// catalog500 is 500 static tools of the bench namespace: the echo tool
// and 499 with schemas of a few properties each.
func catalog500() []providers.StaticTool {
	tools := []providers.StaticTool{{Definition: echoDefinition, Handler: echoHandler}}
	for i := 1; i < 500; i++ {
		tools = append(tools, providers.StaticTool{Handler: echoHandler, Definition: catalog.Definition{
			Name: fmt.Sprintf("tool_%03d", i), Namespace: benchNamespace,
			Description: fmt.Sprintf("Tool %d of the bench catalogue: looks up records by id and returns their fields.", i),
			InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string","maxLength":64},` +
				`"limit":{"type":"integer","minimum":1,"maximum":100},"fields":{"type":"array","items":{"type":"string"}}},` +
				`"required":["id"],"additionalProperties":false}`),
			Capability: "bench.echo", Requirement: "bench/echo",
		}})
	}
	return tools
}

func echoHandler(ctx context.Context, call providers.Call) (providers.Result, error) {
	text, out := echo(ctx, call.Arguments)
	return providers.Result{Text: text, Structured: out}, nil
}

// ModelListingScenario is ModelListing500 (no floor: nothing else
// translates).
func (e *Env) ModelListingScenario(name string) harness.Scenario {
	return harness.Scenario{
		Name: name, Description: "Go client → node over NATS: a turn's 500 tools listed for the anthropic profile (translation cached by revision), audit published async",
		Setup: func(ctx context.Context, p harness.Params) (harness.Target, error) {
			n, err := e.startNode(ctx, nodeConfig{audit: AuditAsync, tool: toolCatalog500, front: true, stepCeiling: max(64, p.CallsPerTurn)})
			if err != nil {
				return nil, err
			}
			cc, err := e.remoteConnOn(false, "bench-client-"+n.prefix)
			if err != nil {
				_ = n.close(context.WithoutCancel(ctx))
				return nil, err
			}
			return &listingTarget{clientTarget{n: n, nc: cc, c: client.New(cc, &client.Options{Prefix: n.prefix})}}, nil
		},
	}
}

type listingTarget struct{ clientTarget }

func (t *listingTarget) Open(ctx context.Context) (harness.Turn, error) {
	turn, err := t.clientTarget.Open(ctx)
	if err != nil {
		return nil, err
	}
	return &listingTurn{turn.(*clientTurn)}, nil
}

type listingTurn struct{ *clientTurn }

func (t *listingTurn) Call(ctx context.Context, _ int) error {
	rep, err := t.t.ListFor(ctx, client.ModelQuery{Profile: "anthropic"})
	if err != nil {
		return err
	}
	if n := len(rep.Model.Tools); n != 500 {
		return fmt.Errorf("the listing sent %d tools, want 500 (%d unrepresentable, %d over limit)", n, len(rep.Model.Unrepresentable), len(rep.Model.OverLimit))
	}
	return nil
}
