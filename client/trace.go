package client

import (
	"context"
	"errors"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/sharedos/sharedos/internal/traceprop"
	"github.com/sharedos/sharedos/reason"
)

// startSpan starts the client span of a request on subject, named by the
// operation the subject ends with.
func (c *Client) startSpan(ctx context.Context, subject string) (context.Context, trace.Span) {
	op := subject[strings.LastIndexByte(subject, '.')+1:]
	return c.tracer.Start(ctx, traceprop.TurnSpanName(op), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		traceprop.MessagingSystemKey.String("nats"), traceprop.MessagingDestKey.String(subject),
		traceprop.OperationKey.String(op), traceprop.TransportKey.String(traceprop.TransportNATS)))
}

// ask is one request, with hdr when the request carries trace context.
func (c *Client) ask(ctx context.Context, subject string, data []byte, hdr nats.Header) (*nats.Msg, error) {
	if hdr == nil {
		return c.nc.RequestWithContext(ctx, subject, data)
	}
	return c.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Data: data, Header: hdr})
}

// codeOf is err's reason code, "" for none; an error of the client's own
// (encoding, the connection) is "client_error".
func codeOf(err error) string {
	if err == nil {
		return ""
	}
	var re *reason.Error
	if errors.As(err, &re) {
		return string(re.Code)
	}
	return "client_error"
}
