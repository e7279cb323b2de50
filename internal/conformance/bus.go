package conformance

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/internal/natsserver"
	"github.com/sharedos/sharedos/messages"
)

// The bus's runtime identities: each bound to one tenant.
const (
	AcmeRuntime   = "acme-rt"
	GlobexRuntime = "globex-rt"
	// AcmePeer is a second runtime of acme; the turns of AcmeRuntime are
	// not shared with it.
	AcmePeer = "acme-rt2"
	// AdaRuntime is a runtime of acme narrowed to ada and to her
	// acme-notion-work credential profile.
	AdaRuntime = "acme-ada-rt"
)

// Bus is an embedded nats-server configured with SharedOS's identities,
// as a node's is: the node, a runtime per tenant (acme, globex), and a
// provider identity per provider. Columns that drive a node over NATS
// run on it, so the rows that need identities can. A bus of several
// servers (StartBusCluster) is a NATS cluster: each server renders the
// same configuration from one set of seeds, and routes join them.
type Bus struct {
	srvs []*natsserver.Server
	dir  string
	ids  *identity.Set
}

// StartBus starts the bus for the given provider ids; Cleanup stops it.
func StartBus(t testing.TB, providerIDs ...string) *Bus {
	t.Helper()
	return StartBusCluster(t, 1, providerIDs...)
}

// StartBusCluster starts a bus of n servers joined by routes (n = 1: a
// standalone server, as StartBus); Cleanup stops them. The routes may
// still be forming when it returns: wait for the interest a test needs
// (WaitForResponder).
func StartBusCluster(t testing.TB, n int, providerIDs ...string) *Bus {
	t.Helper()
	return startBus(t, n, nil, providerIDs)
}

// StartBusWith is StartBus with identities of the caller's beside the
// default ones (a runtime that shares its turns, say).
func StartBusWith(t testing.TB, extra []identity.Identity, providerIDs ...string) *Bus {
	t.Helper()
	return startBus(t, 1, extra, providerIDs)
}

func startBus(t testing.TB, n int, extra []identity.Identity, providerIDs []string) *Bus {
	t.Helper()
	ids := []identity.Identity{
		{Name: "node", Role: identity.Node},
		{Name: AcmeRuntime, Role: identity.Runtime, Tenants: []string{"acme"}},
		{Name: GlobexRuntime, Role: identity.Runtime, Tenants: []string{"globex"}},
		{Name: AcmePeer, Role: identity.Runtime, Tenants: []string{"acme"}},
		{Name: AdaRuntime, Role: identity.Runtime, Tenants: []string{"acme"}, Principals: []string{"acme/ada"},
			Credentials: []string{"acme/" + Ada.CredentialProfile}},
	}
	ids = append(ids, extra...)
	for _, p := range providerIDs {
		ids = append(ids, identity.Identity{Name: "provider-" + p, Role: identity.Provider, Provider: p})
	}
	set, err := identity.NewSet(ids)
	if err != nil {
		t.Fatal(err)
	}
	b := &Bus{dir: t.TempDir(), ids: set}
	cfg, err := identity.Provision(b.dir, identity.Bus{Prefix: "sharedos", Stream: "SHAREDOS_AUDIT"}, ids)
	if err != nil {
		t.Fatal(err)
	}
	if n == 1 {
		srv, err := natsserver.Start(natsserver.Options{Config: cfg})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Shutdown)
		b.srvs = []*natsserver.Server{srv}
		return b
	}
	// Each server routes to those started before it (already listening,
	// so no route waits for a retry); together a full mesh.
	var routes []string
	for i := range n {
		srv, url := startRouted(t, i, cfg, routes)
		b.srvs = append(b.srvs, srv)
		routes = append(routes, url)
	}
	return b
}

// startRouted starts server i of a bus cluster with routes to those
// started before it, and returns it with its route URL. A route port
// another process took between picking and binding it is picked again.
func startRouted(t testing.TB, i int, cfg string, routes []string) (*natsserver.Server, string) {
	t.Helper()
	var err error
	for range 3 {
		port := freePort(t)
		var srv *natsserver.Server
		srv, err = natsserver.Start(natsserver.Options{
			Config: cfg, ServerName: fmt.Sprintf("conformance-%d", i+1),
			Cluster: natsserver.Cluster{Name: "conformance", Port: port, Routes: routes},
		})
		if err == nil {
			t.Cleanup(srv.Shutdown)
			return srv, fmt.Sprintf("nats-route://127.0.0.1:%d", port)
		}
		if !errors.Is(err, natsserver.ErrStartFailed) {
			break
		}
	}
	t.Fatal(err)
	return nil, ""
}

// freePort is a loopback port nobody listened on just now.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Servers is how many servers the bus has.
func (b *Bus) Servers() int { return len(b.srvs) }

// Identities are the bus's identities (for the node's front).
func (b *Bus) Identities() *identity.Set { return b.ids }

// Connect connects to the first server as the identity name; Cleanup
// closes the connection.
func (b *Bus) Connect(t testing.TB, name string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return b.ConnectTo(t, 0, name, opts...)
}

// ConnectTo connects to server i as the identity name; Cleanup closes
// the connection.
func (b *Bus) ConnectTo(t testing.TB, i int, name string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	auth, err := identity.ConnectOptions(identity.SeedFile(b.dir, name))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := b.srvs[i].Connect(append(append([]nats.Option{nats.Name(fmt.Sprintf("conformance-%s-%d", name, i+1))}, auth...), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// BusDriver is a driver on a bus with identities: rows about who may
// reach what use it.
type BusDriver interface {
	Driver
	// AsRuntime is a driver for the runtime identity name.
	AsRuntime(name string) Driver
	// ProviderRequest sends a raw provider invoke request to provider's
	// subject as the identity name, and returns the provider's refusal
	// (nil when the provider ran it). A bus refusal (the identity may not
	// publish there) is ErrBusRefused.
	ProviderRequest(ctx context.Context, name, provider string, req *messages.ProviderInvokeRequest) (*messages.Error, error)
	// Capture returns the next invoke request the node sends to provider
	// (as a node-account client subscribed to the subject would see it).
	Capture(ctx context.Context, provider string, during func() error) (*messages.ProviderInvokeRequest, error)
}

// ErrBusRefused: the server refused an identity's publish.
var ErrBusRefused = errors.New("the bus refused the publish")

// busDriver is a ClientDriver on a Bus.
type busDriver struct {
	*ClientDriver
	t   testing.TB
	bus *Bus
}

func (d *busDriver) AsRuntime(name string) Driver {
	return &ClientDriver{C: clientFor(d.bus.Connect(d.t, name))}
}

func (d *busDriver) ProviderRequest(ctx context.Context, name, provider string, req *messages.ProviderInvokeRequest) (*messages.Error, error) {
	return providerRequest(ctx, d.t, d.bus, name, provider, req)
}

func (d *busDriver) Capture(ctx context.Context, provider string, during func() error) (*messages.ProviderInvokeRequest, error) {
	return capture(ctx, d.t, d.bus, provider, during)
}

// providerRequest sends req to provider's invoke subject as the identity
// name, connected to b's first server (BusDriver.ProviderRequest).
func providerRequest(ctx context.Context, t testing.TB, b *Bus, name, provider string, req *messages.ProviderInvokeRequest) (*messages.Error, error) {
	errs := make(chan error, 4)
	nc := b.Connect(t, name, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	}))
	defer nc.Close()
	data, err := messages.Encode(req)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	// The server refuses a publish asynchronously (-ERR): take whichever
	// comes first, the refusal or the answer, rather than waiting out
	// the request's timeout after a refusal.
	type answer struct {
		m   *nats.Msg
		err error
	}
	done := make(chan answer, 1)
	go func() {
		m, err := nc.RequestWithContext(rctx, messages.ProviderInvokeSubject("sharedos", provider), data)
		done <- answer{m, err}
	}()
	var a answer
	for waiting := true; waiting; {
		select {
		case e := <-errs:
			if errors.Is(e, nats.ErrPermissionViolation) && strings.Contains(e.Error(), provider) {
				cancel()
				<-done
				return nil, ErrBusRefused
			}
		case a = <-done:
			waiting = false
		}
	}
	if a.err != nil {
		return nil, a.err
	}
	m := a.m
	var rep messages.ProviderInvokeReply
	if err := messages.Decode(m.Data, &rep, messages.DefaultLimits()); err != nil {
		return nil, err
	}
	return rep.Error, nil
}

// capture subscribes to provider's invoke subject on every server of b
// (so the subscription is local to whichever server the node publishes
// on: no wait for interest to cross a route) and returns the first
// request sent while during runs.
func capture(ctx context.Context, t testing.TB, b *Bus, provider string, during func() error) (*messages.ProviderInvokeRequest, error) {
	msgs := make(chan *nats.Msg, 2*len(b.srvs))
	for i := range b.srvs {
		nc := b.ConnectTo(t, i, "node")
		defer nc.Close()
		if _, err := nc.ChanSubscribe(messages.ProviderInvokeSubject("sharedos", provider), msgs); err != nil {
			return nil, err
		}
		if err := nc.Flush(); err != nil {
			return nil, err
		}
	}
	if err := during(); err != nil {
		return nil, err
	}
	var m *nats.Msg
	select {
	case m = <-msgs:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var req messages.ProviderInvokeRequest
	if err := messages.Decode(m.Data, &req, messages.DefaultLimits()); err != nil {
		return nil, err
	}
	return &req, nil
}
