package conformance_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/sharedos/sharedos/internal/conformance"
)

func TestMain(m *testing.M) {
	// protoactor's dead-letter throttle goroutine ends by itself (see actors tests).
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

func TestConformance(t *testing.T) {
	tab := conformance.RunTable(t, []conformance.Column{conformance.InProcess, conformance.NATS, conformance.RemoteProvider, conformance.MCPProvider, conformance.MCP, conformance.Cluster})
	t.Cleanup(func() { tab.Print(os.Stdout) })
}
