package provider

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sharedos/sharedos/internal/traceprop"
	"github.com/sharedos/sharedos/messages"
)

// startSpan puts the trace context m's headers carry (bounded; a
// malformed one is ignored) in ctx and, with a TracerProvider, starts the
// request's server span under it (an invoke names its tool and call).
func (h *Host) startSpan(ctx context.Context, m *nats.Msg, op, tool, callID string) (context.Context, trace.Span) {
	ctx = traceprop.Extract(ctx, m.Header)
	if h.tracer == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	attrs := []attribute.KeyValue{traceprop.MessagingSystemKey.String("nats"), traceprop.MessagingDestKey.String(m.Subject),
		traceprop.ProviderKey.String(h.id), traceprop.OperationKey.String(op), traceprop.TransportKey.String(traceprop.TransportNATS)}
	if tool != "" {
		attrs = append(attrs, traceprop.GenAIToolNameKey.String(tool), traceprop.GenAIToolCallIDKey.String(callID))
	}
	return h.tracer.Start(ctx, traceprop.ProviderSpanName(op, h.id), trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

// respondIn is respond, recording a refusal on ctx's span.
func (h *Host) respondIn(ctx context.Context, m *nats.Msg, reply messages.Message) {
	if s := trace.SpanFromContext(ctx); s.IsRecording() {
		var e *messages.Error
		switch r := reply.(type) {
		case *messages.ProviderCatalogReply:
			e = r.Error
		case *messages.ProviderInvokeReply:
			e = r.Error
		}
		if e != nil {
			s.SetAttributes(traceprop.ErrorTypeKey.String(e.Code), traceprop.ReasonKey.String(e.Code))
			s.SetStatus(codes.Error, e.Code)
		}
	}
	h.respond(m, reply)
}
