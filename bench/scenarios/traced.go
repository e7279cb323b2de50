package scenarios

import (
	"context"
	"fmt"

	"github.com/sharedos/sharedos/bench/harness"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/tracing"
	"github.com/sharedos/sharedos/internal/tracing/otlprecv"
)

// The traced scenarios: nats and nats-provider with tracing on at every
// hop — the client, the node, the provider — every trace sampled, the
// spans batched over OTLP/HTTP to an in-process receiver on loopback
// that decodes them (docs/observability.md, "Cost").
const (
	NATSTraced         = "nats-traced"
	NATSProviderTraced = "nats-provider-traced"
)

// Traced is SharedOS over NATS (tool: ToolStatic or ToolProvider, audit
// published async) with tracing on.
func (e *Env) Traced(name, description, floor, tool string) harness.Scenario {
	return harness.Scenario{
		Name: name, Floor: floor, Description: description,
		Setup: func(ctx context.Context, p harness.Params) (_ harness.Target, err error) {
			recv, err := otlprecv.Start(false)
			if err != nil {
				return nil, err
			}
			var cl closer
			cl.add(func(context.Context) error { return recv.Close() })
			defer func() {
				if err != nil {
					_ = cl.close(context.WithoutCancel(ctx))
				}
			}()
			pipe := func(service string) (*tracing.Tracing, error) {
				tr, err := tracing.New(tracing.Config{Enabled: true, Endpoint: recv.Endpoint(), Insecure: true, ServiceName: service}, service)
				if err != nil {
					return nil, fmt.Errorf("scenarios: tracing: %w", err)
				}
				cl.add(tr.Shutdown)
				return tr, nil
			}
			nodeTr, err := pipe("bench-node")
			if err != nil {
				return nil, err
			}
			runtimeTr, err := pipe("bench-runtime")
			if err != nil {
				return nil, err
			}
			n, err := e.startNode(ctx, nodeConfig{audit: AuditAsync, tool: tool, front: true, stepCeiling: max(64, p.CallsPerTurn), tracing: nodeTr})
			if err != nil {
				return nil, err
			}
			// The node's own teardown first, then the pipelines (flushing
			// what is left) and the receiver.
			n.closer = append(cl, n.closer...)
			cl = nil
			cc, err := e.remoteConnOn(false, "bench-client-"+n.prefix)
			if err != nil {
				_ = n.close(context.WithoutCancel(ctx))
				return nil, err
			}
			c := client.New(cc, &client.Options{Prefix: n.prefix, TracerProvider: runtimeTr.Provider()})
			return &clientTarget{n: n, nc: cc, c: c, args: payload(p.PayloadBytes)}, nil
		},
	}
}
