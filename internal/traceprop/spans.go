package traceprop

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope every SharedOS tracer uses.
const ScopeName = "github.com/sharedos/sharedos"

// SharedOS's own span attributes (the sharedos. namespace).
const (
	TurnIDKey      = attribute.Key("sharedos.turn.id")
	CatalogHashKey = attribute.Key("sharedos.catalog_hash")
	DecisionKey    = attribute.Key("sharedos.decision")
	ReasonKey      = attribute.Key("sharedos.reason")
	TransportKey   = attribute.Key("sharedos.transport")
	ProviderKey    = attribute.Key("sharedos.provider")
	NodeKey        = attribute.Key("sharedos.node")
	OperationKey   = attribute.Key("sharedos.operation")
	RecordsKey     = attribute.Key("sharedos.audit.records")
)

// The transports SharedOS serves and reaches tools over.
const (
	TransportNATS = "nats"
	TransportMCP  = "mcp"
)

// Semantic-convention attribute keys (semconv v1.41.0: GenAI, MCP,
// JSON-RPC, messaging).
var (
	GenAIOperationNameKey = semconv.GenAIOperationNameKey
	GenAIToolNameKey      = semconv.GenAIToolNameKey
	GenAIToolCallIDKey    = semconv.GenAIToolCallIDKey
	GenAIToolArgsKey      = semconv.GenAIToolCallArgumentsKey
	GenAIToolResultKey    = semconv.GenAIToolCallResultKey
	MCPMethodNameKey      = semconv.McpMethodNameKey
	MCPProtocolVersionKey = semconv.McpProtocolVersionKey
	MCPSessionIDKey       = semconv.McpSessionIDKey
	JSONRPCRequestIDKey   = semconv.JSONRPCRequestIDKey
	ErrorTypeKey          = semconv.ErrorTypeKey
	MessagingSystemKey    = semconv.MessagingSystemKey
	MessagingDestKey      = semconv.MessagingDestinationNameKey
)

// ExecuteTool is the value of gen_ai.operation.name on a tool execution.
const ExecuteTool = "execute_tool"

// Tracer is tp's SharedOS tracer; nil for a nil tp (tracing off).
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(ScopeName)
}

// Start starts a span named name on t with kind and attrs; with a nil t
// it returns ctx and a span that records nothing.
func Start(ctx context.Context, t trace.Tracer, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if t == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return t.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// StartExecuteTool starts the span of one tool execution as the
// conventions name it: "execute_tool {gen_ai.tool.name}", kind internal.
// name is the tool's name as the caller knows it (the turn's alias).
func StartExecuteTool(ctx context.Context, t trace.Tracer, name, transport string) (context.Context, trace.Span) {
	if t == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return t.Start(ctx, ExecuteTool+" "+name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		GenAIOperationNameKey.String(ExecuteTool), GenAIToolNameKey.String(name), TransportKey.String(transport)))
}

// TurnSpanName is the span name of a turn protocol request, on the
// client and on the node alike: "sharedos.{op}" (sharedos.open,
// sharedos.invoke, …).
func TurnSpanName(op string) string { return "sharedos." + op }

// ProviderSpanName is the span name of a provider protocol request, on
// the node and in the provider alike: "sharedos.provider.{op} {provider}".
func ProviderSpanName(op, provider string) string { return "sharedos.provider." + op + " " + provider }

// MaxContent bounds a captured argument or result in a span.
const MaxContent = 8192

// Content is b as a captured attribute value, cut at MaxContent bytes.
func Content(b []byte) string {
	if len(b) > MaxContent {
		b = b[:MaxContent]
	}
	return string(b)
}

// MCPSpanName is the conventions' MCP span name: "{mcp.method.name}
// {target}", the target being the tool (or prompt, or resource) when the
// method has one.
func MCPSpanName(method, target string) string {
	if target == "" {
		return method
	}
	return method + " " + target
}

// End ends s with the outcome: code is the reason code of a refusal or
// failure ("" for success), recorded as error.type and sharedos.reason
// with an error status.
func End(s trace.Span, code string) {
	if code != "" && s.IsRecording() {
		s.SetAttributes(ErrorTypeKey.String(code), ReasonKey.String(code))
		s.SetStatus(codes.Error, code)
	}
	s.End()
}

// Set sets kv on ctx's span when it records (no allocation when it does
// not).
func Set(ctx context.Context, kv attribute.KeyValue) {
	if s := trace.SpanFromContext(ctx); s.IsRecording() {
		s.SetAttributes(kv)
	}
}

// Decisions as sharedos.decision records them.
const (
	Allow = "allow"
	Deny  = "deny"
)

// EndExecuteTool ends an execute_tool span: the call's id and
// catalogHash, whether it was allowed, and the reason code of a refusal
// or failure ("" for success).
func EndExecuteTool(s trace.Span, callID, catalogHash, decision, code string) {
	if s.IsRecording() {
		s.SetAttributes(GenAIToolCallIDKey.String(callID), CatalogHashKey.String(catalogHash))
		if decision != "" {
			s.SetAttributes(DecisionKey.String(decision))
		}
	}
	End(s, code)
}
