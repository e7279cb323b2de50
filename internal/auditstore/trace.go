package auditstore

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sharedos/sharedos/internal/traceprop"
	"github.com/sharedos/sharedos/reason"
)

// SegmentsKey is the number of segments (tenants) one commit wrote.
const SegmentsKey = attribute.Key("sharedos.audit.segments")

// startCommit starts the span of one commit: every segment published and
// acknowledged. A commit carries many turns' records, so it is a trace of
// its own (kind producer), not a child of any one turn's.
func (s *JetStreamSink) startCommit(g *group) trace.Span {
	if s.tracer == nil {
		return trace.SpanFromContext(context.Background())
	}
	_, span := s.tracer.Start(context.Background(), "sharedos.audit.commit", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(traceprop.MessagingSystemKey.String("nats"), traceprop.MessagingDestKey.String(s.stream),
			traceprop.RecordsKey.Int(g.records), SegmentsKey.Int(len(g.segs))))
	return span
}

// endCommit ends a commit's span: the first segment's failure, if any,
// as error.type.
func endCommit(span trace.Span, errs []error) {
	code := ""
	for _, err := range errs {
		if err != nil {
			code = string(reason.Of(err))
			break
		}
	}
	traceprop.End(span, code)
}
