package conformance

import (
	"context"
	"errors"
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
)

// Bus is an embedded nats-server configured with SharedOS's identities,
// as a node's is: the node, a runtime per tenant (acme, globex), and a
// provider identity per provider. Columns that drive a node over NATS
// run on it, so the rows that need identities can.
type Bus struct {
	srv *natsserver.Server
	dir string
	ids *identity.Set
}

// StartBus starts the bus for the given provider ids; Cleanup stops it.
func StartBus(t testing.TB, providerIDs ...string) *Bus {
	t.Helper()
	ids := []identity.Identity{
		{Name: "node", Role: identity.Node},
		{Name: AcmeRuntime, Role: identity.Runtime, Tenants: []string{"acme"}},
		{Name: GlobexRuntime, Role: identity.Runtime, Tenants: []string{"globex"}},
	}
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
	b.srv, err = natsserver.Start(natsserver.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.srv.Shutdown)
	return b
}

// Identities are the bus's identities (for the node's front).
func (b *Bus) Identities() *identity.Set { return b.ids }

// Connect connects as the identity name; Cleanup closes the connection.
func (b *Bus) Connect(t testing.TB, name string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	auth, err := identity.ConnectOptions(identity.SeedFile(b.dir, name))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := b.srv.Connect(append(append([]nats.Option{nats.Name("conformance-" + name)}, auth...), opts...)...)
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
	errs := make(chan error, 4)
	nc := d.bus.Connect(d.t, name, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	}))
	defer nc.Close()
	b, err := messages.Encode(req)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	m, err := nc.RequestWithContext(rctx, messages.ProviderInvokeSubject("sharedos", provider), b)
	if err != nil {
		select {
		case e := <-errs:
			if errors.Is(e, nats.ErrPermissionViolation) && strings.Contains(e.Error(), provider) {
				return nil, ErrBusRefused
			}
		default:
		}
		return nil, err
	}
	var rep messages.ProviderInvokeReply
	if err := messages.Decode(m.Data, &rep, messages.DefaultLimits()); err != nil {
		return nil, err
	}
	return rep.Error, nil
}

func (d *busDriver) Capture(ctx context.Context, provider string, during func() error) (*messages.ProviderInvokeRequest, error) {
	nc := d.bus.Connect(d.t, "node")
	defer nc.Close()
	sub, err := nc.SubscribeSync(messages.ProviderInvokeSubject("sharedos", provider))
	if err != nil {
		return nil, err
	}
	if err := nc.Flush(); err != nil {
		return nil, err
	}
	if err := during(); err != nil {
		return nil, err
	}
	m, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return nil, err
	}
	var req messages.ProviderInvokeRequest
	if err := messages.Decode(m.Data, &req, messages.DefaultLimits()); err != nil {
		return nil, err
	}
	return &req, nil
}
