package providers

import (
	"context"
	"crypto/ed25519"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/internal/traceprop"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

// Remote is the node's proxy for a provider reached over NATS. Safe for
// concurrent use.
//
// Failures are classified: no responders → provider_unavailable; the
// deadline passing → provider_timeout; a reply that does not decode →
// provider_error ("malformed reply"); an error the provider returns keeps
// its code when it is a provider code (capability_changed, overloaded, …)
// and is provider_error otherwise.
//
// Remote tracks whether the provider is up and logs when that changes
// (see State), so a provider that is down is logged once, not once per turn.
type Remote struct {
	id       string
	nc       *nats.Conn
	prefix   string
	limits   messages.Limits
	log      *slog.Logger
	maxTools int
	signer   *GrantSigner
	signErr  error
	// instance is the instance asked first (WithInstance), or "".
	instance string
	// tracer records a client span per request and carries its trace
	// context in the request's headers (WithTracer); nil: neither.
	tracer trace.Tracer
	// catalogTo and invokeTo are where requests go, fixed by NewRemote.
	catalogTo, invokeTo target

	mu    sync.Mutex
	state ProviderState
}

// The bounds on one provider's catalogue, however it is paged. Beyond
// either, Catalog fails with provider_error.
const (
	// MaxCatalogTools bounds the tools of one provider's catalogue.
	MaxCatalogTools = 10000
	// MaxCatalogPages bounds the pages Catalog asks for; a provider whose
	// pagination does not end is cut off by it.
	MaxCatalogPages = 1000
	// catalogRestarts is how many times Catalog starts paging again when
	// the catalogue changed between pages.
	catalogRestarts = 2
)

// RemoteOption configures NewRemote.
type RemoteOption func(*Remote)

// WithLogger sets where state changes are logged (default slog.Default()).
func WithLogger(l *slog.Logger) RemoteOption {
	return func(r *Remote) {
		if l != nil {
			r.log = l
		}
	}
}

// WithMaxCatalogTools lowers (or raises) the MaxCatalogTools bound.
func WithMaxCatalogTools(n int) RemoteOption {
	return func(r *Remote) {
		if n > 0 {
			r.maxTools = n
		}
	}
}

// WithSigner signs every invoke with key: the call carries an execution
// grant (see Grant) that providers verify against the node's public key.
// Without it calls go unsigned, and a provider that checks grants (the
// SDK's default) refuses them.
func WithSigner(key ed25519.PrivateKey) RemoteOption {
	return func(r *Remote) {
		r.signer, r.signErr = NewGrantSigner(key)
	}
}

// WithInstance makes the proxy ask the provider's instance named
// instance first (messages.ProviderInstanceSubject: the one its node
// hosts), and the queue group of all instances only when that one is not
// there (no responders). A node hosting a provider thus never waits on
// another node's instance for its own turns.
func WithInstance(instance string) RemoteOption {
	return func(r *Remote) { r.instance = instance }
}

// WithTracer records a client span per request to the provider,
// "sharedos.provider.{catalog|invoke} {provider}", and sends its trace
// context in the request's headers, so the provider's spans join the
// turn's trace.
func WithTracer(t trace.Tracer) RemoteOption {
	return func(r *Remote) { r.tracer = t }
}

// NewRemote returns the proxy for provider id under prefix.
func NewRemote(nc *nats.Conn, id, prefix string, opts ...RemoteOption) *Remote {
	lim := messages.DefaultLimits()
	lim.MaxBytes = 8 << 20 // a catalogue page of many large schemas
	lim.MaxItems = 1 << 20
	r := &Remote{id: id, nc: nc, prefix: prefix, limits: lim, log: slog.Default(), maxTools: MaxCatalogTools}
	for _, o := range opts {
		o(r)
	}
	r.catalogTo = r.targetOf("catalog", messages.ProviderCatalogSubject(prefix, id))
	r.invokeTo = r.targetOf("invoke", messages.ProviderInvokeSubject(prefix, id))
	return r
}

// ID returns the provider id.
func (r *Remote) ID() string { return r.id }

// ProviderState is what the node last learned of a provider.
type ProviderState struct {
	// Known is false until a catalogue request (or a call finding no
	// instance) has completed.
	Known bool
	// Up: the last catalogue request succeeded.
	Up bool
	// Class is the failure class while down (provider_unavailable,
	// provider_timeout, provider_error, …).
	Class reason.Code
	// Since is when the provider entered this state.
	Since time.Time
}

// State returns the provider's state as last observed.
func (r *Remote) State() ProviderState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

// observe records the outcome of a request that tells whether the
// provider serves, and logs a change of state once: down (with its class),
// a change of class while down, up again. Outcomes the caller caused (its
// context cancelled) tell nothing and are ignored.
func (r *Remote) observe(ctx context.Context, err error) {
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		return
	}
	next := ProviderState{Known: true, Up: err == nil}
	if err != nil {
		next.Class = Classify(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state.Known && r.state.Up == next.Up && r.state.Class == next.Class {
		return
	}
	next.Since = time.Now()
	r.state = next
	if next.Up {
		r.log.Info("provider up", "provider", r.id)
		return
	}
	r.log.Warn("provider down", "provider", r.id, "reason", string(next.Class), "err", err)
}

func timeoutMs(ctx context.Context) uint32 {
	if dl, ok := ctx.Deadline(); ok {
		return uint32(max(time.Until(dl).Milliseconds(), 1))
	}
	return 0
}

// Catalog asks the provider for the context's tools, following its pages
// to the end within ctx. A catalogue that changed between pages is asked
// again from the first page (at most catalogRestarts times); more than
// MaxCatalogTools tools, more than MaxCatalogPages pages or a cursor that
// repeats fail with provider_error.
func (r *Remote) Catalog(ctx context.Context, access authority.AccessContext) (Catalog, error) {
	var (
		out Catalog
		err error
	)
	for attempt := 0; ; attempt++ {
		var changed bool
		out, changed, err = r.pages(ctx, access)
		if !changed {
			break
		}
		if attempt == catalogRestarts {
			err = reason.New(reason.ProviderError, "provider %s: the catalogue changed while it was paged, %d times", r.id, attempt+1)
			break
		}
	}
	r.observe(ctx, err)
	if err != nil {
		return Catalog{}, err
	}
	return out, nil
}

// pages reads one catalogue from its first page to its last; changed
// reports that the provider refused a later page because the catalogue
// moved on.
func (r *Remote) pages(ctx context.Context, access authority.AccessContext) (out Catalog, changed bool, err error) {
	wire := messages.AccessOf(access)
	wire.Lease = "" // never shown to a provider
	cursor := ""
	seen := map[string]bool{}
	for page := 0; ; page++ {
		if page == MaxCatalogPages {
			return Catalog{}, false, reason.New(reason.ProviderError, "provider %s: catalogue of more than %d pages", r.id, MaxCatalogPages)
		}
		var rep messages.ProviderCatalogReply
		pctx, span := r.startSpan(ctx, "catalog", "", "")
		err := r.request(pctx, r.catalogTo,
			&messages.ProviderCatalogRequest{V: messages.Version, Access: wire, TimeoutMs: timeoutMs(ctx), Cursor: cursor}, &rep)
		switch {
		case err != nil:
			traceprop.End(span, string(reason.Of(err)))
		case rep.Error != nil:
			traceprop.End(span, rep.Error.Code)
		default:
			traceprop.End(span, "")
		}
		if err != nil {
			return Catalog{}, false, err
		}
		if rep.Error != nil {
			err := providerError(r.id, rep.Error)
			return Catalog{}, page > 0 && reason.Of(err) == reason.CapabilityChanged, err
		}
		if page == 0 {
			out.Freshness = Freshness{TTL: time.Duration(rep.TTLMs) * time.Millisecond, Scope: rep.Scope}
		}
		if len(out.Definitions)+len(rep.Tools) > r.maxTools {
			return Catalog{}, false, reason.New(reason.ProviderError, "provider %s: catalogue of more than %d tools", r.id, r.maxTools)
		}
		for _, t := range rep.Tools {
			out.Definitions = append(out.Definitions, catalog.Definition{
				Name: t.Name, Namespace: t.Namespace, Description: t.Description, InputSchema: t.InputSchema,
				OutputSchema: t.OutputSchema, Annotations: t.Annotations, Capability: t.Capability,
				Requirement: t.Requirement, Token: t.Revision, Title: t.Title, Icons: t.Icons,
			})
		}
		switch next := rep.NextCursor; {
		case next == "":
			return out, false, nil
		case len(next) > messages.MaxCursorBytes:
			return Catalog{}, false, reason.New(reason.ProviderError, "provider %s: catalogue cursor of %d bytes; limit %d", r.id, len(next), messages.MaxCursorBytes)
		case seen[next] || next == cursor:
			return Catalog{}, false, reason.New(reason.ProviderError, "provider %s: catalogue cursor repeated; pagination does not end", r.id)
		default:
			seen[next] = true
			cursor = next
		}
	}
}

// Invoke asks the provider to execute a tool at the pinned revision.
func (r *Remote) Invoke(ctx context.Context, call Call) (Result, error) {
	rev := call.Token
	if rev == "" {
		rev = call.Revision
	}
	access := messages.AccessOf(call.Access)
	access.Lease = "" // a capability of the turn's holder, never a provider's
	req := &messages.ProviderInvokeRequest{
		V: messages.Version, Access: access, CallID: call.CallID, Tool: call.Tool.Name,
		Revision: rev, Args: call.Arguments, Resource: call.Resource, TimeoutMs: timeoutMs(ctx),
	}
	if err := r.sign(ctx, req, call, rev); err != nil {
		return Result{}, NotDispatched(err)
	}
	ctx, span := r.startSpan(ctx, "invoke", call.Tool.Name, call.CallID)
	var rep messages.ProviderInvokeReply
	err := r.request(ctx, r.invokeTo, req, &rep)
	switch {
	case err != nil:
		traceprop.End(span, string(reason.Of(err)))
	case rep.Error != nil:
		traceprop.End(span, rep.Error.Code)
	default:
		traceprop.End(span, "")
	}
	if err != nil {
		if reason.Of(err) == reason.ProviderUnavailable {
			r.observe(ctx, err) // no instance at all: down, whatever the catalogue said
		}
		return Result{}, err
	}
	if rep.Error != nil {
		return Result{}, providerError(r.id, rep.Error)
	}
	if err := CheckContent(rep.Content); err != nil {
		return Result{}, reason.New(reason.ProviderError, "provider %s: malformed content: %v", r.id, err)
	}
	return Result{Text: rep.Text, Structured: rep.Structured, IsError: rep.IsError, Content: rep.Content}, nil
}

// sign puts the call's execution grant on req: what the kernel decided,
// for exactly these argument bytes, until the call's deadline (bounded by
// MaxGrantLifetime; DefaultGrantLifetime without one).
func (r *Remote) sign(ctx context.Context, req *messages.ProviderInvokeRequest, call Call, rev string) error {
	if r.signErr != nil {
		return reason.New(reason.Internal, "provider %s: %v", r.id, r.signErr)
	}
	if r.signer == nil {
		return nil
	}
	now := time.Now()
	exp := now.Add(DefaultGrantLifetime)
	if dl, ok := ctx.Deadline(); ok {
		exp = dl
	}
	if limit := now.Add(MaxGrantLifetime); exp.After(limit) {
		exp = limit
	}
	g := &Grant{
		V: GrantVersion, Call: call.CallID, Turn: call.Access.TurnID, Node: call.Node,
		Tenant: call.Access.Tenant, Principal: call.Access.Principal, Credential: call.Access.CredentialProfile,
		Attributes: call.Access.Attributes, Provider: r.id, Tool: call.Tool.Name, Revision: call.Revision, Token: rev,
		CatalogHash: call.CatalogHash, ArgsSHA256: ArgsHash(req.Args), Resource: call.Resource,
		IssuedAt: now.UnixMilli(), Expires: max(exp.UnixMilli(), now.UnixMilli()),
	}
	if err := r.signer.Sign(req, g); err != nil {
		return reason.New(reason.Internal, "provider %s: signing the execution grant: %v", r.id, err)
	}
	return nil
}

// target is where a request goes: the preferred instance's subject, and
// the queue group's when that instance is not there.
type target struct{ instance, shared string }

func (r *Remote) targetOf(op, shared string) target {
	if r.instance == "" {
		return target{shared: shared}
	}
	return target{instance: messages.ProviderInstanceSubject(r.prefix, r.id, r.instance, op), shared: shared}
}

func (r *Remote) request(ctx context.Context, to target, req, rep messages.Message) error {
	data, err := messages.Encode(req)
	if err != nil {
		return reason.New(reason.ProviderError, "provider %s: encoding request: %v", r.id, err)
	}
	subject := to.shared
	var msg *nats.Msg
	if to.instance != "" {
		// No responders means nobody got it: safe to ask the others.
		if msg, err = r.send(ctx, to.instance, data); errors.Is(err, nats.ErrNoResponders) {
			msg, err = r.send(ctx, to.shared, data)
		} else {
			subject = to.instance
		}
	} else {
		msg, err = r.send(ctx, subject, data)
	}
	switch {
	case errors.Is(err, nats.ErrNoResponders): // nobody got it
		return NotDispatched(reason.New(reason.ProviderUnavailable, "provider %s: no instance is serving %s", r.id, subject))
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return reason.New(reason.ProviderTimeout, "provider %s: no answer before the deadline", r.id)
	case err != nil:
		return reason.New(reason.ProviderUnavailable, "provider %s: %v", r.id, err)
	}
	if err := messages.Decode(msg.Data, rep, r.limits); err != nil {
		return reason.New(reason.ProviderError, "provider %s: malformed reply: %v", r.id, err)
	}
	return nil
}

// send is one request on subject, carrying ctx's trace context in its
// headers when the proxy traces.
func (r *Remote) send(ctx context.Context, subject string, data []byte) (*nats.Msg, error) {
	if r.tracer == nil {
		return r.nc.RequestWithContext(ctx, subject, data)
	}
	m := &nats.Msg{Subject: subject, Data: data}
	traceprop.Inject(ctx, m)
	return r.nc.RequestMsgWithContext(ctx, m)
}

// startSpan starts the client span of one request to the provider (an
// invoke names its tool and call).
func (r *Remote) startSpan(ctx context.Context, op, tool, callID string) (context.Context, trace.Span) {
	if r.tracer == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	attrs := []attribute.KeyValue{traceprop.MessagingSystemKey.String("nats"), traceprop.ProviderKey.String(r.id),
		traceprop.OperationKey.String(op), traceprop.TransportKey.String(traceprop.TransportNATS)}
	if tool != "" {
		attrs = append(attrs, traceprop.GenAIToolNameKey.String(tool), traceprop.GenAIToolCallIDKey.String(callID))
	}
	return r.tracer.Start(ctx, traceprop.ProviderSpanName(op, r.id), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

func providerError(id string, e *messages.Error) error {
	code := reason.Code(e.Code)
	switch code {
	case reason.CapabilityChanged, reason.ProviderUnavailable, reason.ProviderTimeout, reason.Overloaded,
		reason.AuthRequired, reason.InsufficientScope:
	default:
		code = reason.ProviderError
	}
	if string(code) != e.Code {
		return reason.New(code, "provider %s: %s: %s", id, e.Code, e.Message)
	}
	return reason.New(code, "provider %s: %s", id, e.Message)
}
