package scenarios

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/bench/harness"
	"github.com/sharedos/sharedos/client"
)

// SharedOS returns the scenario of a SharedOS node: transport "inprocess"
// (the kernel API, no network) or "nats" (the Go client over TCP to the
// node's front), with the tool static or served by a provider, and the
// audit mode. Its floor is named by floor.
func (e *Env) SharedOS(name, description, floor, transport, tool, auditMode string) harness.Scenario {
	return e.sharedOS(name, description, floor, transport, tool, auditMode, false)
}

// SharedOSSync is SharedOS on a server that fsyncs every JetStream write
// (audit.sync: always, a node's default), whatever the run's server does.
func (e *Env) SharedOSSync(name, description, floor, transport, tool, auditMode string) harness.Scenario {
	return e.sharedOS(name, description, floor, transport, tool, auditMode, true)
}

func (e *Env) sharedOS(name, description, floor, transport, tool, auditMode string, sync bool) harness.Scenario {
	return harness.Scenario{
		Name: name, Floor: floor, Description: description,
		Setup: func(ctx context.Context, p harness.Params) (harness.Target, error) {
			n, err := e.startNode(ctx, nodeConfig{
				audit: auditMode, tool: tool, front: transport == "nats",
				stepCeiling: max(64, p.CallsPerTurn), sync: sync,
			})
			if err != nil {
				return nil, err
			}
			args := payload(p.PayloadBytes)
			switch transport {
			case "inprocess":
				return &kernelTarget{n: n, args: args}, nil
			case "nats":
				cc, err := e.remoteConnOn(sync, "bench-client-"+n.prefix)
				if err != nil {
					_ = n.close(context.WithoutCancel(ctx))
					return nil, err
				}
				return &clientTarget{n: n, nc: cc, c: client.New(cc, &client.Options{Prefix: n.prefix}), args: args}, nil
			}
			_ = n.close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("scenarios: unknown transport %q", transport)
		},
	}
}

// kernelTarget drives the kernel API in process.
type kernelTarget struct {
	n    *node
	args []byte
}

func (t *kernelTarget) Open(ctx context.Context) (harness.Turn, error) {
	a, err := openTurn(ctx, t.n.kernel)
	if err != nil {
		return nil, err
	}
	return &kernelTurn{k: t.n.kernel, access: a, args: t.args}, nil
}

func (t *kernelTarget) Close(ctx context.Context) error { return t.n.close(ctx) }

func (t *kernelTarget) Counters() harness.Counters { return t.n.counted.counters() }

type kernelTurn struct {
	k      *actors.Kernel
	access authority.AccessContext
	args   []byte
}

func (t *kernelTurn) Call(ctx context.Context, _ int) error {
	res, err := t.k.Invoke(ctx, t.access, benchAlias, t.args)
	if err != nil {
		return err
	}
	if res.Result.IsError {
		return fmt.Errorf("tool error: %s", res.Result.Text)
	}
	return nil
}

func (t *kernelTurn) Close(ctx context.Context) error {
	return t.k.Close(ctx, t.access, t.access.LeaseID)
}

// clientTarget drives a node over NATS with the Go client, as an agent
// runtime in another process would.
type clientTarget struct {
	n    *node
	nc   *nats.Conn
	c    *client.Client
	args []byte
}

func (t *clientTarget) Open(ctx context.Context) (harness.Turn, error) {
	turn, err := t.c.Open(ctx, client.Access{
		Tenant: benchAccess.Tenant, Principal: benchAccess.Principal, Credential: benchAccess.CredentialProfile,
		Namespaces: benchAccess.EnabledNamespaces,
	})
	if err != nil {
		return nil, err
	}
	return &clientTurn{t: turn, args: t.args}, nil
}

func (t *clientTarget) Close(ctx context.Context) error {
	t.nc.Close()
	return t.n.close(ctx)
}

func (t *clientTarget) Counters() harness.Counters { return t.n.counted.counters() }

type clientTurn struct {
	t    *client.Turn
	args []byte
}

func (t *clientTurn) Call(ctx context.Context, _ int) error {
	res, err := t.t.Invoke(ctx, benchAlias, t.args)
	if err != nil {
		return err
	}
	if res.IsError {
		return fmt.Errorf("tool error: %s", res.Text)
	}
	return nil
}

func (t *clientTurn) Close(ctx context.Context) error { return t.t.Close(ctx) }
