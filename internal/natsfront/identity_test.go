package natsfront_test

import (
	"errors"
	"testing"

	"github.com/sharedos/sharedos/client"
	"github.com/sharedos/sharedos/internal/conformance"
	"github.com/sharedos/sharedos/internal/natsfront"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

// On a bus the node does not configure (an external cluster with
// credentials), a request the server did not stamp with a runtime's
// account is nobody's: refused tenant_forbidden, while the runtime's own
// request is served. With TrustUnstamped (the embedded server, where only
// nodes may publish turn subjects in the nodes' account) it is the node's.
func TestUnstampedRequests(t *testing.T) {
	for _, trust := range []bool{false, true} {
		bus := conformance.StartBus(t)
		f := conformance.NewFixture(t)
		serve(t, bus.Connect(t, "node"), f.Options(), natsfront.Options{Identities: bus.Identities(), TrustUnstamped: trust})
		access := messages.AccessOf(conformance.Ada)
		_, err := client.New(bus.Connect(t, "node"), nil).ListTools(ctx(t), access)
		if trust && err != nil {
			t.Fatalf("trusted unstamped request: %v", err)
		}
		if !trust && !errors.Is(err, reason.ErrTenantForbidden) {
			t.Fatalf("untrusted unstamped request: %v, want tenant_forbidden", err)
		}
		if _, err := client.New(bus.Connect(t, conformance.AcmeRuntime), nil).ListTools(ctx(t), access); err != nil {
			t.Fatalf("acme's runtime (trust unstamped %v): %v", trust, err)
		}
	}
}
