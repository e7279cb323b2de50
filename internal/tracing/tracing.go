// Package tracing is the node's OpenTelemetry trace pipeline: cluster.yaml's
// tracing section (Config, off by default) → an SDK tracer provider that
// batches spans to an OTLP endpoint over HTTP or gRPC. The spans, their
// names and attributes, and the propagation across hops are package
// traceprop's (docs/observability.md).
//
// Sampling is decided by the node, never by a caller: a span with no
// parent, and one whose parent came from another process (a runtime's
// traceparent), is sampled by its trace id at SampleRatio — the same
// decision on every node and provider with the same ratio — whatever
// sampled flag the caller sent; a span under a local parent follows it.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sharedos/sharedos/internal/traceprop"
)

// Config is cluster.yaml's tracing section.
type Config struct {
	// Enabled turns tracing on. Default off: no spans, no trace headers
	// or _meta keys written.
	Enabled bool `yaml:"enabled"`
	// Endpoint is the OTLP receiver's host:port (required when enabled).
	Endpoint string `yaml:"endpoint"`
	// Protocol is "http" (OTLP/HTTP protobuf, default) or "grpc".
	Protocol string `yaml:"protocol"`
	// URLPath is the OTLP/HTTP path; default /v1/traces.
	URLPath string `yaml:"url_path"`
	// Insecure sends spans without TLS; only to a loopback endpoint
	// (a collector beside the node).
	Insecure bool `yaml:"insecure"`
	// SampleRatio is the share of traces sampled, in [0, 1]; default 1.
	SampleRatio *float64 `yaml:"sample_ratio"`
	// CaptureContent records tool-call arguments and results in spans
	// (gen_ai.tool.call.arguments / .result, the conventions' opt-in
	// attributes). Default off: no content is recorded.
	CaptureContent bool `yaml:"capture_content"`
	// ServiceName is the resource's service.name; default "sharedos-node".
	ServiceName string `yaml:"service_name"`
}

// DefaultServiceName is the service.name of a node's spans.
const DefaultServiceName = "sharedos-node"

// Ratio is the sample ratio in effect.
func (c Config) Ratio() float64 {
	if c.SampleRatio == nil {
		return 1
	}
	return *c.SampleRatio
}

// Validate checks c; a disabled section is checked too, so a typo is
// found before tracing is turned on.
func (c Config) Validate() error {
	var errs []error
	switch c.Protocol {
	case "", "http", "grpc":
	default:
		errs = append(errs, fmt.Errorf("tracing.protocol %q must be http or grpc", c.Protocol))
	}
	if r := c.Ratio(); !(r >= 0 && r <= 1) {
		errs = append(errs, fmt.Errorf("tracing.sample_ratio %v must be within [0, 1]", r))
	}
	if c.URLPath != "" && (c.Protocol == "grpc" || !strings.HasPrefix(c.URLPath, "/")) {
		errs = append(errs, fmt.Errorf("tracing.url_path %q: an absolute path, for protocol http only", c.URLPath))
	}
	switch host, port, err := net.SplitHostPort(c.Endpoint); {
	case c.Endpoint == "" && c.Enabled:
		errs = append(errs, errors.New("tracing.endpoint (host:port of an OTLP receiver) is required when tracing is enabled"))
	case c.Endpoint == "":
	case err != nil || host == "" || port == "" || strings.ContainsAny(c.Endpoint, "/?#@"):
		errs = append(errs, fmt.Errorf("tracing.endpoint %q must be host:port", c.Endpoint))
	case c.Insecure && !loopback(host):
		errs = append(errs, fmt.Errorf("tracing.insecure: spans go without TLS only to a loopback endpoint, not %q", host))
	}
	return errors.Join(errs...)
}

func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Tracing is a running trace pipeline. A nil *Tracing is tracing off:
// its Provider is nil and Shutdown does nothing.
type Tracing struct {
	tp      *sdktrace.TracerProvider
	capture bool
}

// New starts the pipeline c configures for node; nil when c is disabled.
func New(c Config, node string) (*Tracing, error) {
	if !c.Enabled {
		return nil, nil
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	var err error
	switch c.Protocol {
	case "grpc":
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(c.Endpoint)}
		if c.Insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		exp, err = otlptracegrpc.New(context.Background(), opts...)
	default:
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(c.Endpoint)}
		if c.URLPath != "" {
			opts = append(opts, otlptracehttp.WithURLPath(c.URLPath))
		}
		if c.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		exp, err = otlptracehttp.New(context.Background(), opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: exporter: %w", err)
	}
	return NewWithExporter(c, node, exp), nil
}

// NewWithExporter is New with the exporter given (tests, bench): spans
// are batched to exp.
func NewWithExporter(c Config, node string, exp sdktrace.SpanExporter) *Tracing {
	name := c.ServiceName
	if name == "" {
		name = DefaultServiceName
	}
	res := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(name), semconv.ServiceInstanceID(node))
	ratio := sdktrace.TraceIDRatioBased(c.Ratio())
	sampler := sdktrace.ParentBased(ratio, sdktrace.WithRemoteParentSampled(ratio), sdktrace.WithRemoteParentNotSampled(ratio))
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSampler(sampler),
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)))
	return &Tracing{tp: tp, capture: c.CaptureContent}
}

// Provider is the tracer provider; nil when t is nil (tracing off).
func (t *Tracing) Provider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.tp
}

// Tracer is the SharedOS tracer; nil when t is nil.
func (t *Tracing) Tracer() trace.Tracer {
	if t == nil {
		return nil
	}
	return traceprop.Tracer(t.tp)
}

// CaptureContent says whether arguments and results go into spans.
func (t *Tracing) CaptureContent() bool { return t != nil && t.capture }

// ForceFlush exports every ended span now.
func (t *Tracing) ForceFlush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.ForceFlush(ctx)
}

// Shutdown flushes and stops the pipeline. Idempotent.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}
