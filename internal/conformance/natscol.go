package conformance

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/messages"
)

// NATS is the column that drives a node through the Go client over a real
// embedded nats-server: msgpack on the wire, the node's front, the kernel.
var NATS = Column{
	Name: "nats",
	Bus:  true,
	Start: func(t testing.TB, f *Fixture, opts actors.Options) Driver {
		return serveOverNATS(t, StartBus(t), opts)
	},
}

// serveOverNATS starts a kernel with opts behind a NATS front on the bus
// (connected as the node; callers are the runtimes the bus names) and
// returns a driver that reaches it through the Go client as acme's
// runtime.
func serveOverNATS(t testing.TB, b *Bus, opts actors.Options) Driver {
	serveKernel(t, b, b.Connect(t, "node"), opts)
	return &busDriver{ClientDriver: &ClientDriver{C: clientFor(b.Connect(t, AcmeRuntime))}, t: t, bus: b}
}

func clientFor(nc *nats.Conn) *client.Client { return client.New(nc, nil) }

// ClientDriver adapts the Go client to Driver. It remembers each turn's
// node, as an agent runtime holding a turn handle would.
type ClientDriver struct {
	C     *client.Client
	mu    sync.Mutex
	nodes map[string]string
}

// remember records turn's node, as if this driver had opened it (a
// runtime handed the turn's handle).
func (d *ClientDriver) remember(turn, node string) {
	d.mu.Lock()
	if d.nodes == nil {
		d.nodes = map[string]string{}
	}
	d.nodes[turn] = node
	d.mu.Unlock()
}

// nodeOf is the node of a turn this driver opened or remembers.
func (d *ClientDriver) nodeOf(turn string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.nodes[turn]
}

func (d *ClientDriver) turn(a authority.AccessContext) *client.Turn {
	return d.C.Resume(client.Handle{Node: d.nodeOf(a.TurnID), TurnID: a.TurnID}, a.LeaseID, messages.AccessOf(a))
}

// Open implements Driver.
func (d *ClientDriver) Open(ctx context.Context, a authority.AccessContext) (actors.Opened, error) {
	var t *client.Turn
	var err error
	if a.TurnID != "" {
		t, err = d.C.Attach(ctx, client.Handle{Node: d.nodeOf(a.TurnID), TurnID: a.TurnID}, messages.AccessOf(a))
	} else {
		t, err = d.C.Open(ctx, messages.AccessOf(a))
	}
	if err != nil {
		return actors.Opened{}, err
	}
	d.remember(t.Handle.TurnID, t.Handle.Node)
	return actors.Opened{TurnID: t.Handle.TurnID, LeaseID: t.LeaseID, Attached: t.Attached}, nil
}

// ListTools implements Driver.
func (d *ClientDriver) ListTools(ctx context.Context, a authority.AccessContext) (actors.ToolList, error) {
	var rep *messages.ListReply
	var err error
	if a.TurnID == "" {
		rep, err = d.C.ListTools(ctx, messages.AccessOf(a))
	} else {
		rep, err = d.turn(a).ListTools(ctx)
	}
	if err != nil {
		return actors.ToolList{}, err
	}
	out := actors.ToolList{CatalogHash: rep.CatalogHash}
	for _, d := range rep.Degraded {
		out.Degraded = append(out.Degraded, actors.ProviderStatus{Provider: d.Provider, Status: d.Status, Reason: d.Code, Error: d.Message})
	}
	for _, t := range rep.Tools {
		out.Tools = append(out.Tools, actors.ListedTool{
			Alias: t.Alias, Identity: catalog.Identity{Provider: t.Provider, Name: t.Name}, Namespace: t.Namespace,
			Revision: t.Revision, Description: t.Description, InputSchema: t.InputSchema, OutputSchema: t.OutputSchema, Annotations: t.Annotations,
			Title: t.Title, Icons: t.Icons,
		})
	}
	return out, nil
}

// ListNamespaces implements Driver.
func (d *ClientDriver) ListNamespaces(ctx context.Context, a authority.AccessContext) ([]actors.NamespaceInfo, error) {
	var ns []messages.Namespace
	var err error
	if a.TurnID == "" {
		ns, err = d.C.ListNamespaces(ctx, messages.AccessOf(a))
	} else {
		ns, err = d.turn(a).ListNamespaces(ctx)
	}
	if err != nil {
		return nil, err
	}
	out := make([]actors.NamespaceInfo, len(ns))
	for i, n := range ns {
		out[i] = actors.NamespaceInfo{Name: n.Name, Enabled: n.Enabled, Tools: n.Tools}
	}
	return out, nil
}

// UpdateNamespaces implements Driver.
func (d *ClientDriver) UpdateNamespaces(ctx context.Context, a authority.AccessContext, ns []string) error {
	return d.turn(a).UpdateNamespaces(ctx, ns)
}

// Invoke implements Driver.
func (d *ClientDriver) Invoke(ctx context.Context, a authority.AccessContext, alias string, args []byte) (actors.CallResult, error) {
	var rep *messages.InvokeReply
	var err error
	if a.TurnID == "" {
		rep, err = d.C.Invoke(ctx, messages.AccessOf(a), alias, args)
	} else {
		rep, err = d.turn(a).Invoke(ctx, alias, args)
	}
	if err != nil {
		return actors.CallResult{}, err
	}
	return actors.CallResult{
		CallID: rep.CallID, CatalogHash: rep.CatalogHash, Alias: rep.Alias,
		Identity: catalog.Identity{Provider: rep.Provider, Name: rep.Name},
		Result:   providers.Result{Text: rep.Text, Structured: json.RawMessage(rep.Structured), IsError: rep.IsError},
		Duration: time.Duration(rep.DurationUs) * time.Microsecond,
	}, nil
}

// Close implements Driver.
func (d *ClientDriver) Close(ctx context.Context, a authority.AccessContext, leaseID string) error {
	t := d.turn(a)
	t.LeaseID = leaseID
	return t.Close(ctx)
}
