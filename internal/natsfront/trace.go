package natsfront

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/trace"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/internal/traceprop"
	"github.com/sharedos/sharedos/messages"
)

// startSpan starts a request's server span, "sharedos.{op}", under the
// caller's trace context if its headers carry a valid one (which parents
// the span and selects nothing else).
func (f *Front) startSpan(ctx context.Context, r micro.Request, op messages.Op) (context.Context, trace.Span) {
	ctx = traceprop.Extract(ctx, nats.Header(r.Headers()))
	return f.opts.Tracer.Start(ctx, traceprop.TurnSpanName(string(op)), trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		traceprop.MessagingSystemKey.String("nats"), traceprop.MessagingDestKey.String(r.Subject()),
		traceprop.OperationKey.String(string(op)), traceprop.TransportKey.String(traceprop.TransportNATS),
		traceprop.NodeKey.String(f.k.Node())))
}

// outcome is the reason code a handler's answer carries, "" for success.
func outcome(msg messages.Message, err error) string {
	if err != nil {
		return messages.ErrorOf(err).Code
	}
	if rep, ok := msg.(messages.Reply); ok {
		if e := rep.ReplyError(); e != nil {
			return e.Code
		}
	}
	return ""
}

// endExecuteTool ends a call's execute_tool span with what the kernel
// answered; capture adds the arguments and result.
func endExecuteTool(s trace.Span, capture bool, args []byte, res actors.CallResult, err error) {
	if !s.IsRecording() {
		s.End()
		return
	}
	callID, hash, decision, code := res.CallID, res.CatalogHash, traceprop.Allow, ""
	if err != nil {
		code = messages.ErrorOf(err).Code
		decision = ""
		var ce *actors.CallError
		if errors.As(err, &ce) {
			callID, hash = ce.CallID, ce.CatalogHash
			switch ce.Dispatch {
			case actors.NotDispatched:
				decision = traceprop.Deny
			case actors.Dispatched:
				decision = traceprop.Allow
			}
		}
	}
	if capture {
		s.SetAttributes(traceprop.GenAIToolArgsKey.String(traceprop.Content(args)))
		if err == nil {
			out := res.Result.Structured
			if len(out) == 0 {
				out = []byte(res.Result.Text)
			}
			s.SetAttributes(traceprop.GenAIToolResultKey.String(traceprop.Content(out)))
		}
	}
	traceprop.EndExecuteTool(s, callID, hash, decision, code)
}
