package provider_test

import (
	"os/exec"
	"strings"
	"testing"
)

// A provider author's binary carries the provider SDK's dependencies and
// no more: the nats.go client, never the kernel's actor system, the
// embedded server, JetStream or the observability stacks.
func TestDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	forbidden := map[string][]string{
		"github.com/sharedos/sharedos/provider": {"github.com/asynkron/protoactor-go", "github.com/nats-io/nats-server",
			"github.com/nats-io/nats.go/jetstream", "go.opentelemetry.io/otel", "github.com/prometheus/"},
	}
	for pkg, bad := range forbidden {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, b := range bad {
				if strings.HasPrefix(dep, b) {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}
