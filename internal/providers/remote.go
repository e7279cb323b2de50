package providers

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

// Remote is the node's proxy for a provider reached over NATS. Safe for
// concurrent use; it holds no state beyond its connection.
//
// Failures are classified: no responders → provider_unavailable; the
// deadline passing → provider_timeout; a reply that does not decode →
// provider_error ("malformed reply"); an error the provider returns keeps
// its code when it is a provider code (capability_changed, overloaded, …)
// and is provider_error otherwise.
type Remote struct {
	id     string
	nc     *nats.Conn
	prefix string
	limits messages.Limits
}

// NewRemote returns the proxy for provider id under prefix.
func NewRemote(nc *nats.Conn, id, prefix string) *Remote {
	lim := messages.DefaultLimits()
	lim.MaxBytes = 8 << 20 // a catalogue of many large schemas
	lim.MaxItems = 1 << 20
	return &Remote{id: id, nc: nc, prefix: prefix, limits: lim}
}

// ID returns the provider id.
func (r *Remote) ID() string { return r.id }

func timeoutMs(ctx context.Context) uint32 {
	if dl, ok := ctx.Deadline(); ok {
		return uint32(max(time.Until(dl).Milliseconds(), 1))
	}
	return 0
}

// Catalog asks the provider for the context's tools.
func (r *Remote) Catalog(ctx context.Context, access authority.AccessContext) (Catalog, error) {
	var rep messages.ProviderCatalogReply
	if err := r.request(ctx, messages.ProviderCatalogSubject(r.prefix, r.id),
		&messages.ProviderCatalogRequest{V: messages.Version, Access: messages.AccessOf(access), TimeoutMs: timeoutMs(ctx)}, &rep); err != nil {
		return Catalog{}, err
	}
	if rep.Error != nil {
		return Catalog{}, providerError(r.id, rep.Error)
	}
	out := Catalog{Freshness: Freshness{TTL: time.Duration(rep.TTLMs) * time.Millisecond, Scope: rep.Scope}}
	for _, t := range rep.Tools {
		out.Definitions = append(out.Definitions, catalog.Definition{
			Name: t.Name, Namespace: t.Namespace, Description: t.Description, InputSchema: t.InputSchema,
			OutputSchema: t.OutputSchema, Annotations: t.Annotations, Capability: t.Capability,
			Requirement: t.Requirement, Token: t.Revision,
		})
	}
	return out, nil
}

// Invoke asks the provider to execute a tool at the pinned revision.
func (r *Remote) Invoke(ctx context.Context, call Call) (Result, error) {
	rev := call.Token
	if rev == "" {
		rev = call.Revision
	}
	var rep messages.ProviderInvokeReply
	if err := r.request(ctx, messages.ProviderInvokeSubject(r.prefix, r.id), &messages.ProviderInvokeRequest{
		V: messages.Version, Access: messages.AccessOf(call.Access), CallID: call.CallID, Tool: call.Tool.Name,
		Revision: rev, Args: call.Arguments, Resource: call.Resource, TimeoutMs: timeoutMs(ctx),
	}, &rep); err != nil {
		return Result{}, err
	}
	if rep.Error != nil {
		return Result{}, providerError(r.id, rep.Error)
	}
	return Result{Text: rep.Text, Structured: rep.Structured, IsError: rep.IsError}, nil
}

func (r *Remote) request(ctx context.Context, subject string, req, rep messages.Message) error {
	data, err := messages.Encode(req)
	if err != nil {
		return reason.New(reason.ProviderError, "provider %s: encoding request: %v", r.id, err)
	}
	msg, err := r.nc.RequestWithContext(ctx, subject, data)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return reason.New(reason.ProviderUnavailable, "provider %s: no instance is serving %s", r.id, subject)
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

func providerError(id string, e *messages.Error) error {
	code := reason.Code(e.Code)
	switch code {
	case reason.CapabilityChanged, reason.ProviderUnavailable, reason.ProviderTimeout, reason.Overloaded:
	default:
		code = reason.ProviderError
	}
	if string(code) != e.Code {
		return reason.New(code, "provider %s: %s: %s", id, e.Code, e.Message)
	}
	return reason.New(code, "provider %s: %s", id, e.Message)
}
