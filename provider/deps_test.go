package provider_test

import (
	"os/exec"
	"strings"
	"testing"
)

// A provider author's binary carries the provider SDK's dependencies and
// no more: the nats.go client and the OpenTelemetry API (trace context),
// never the kernel's actor system, the embedded server, JetStream, the
// OpenTelemetry SDK, its exporters or the metrics stack. The client the
// runtimes import is held to the same.
func TestDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	forbidden := map[string][]string{
		"github.com/sharedos/sharedos/provider": {"github.com/asynkron/protoactor-go", "github.com/nats-io/nats-server",
			"github.com/nats-io/nats.go/jetstream", "go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters",
			"go.opentelemetry.io/proto", "google.golang.org/grpc", "github.com/prometheus/"},
		"github.com/sharedos/sharedos/client": {"github.com/asynkron/protoactor-go", "github.com/nats-io/nats-server",
			"go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters", "go.opentelemetry.io/proto", "google.golang.org/grpc",
			"github.com/prometheus/"},
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
