// Package provider is the SDK for writing a SharedOS tool provider in Go.
//
// A provider offers tools to access contexts and executes them. Implement
// Provider and call Serve:
//
//	type weather struct{}
//
//	func (weather) Tools(ctx context.Context, a provider.Access) ([]provider.Tool, error) {
//		return []provider.Tool{{Definition: forecastDef, Handler: forecast}}, nil
//	}
//
//	host, err := provider.Serve(nc, "weather", weather{}, &provider.Options{TrustedKeys: nodeKeys})
//	defer host.Stop(ctx)
//
// The host answers the node's two requests over NATS (see docs/protocol.md):
// catalogue (the tools for an access context, each with its revision, and
// the provider's freshness, in pages that fit the connection's max payload)
// and invoke. Before it runs a tool it verifies the call's execution
// grant — the node's decision, signed with a key in Options.TrustedKeys,
// for exactly this tool, revision, arguments and resource, unexpired and
// not used before — and refuses anything else invalid_request (see
// docs/protocol.md, "Execution grants"). Then it checks the
// revision the turn pinned: it runs the contract the turn was shown — the
// current one, or one it advertised within its TTL — and otherwise refuses
// with capability_changed. A revision advertised within its TTL runs only
// for the scope it was advertised to (Options.Scope: the same principal,
// tenant, or anyone). It never runs a different contract and never
// falls back to a similarly named tool.
//
// The ledger of advertised revisions is one locked map, held only for a
// lookup or an insert; catalogue and tool code run on their own
// goroutines, so a slow tool does not hold up other calls. The SDK needs
// the nats.go client and nothing of the kernel's.
package provider

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/messages"
)

// Access is the context a catalogue or call is for.
type Access = authority.AccessContext

// Definition is a tool's contract (see catalog.Definition).
type Definition = catalog.Definition

// Tool is a definition and the handler that executes it.
type Tool struct {
	Definition Definition
	Handler    Handler
}

// Handler executes one call. It must honour ctx (the call's deadline).
// Returning an error means the tool could not run (the node records
// provider_error, or the code of a *reason.Error); a tool that ran and
// failed returns Result{IsError: true}.
type Handler func(ctx context.Context, call Call) (Result, error)

// Call is one execution.
type Call struct {
	// Access is the access context the node decided the call for, as its
	// signed grant names it (tenant, principal, credential profile, turn,
	// attributes; the namespaces are the request's).
	Access    Access
	CallID    string
	Tool      string
	Arguments json.RawMessage
	// Resource is what the node resolved from the arguments and authorized.
	Resource string
}

// Result is what a tool returns: Text (one plain text block), or
// Content, typed content blocks (text, image, audio, resource links,
// embedded resources) with Text left empty; Structured, optionally, a
// JSON value matching the output schema.
type Result struct {
	Text       string
	Structured json.RawMessage
	IsError    bool
	Content    []messages.Content
}

// Provider is what a provider implements.
//
// Tools returns the tools offered to access now. It is called for every
// catalogue request and before every execution (to learn the current
// contract), concurrently, so it must be safe for concurrent use and cheap
// — cache inside it if computing the list is expensive. It must honour ctx.
type Provider interface {
	Tools(ctx context.Context, access Access) ([]Tool, error)
}

// ProviderFunc adapts a function to Provider.
type ProviderFunc func(ctx context.Context, access Access) ([]Tool, error)

// Tools calls f.
func (f ProviderFunc) Tools(ctx context.Context, access Access) ([]Tool, error) {
	return f(ctx, access)
}

// Options configure Serve; nil means defaults.
type Options struct {
	// Prefix of the subjects. Default "sharedos".
	Prefix string
	// TTL is how long an advertised revision stays executable after it
	// stops being current (the freshness the catalogue reply declares).
	// Default 0: only the current contract runs.
	TTL time.Duration
	// Scope is who else may be shown the same catalogue: "principal"
	// (default), "tenant" or "global".
	Scope string
	// MaxConcurrent bounds requests in flight; beyond it requests are
	// refused overloaded. Default 1024.
	MaxConcurrent int
	// Logger receives the host's logs; nil discards them.
	Logger *slog.Logger
	// Limits bound definitions (the provider checks its own tools with the
	// node's rules, so a bad definition fails here, loudly, not silently
	// at the node).
	Limits catalog.Limits
	// PageTools bounds the tools in one catalogue page. Default
	// DefaultPageTools.
	PageTools int
	// PageBytes bounds the encoded size of one page's tools. Default, and
	// ceiling: the connection's max payload less an eighth (at least
	// 4 KiB) for the rest of the reply.
	PageBytes int
	// TrustedKeys are the Ed25519 public keys of the nodes whose execution
	// grants this provider honours (docs/protocol.md, "Execution grants").
	// Every invoke must carry a grant signed by one of them, for this
	// provider, tool, revision, arguments and resource, unexpired and not
	// used before; anything else is refused invalid_request and the
	// handler never runs. Serve refuses to start without keys unless
	// InsecureUnsigned is set.
	TrustedKeys []ed25519.PublicKey
	// InsecureUnsigned serves without trusted keys: any bus client that
	// reaches the invoke subject runs any tool as anyone it names. Tests
	// and local experiments only.
	InsecureUnsigned bool
	// Instance, if set, names this instance: it also answers on
	// messages.ProviderInstanceSubject (no queue group), where the node
	// hosting it — which sets its own id here — asks it first. The same
	// checks apply there.
	Instance string
	// TracerProvider, if set, records a server span per catalogue and
	// invoke request, "sharedos.provider.{catalog|invoke} {id}", under the
	// node's span its headers carry. Whether or not it is set, a Handler's
	// context carries the node's trace context (trace.SpanContextFromContext), so a
	// call the handler makes onward — an MCP request, another NATS
	// request — continues the turn's trace. Only the OpenTelemetry API is
	// needed here; the SDK and an exporter are the author's choice.
	TracerProvider trace.TracerProvider
}

// DefaultPageTools is the default bound on the tools in one catalogue page.
const DefaultPageTools = 500
