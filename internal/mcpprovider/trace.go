package mcpprovider

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/sharedos/sharedos/internal/traceprop"
)

// startCall starts the client span of one tools/call, "tools/call
// {tool}" per the MCP conventions, and returns the params _meta carrying
// its W3C trace context (traceparent, tracestate) — or the caller's when
// the provider records no spans, so a trace that reached it continues to
// the server; nil when there is none (tracing off: no key is written).
func (p *Provider) startCall(ctx context.Context, cs *mcp.ClientSession, tool string) (context.Context, trace.Span, mcp.Meta) {
	if p.opts.Tracer == nil {
		return ctx, trace.SpanFromContext(context.Background()), mcp.Meta(traceprop.InjectMeta(ctx, nil))
	}
	ctx, span := traceprop.Start(ctx, p.opts.Tracer, traceprop.MCPSpanName("tools/call", tool), trace.SpanKindClient,
		traceprop.MCPMethodNameKey.String("tools/call"), traceprop.GenAIOperationNameKey.String(traceprop.ExecuteTool),
		traceprop.GenAIToolNameKey.String(tool), traceprop.ProviderKey.String(p.id), traceprop.TransportKey.String(traceprop.TransportMCP))
	if span.IsRecording() {
		if ir := cs.InitializeResult(); ir != nil {
			span.SetAttributes(traceprop.MCPProtocolVersionKey.String(ir.ProtocolVersion))
		}
		if id := cs.ID(); id != "" {
			span.SetAttributes(traceprop.MCPSessionIDKey.String(id))
		}
	}
	meta := traceprop.InjectMeta(ctx, nil)
	if meta == nil {
		return ctx, span, nil
	}
	return ctx, span, mcp.Meta(meta)
}

// endCall ends a tools/call span: a failure's class code (as the call
// reports it), or "tool_error" for a result the tool marked an error.
func endCall(span trace.Span, res *mcp.CallToolResult, err error, x *exchange) {
	code := ""
	switch {
	case !span.IsRecording():
	case err != nil:
		status, tooLarge := x.observed()
		code = string(classify(err, status, tooLarge).code())
	case res != nil && res.IsError:
		code = "tool_error"
	}
	traceprop.End(span, code)
}
