package config_test

import (
	"strings"
	"testing"

	"github.com/sharedos/sharedos/internal/config"
)

// The tracing section: off by default; an enabled one names its OTLP
// endpoint; plaintext only to loopback; a ratio within [0, 1]; a typo is
// refused even while tracing is off.
func TestTracingSection(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		want       string // "" accepted; else a substring of the error
	}{
		{"absent", "node: {}", ""},
		{"http loopback insecure", "tracing: {enabled: true, endpoint: \"127.0.0.1:4318\", insecure: true}", ""},
		{"grpc tls", "tracing: {enabled: true, endpoint: \"otel.example.com:4317\", protocol: grpc, sample_ratio: 0.25}", ""},
		{"content opt-in", "tracing: {enabled: true, endpoint: \"localhost:4318\", insecure: true, capture_content: true, url_path: /otlp/v1/traces}", ""},
		{"no endpoint", "tracing: {enabled: true}", "tracing.endpoint (host:port of an OTLP receiver) is required"},
		{"url endpoint", "tracing: {enabled: true, endpoint: \"http://127.0.0.1:4318/v1/traces\"}", "must be host:port"},
		{"insecure remote", "tracing: {enabled: true, endpoint: \"otel.example.com:4318\", insecure: true}", "only to a loopback endpoint"},
		{"protocol", "tracing: {enabled: true, endpoint: \"127.0.0.1:4318\", protocol: thrift}", "tracing.protocol \"thrift\" must be http or grpc"},
		{"ratio", "tracing: {endpoint: \"127.0.0.1:4318\", sample_ratio: 1.5}", "tracing.sample_ratio 1.5 must be within [0, 1]"},
		{"path for grpc", "tracing: {enabled: true, endpoint: \"127.0.0.1:4317\", protocol: grpc, url_path: /v1/traces}", "for protocol http only"},
		{"unknown field", "tracing: {enabled: true, endpoint: \"127.0.0.1:4318\", exporter: jaeger}", "unknown field"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(c.yaml + "\n"))
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && err == nil:
				t.Fatalf("accepted; want an error with %q", c.want)
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Fatalf("error %q; want it to contain %q", err, c.want)
			}
			if c.name == "absent" && cfg.Tracing.Enabled {
				t.Fatal("tracing is on by default")
			}
		})
	}
}
