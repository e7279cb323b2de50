package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/natsfront"
	"github.com/sharedos/sharedos/messages"
)

// ClusterNodes is how many nodes the cluster column runs: enough that a
// turn's later operations can go through a server that is neither the
// opener's nor the turn's node's.
const ClusterNodes = 3

// Cluster is the column where a row runs on a cluster: ClusterNodes
// embedded servers joined by routes (one set of identities, the same
// configuration on each), a kernel (node n1, n2, ...) behind its own NATS
// front on each server, and the fixture's providers served over the bus
// by the provider SDK, spread over the servers. The turn is opened
// through a client on the first server; every later operation of it,
// attaches included, goes through another client connection on a server
// that is neither the opener's nor the turn's node's, so it crosses a
// route to reach its node, and the node's calls cross routes to reach
// the providers.
//
// The kernels share the fixture's providers (behind each kernel's own
// proxies), authority source, audit sink and clock: each is safe for
// concurrent use (mutexes, atomics, a read-only grant map), as they must
// be for one kernel's concurrent turns.
//
// Every row applies: the driver is a BusDriver (Bus) and the providers
// are remote (RemoteProviders); it mints no tokens (Tokens is off).
var Cluster = Column{
	Name:            "cluster",
	Bus:             true,
	RemoteProviders: true,
	Start: func(t testing.TB, f *Fixture, opts actors.Options) Driver {
		ids := providerIDs(opts)
		b := StartBusCluster(t, ClusterNodes, ids...)
		// Provider i on server i+1 (notion on the second, notes on the
		// third): a node's calls cross routes to reach most providers.
		// The open queue group may land on any node (mostly the opener's
		// server's: NATS prefers a local member), so the driver picks each
		// turn's server once the open has named its node.
		key := serveRemoteProviders(t, b, opts, func(i int) int { return (i + 1) % ClusterNodes })
		d := &clusterDriver{t: t, bus: b, home: map[string]int{}}
		var nodes []string
		var nodeConns, runtimes []*nats.Conn
		for i := range ClusterNodes {
			kopts := opts
			kopts.Node = fmt.Sprintf("n%d", i+1)
			nc := b.ConnectTo(t, i, "node")
			nodeConns = append(nodeConns, nc)
			kopts.Providers = remoteProxies(nc, opts, key)
			serveKernel(t, b, nc, kopts)
			d.home[kopts.Node] = i
			nodes = append(nodes, kopts.Node)
			rt := b.ConnectTo(t, i, AcmeRuntime)
			runtimes = append(runtimes, rt)
			d.via = append(d.via, &ClientDriver{C: clientFor(rt)})
		}
		waitForRoutes(t, runtimes, nodes, nodeConns, ids)
		return d
	},
}

// serveKernel starts a kernel with opts behind a NATS front on nc (the
// node's connection to its server); Cleanup stops both.
func serveKernel(t testing.TB, b *Bus, nc *nats.Conn, opts actors.Options) {
	t.Helper()
	k := startKernel(t, opts)
	front, err := natsfront.Serve(nc, k, natsfront.Options{Logger: opts.Logger,
		Identities: b.Identities(), TrustUnstamped: true, NoTenantBinding: opts.Switches.NoTenantBinding})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = front.Stop(context.Background()) })
}

// turnOps are the turn subjects the cluster driver uses.
var turnOps = []messages.Op{messages.OpAttach, messages.OpList, messages.OpNamespaces, messages.OpUpdateNamespaces, messages.OpInvoke, messages.OpClose}

// waitForRoutes returns once every server knows the interest the rows
// need from the others: each node's turn subjects, as a runtime on each
// server sees them, and each provider's subjects, as each node (on its
// connection nodeConns[i]) sees them.
// Routes form, and interest crosses them, after the servers start; until
// then a request finds no responders (turn_not_found to the client).
func waitForRoutes(t testing.TB, runtimes []*nats.Conn, nodes []string, nodeConns []*nats.Conn, providers []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, rt := range runtimes {
		for _, node := range nodes {
			for _, op := range turnOps {
				if err := waitForResponder(ctx, rt, messages.TurnSubject("sharedos", node, op)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, nc := range nodeConns {
		for _, p := range providers {
			for _, subj := range []string{messages.ProviderCatalogSubject("sharedos", p), messages.ProviderInvokeSubject("sharedos", p)} {
				if err := waitForResponder(ctx, nc, subj); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// waitForResponder sends empty requests to subject until one is answered
// (a malformed request: the front or provider refuses it, touching
// nothing).
func waitForResponder(ctx context.Context, nc *nats.Conn, subject string) error {
	for {
		rctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		_, err := nc.RequestWithContext(rctx, subject, nil)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("no responder on %s through %s: %w", subject, nc.ConnectedUrlRedacted(), err)
		}
		if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("probing %s: %w", subject, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// clusterDriver opens turns through a client on the first server and
// drives each turn's later operations through a client on another server.
// Operations that name no turn (one-operation turns: opened, driven and
// closed by one request) go through the opener.
type clusterDriver struct {
	t   testing.TB
	bus *Bus
	// via[i] is acme's runtime connected to server i; via[0] opens, and
	// remembers the node of each turn it opened.
	via  []*ClientDriver
	home map[string]int // node id → its server; fixed at Start
}

func (d *clusterDriver) opener() *ClientDriver { return d.via[0] }

// driver is the client a turn's later operations go through: on the
// first server that is neither the opener's nor the turn's node's. An
// operation that names no turn goes through the opener.
func (d *clusterDriver) driver(a authority.AccessContext) *ClientDriver {
	if a.TurnID == "" {
		return d.opener()
	}
	node := d.opener().nodeOf(a.TurnID)
	if node == "" { // a turn this driver did not open: any server but the opener's
		return d.via[1]
	}
	for _, cd := range d.via[1:] {
		if cd != d.via[d.home[node]] {
			cd.remember(a.TurnID, node)
			return cd
		}
	}
	panic("cluster column: fewer than three servers")
}

// Open implements Driver: a new turn through the opener, an attach
// through the turn's driver.
func (d *clusterDriver) Open(ctx context.Context, a authority.AccessContext) (actors.Opened, error) {
	if a.TurnID != "" {
		return d.driver(a).Open(ctx, a)
	}
	o, err := d.opener().Open(ctx, a)
	if err != nil {
		return o, err
	}
	node := d.opener().nodeOf(o.TurnID)
	if _, ok := d.home[node]; !ok {
		return o, fmt.Errorf("cluster column: turn %s opened on unknown node %q", o.TurnID, node)
	}
	return o, nil
}

// ListTools implements Driver.
func (d *clusterDriver) ListTools(ctx context.Context, a authority.AccessContext) (actors.ToolList, error) {
	return d.driver(a).ListTools(ctx, a)
}

// ListNamespaces implements Driver.
func (d *clusterDriver) ListNamespaces(ctx context.Context, a authority.AccessContext) ([]actors.NamespaceInfo, error) {
	return d.driver(a).ListNamespaces(ctx, a)
}

// UpdateNamespaces implements Driver.
func (d *clusterDriver) UpdateNamespaces(ctx context.Context, a authority.AccessContext, ns []string) error {
	return d.driver(a).UpdateNamespaces(ctx, a, ns)
}

// Invoke implements Driver.
func (d *clusterDriver) Invoke(ctx context.Context, a authority.AccessContext, alias string, args []byte) (actors.CallResult, error) {
	return d.driver(a).Invoke(ctx, a, alias, args)
}

// Close implements Driver.
func (d *clusterDriver) Close(ctx context.Context, a authority.AccessContext, leaseID string) error {
	return d.driver(a).Close(ctx, a, leaseID)
}

// AsRuntime implements BusDriver: the runtime connected to the last
// server.
func (d *clusterDriver) AsRuntime(name string) Driver {
	return &ClientDriver{C: clientFor(d.bus.ConnectTo(d.t, d.bus.Servers()-1, name))}
}

// ProviderRequest implements BusDriver (from the first server; the
// providers are on the others).
func (d *clusterDriver) ProviderRequest(ctx context.Context, name, provider string, req *messages.ProviderInvokeRequest) (*messages.Error, error) {
	return providerRequest(ctx, d.t, d.bus, name, provider, req)
}

// Capture implements BusDriver.
func (d *clusterDriver) Capture(ctx context.Context, provider string, during func() error) (*messages.ProviderInvokeRequest, error) {
	return capture(ctx, d.t, d.bus, provider, during)
}
