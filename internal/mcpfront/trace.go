package mcpfront

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/sharedos/sharedos/internal/traceprop"
)

// startSpan starts the server span of one MCP request as the MCP
// conventions name it, "{mcp.method.name} {target}" (the tool for
// tools/call), under the trace context the request's params._meta
// carries (traceparent, tracestate) or, failing that, its HTTP headers.
// The context only parents the span: the request's authority is its
// token's. rawID is the JSON-RPC id as sent, when known.
func (f *Front) startSpan(ctx context.Context, e *turnEntry, method, tool string, meta map[string]any, h http.Header, rawID []byte) (context.Context, trace.Span) {
	if f.opts.Tracer == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	if _, ok := meta[traceprop.TraceparentKey]; ok {
		ctx = traceprop.ExtractMeta(ctx, meta)
	} else if h != nil {
		ctx = traceprop.ExtractHTTP(ctx, h)
	}
	ctx, span := f.opts.Tracer.Start(ctx, traceprop.MCPSpanName(method, tool), trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		traceprop.MCPMethodNameKey.String(method), traceprop.TransportKey.String(traceprop.TransportMCP),
		traceprop.TurnIDKey.String(e.id)))
	if v := h.Get("Mcp-Protocol-Version"); v != "" {
		span.SetAttributes(traceprop.MCPProtocolVersionKey.String(v))
	}
	if len(rawID) > 0 {
		id := string(rawID)
		if s, err := strconv.Unquote(id); err == nil {
			id = s
		}
		span.SetAttributes(traceprop.JSONRPCRequestIDKey.String(id))
	}
	if method == "tools/call" {
		span.SetAttributes(traceprop.GenAIOperationNameKey.String(traceprop.ExecuteTool), traceprop.GenAIToolNameKey.String(tool))
	}
	return ctx, span
}

// endSpan ends an MCP request's span with its answer: a call's id,
// catalogHash and decision; a refusal's reason code, a tool error
// ("tool_error") or a JSON-RPC error's code as error.type.
func endSpan(span trace.Span, res mcp.Result, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	code := ""
	if err != nil {
		code = "_OTHER"
		if je, ok := err.(*jsonrpc.Error); ok {
			code = strconv.FormatInt(je.Code, 10)
		}
		traceprop.End(span, code)
		return
	}
	if cr, ok := res.(*mcp.CallToolResult); ok && cr != nil {
		callID, _ := cr.Meta[MetaCallID].(string)
		hash, _ := cr.Meta[MetaCatalogHash].(string)
		decision := traceprop.Allow
		if cr.IsError {
			code = "tool_error"
			if r, ok := refusalOf(cr); ok {
				code, callID, hash = r.Code, r.CallID, r.CatalogHash
				if r.Dispatched != nil && !*r.Dispatched {
					decision = traceprop.Deny
				} else if r.Dispatched == nil {
					decision = ""
				}
			}
		}
		traceprop.EndExecuteTool(span, callID, hash, decision, code)
		return
	}
	traceprop.End(span, code)
}

// refusalOf is the Refusal a refused call's structuredContent carries.
func refusalOf(cr *mcp.CallToolResult) (Refusal, bool) {
	var r Refusal
	switch sc := cr.StructuredContent.(type) {
	case json.RawMessage:
		return r, json.Unmarshal(sc, &r) == nil && r.Code != ""
	case Refusal:
		return sc, true
	case *Refusal:
		return *sc, sc != nil
	}
	return r, false
}

// traced serves one SDK-path request within its span.
func (f *Front) traced(ctx context.Context, e *turnEntry, method string, req mcp.Request, serve func(context.Context) (mcp.Result, error)) (mcp.Result, error) {
	if f.opts.Tracer == nil {
		return serve(ctx)
	}
	var meta map[string]any
	tool := ""
	switch r := req.(type) {
	case *mcp.CallToolRequest:
		if r.Params != nil {
			meta, tool = r.Params.Meta, r.Params.Name
		}
	case *mcp.ListToolsRequest:
		if r.Params != nil {
			meta = r.Params.Meta
		}
	}
	var h http.Header
	if x := req.GetExtra(); x != nil {
		h = x.Header
	}
	ctx, span := f.startSpan(ctx, e, method, tool, meta, h, nil)
	res, err := serve(ctx)
	endSpan(span, res, err)
	return res, err
}

// endFast ends a fast-path request's span from its answer: result is the
// JSON result the front marshalled (a call's _meta and refusal are read
// back from it), err the JSON-RPC error.
func endFast(span trace.Span, method string, result []byte, err error) {
	if !span.IsRecording() || err != nil || method != "tools/call" {
		endSpan(span, nil, err)
		return
	}
	var out struct {
		IsError    bool            `json:"isError"`
		Meta       mcp.Meta        `json:"_meta"`
		Structured json.RawMessage `json:"structuredContent"`
	}
	_ = json.Unmarshal(result, &out)
	cr := &mcp.CallToolResult{IsError: out.IsError, Meta: out.Meta}
	if len(out.Structured) > 0 {
		cr.StructuredContent = out.Structured
	}
	endSpan(span, cr, nil)
}
