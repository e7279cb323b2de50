// Package traceprop carries W3C trace context (traceparent, tracestate)
// across SharedOS's hops — NATS headers on the turn and provider
// protocols, params._meta on MCP requests — and names the spans and
// attributes every hop records (docs/observability.md).
//
// It uses only the OpenTelemetry API (trace, propagation, attribute,
// codes), never the SDK or an exporter: the client and the provider SDK
// import it and stay light. A nil trace.Tracer everywhere means tracing
// is off: no span is started and no header or _meta key is written.
//
// Trust boundary: a trace context a caller sends only parents the spans
// recorded for its request. It selects nothing else — not the turn, the
// tenant, the authority or the sampling of the node's own decisions
// beyond the trace it joins — and one that is oversized, repeated or
// malformed is ignored, never an error.
package traceprop

import (
	"context"
	"net/http"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The W3C Trace Context keys, in NATS headers and in MCP _meta alike.
const (
	TraceparentKey = "traceparent"
	TracestateKey  = "tracestate"
)

// The bounds on a received trace context. A traceparent of version 00 is
// 55 bytes; later versions may append fields, so up to MaxTraceparent is
// parsed. W3C asks propagators to carry at least 512 bytes of tracestate;
// more is dropped (the traceparent is still used).
const (
	MaxTraceparent = 128
	MaxTracestate  = 512
)

// propagator is W3C Trace Context only: no baggage is read from callers.
var propagator propagation.TextMapPropagator = propagation.TraceContext{}

// boundedGet is the value a received carrier yields for key: the single
// value, "" when it is absent, repeated or beyond its bound.
func boundedGet(key string, vals []string) string {
	if len(vals) != 1 {
		return ""
	}
	v := vals[0]
	switch key {
	case TraceparentKey:
		if len(v) > MaxTraceparent {
			return ""
		}
	case TracestateKey:
		if len(v) > MaxTracestate {
			return ""
		}
	default:
		return ""
	}
	return v
}

// headerCarrier reads and writes the trace context keys of NATS headers
// (case-sensitive, as NATS headers are when read directly).
type headerCarrier nats.Header

func (h headerCarrier) Get(key string) string { return boundedGet(key, h[key]) }
func (h headerCarrier) Set(key, value string) { h[key] = []string{value} }
func (h headerCarrier) Keys() []string        { return []string{TraceparentKey, TracestateKey} }

// Extract is ctx with the remote span context h carries, if a valid one;
// otherwise ctx unchanged.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if len(h[TraceparentKey]) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, headerCarrier(h))
}

// Inject writes ctx's span context into m's headers when it is valid; a
// context without one (tracing off) adds no header.
func Inject(ctx context.Context, m *nats.Msg) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	propagator.Inject(ctx, headerCarrier(m.Header))
}

// metaCarrier reads and writes the trace context keys of an MCP _meta
// object: string values only.
type metaCarrier map[string]any

func (m metaCarrier) Get(key string) string {
	s, ok := m[key].(string)
	if !ok {
		return ""
	}
	return boundedGet(key, []string{s})
}
func (m metaCarrier) Set(key, value string) { m[key] = value }
func (m metaCarrier) Keys() []string        { return []string{TraceparentKey, TracestateKey} }

// ExtractMeta is ctx with the remote span context an MCP request's _meta
// carries (traceparent, tracestate), if a valid one.
func ExtractMeta(ctx context.Context, meta map[string]any) context.Context {
	if _, ok := meta[TraceparentKey]; !ok {
		return ctx
	}
	return propagator.Extract(ctx, metaCarrier(meta))
}

// InjectMeta writes ctx's span context into meta, allocating it when nil,
// and returns it; with no valid span context meta is returned unchanged.
func InjectMeta(ctx context.Context, meta map[string]any) map[string]any {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return meta
	}
	if meta == nil {
		meta = map[string]any{}
	}
	propagator.Inject(ctx, metaCarrier(meta))
	return meta
}

// httpCarrier reads the trace context keys of HTTP headers.
type httpCarrier http.Header

func (h httpCarrier) Get(key string) string { return boundedGet(key, http.Header(h).Values(key)) }
func (h httpCarrier) Set(key, value string) { http.Header(h).Set(key, value) }
func (h httpCarrier) Keys() []string        { return []string{TraceparentKey, TracestateKey} }

// ExtractHTTP is ctx with the remote span context HTTP headers carry
// (traceparent, tracestate), if a valid one.
func ExtractHTTP(ctx context.Context, h http.Header) context.Context {
	if h.Get(TraceparentKey) == "" {
		return ctx
	}
	return propagator.Extract(ctx, httpCarrier(h))
}
