package natsfront

import (
	"context"
	"errors"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/internal/traceprop"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/projection"
	"github.com/sharedos/sharedos/reason"
	"github.com/sharedos/sharedos/turn"
)

func encode(m messages.Message) []byte {
	b, err := messages.Encode(m)
	if err != nil {
		// Replies are built from kernel values; encoding cannot fail.
		b, _ = messages.Encode(&messages.AckReply{V: messages.Version, Error: &messages.Error{Code: string(reason.Internal), Message: "encoding reply: " + err.Error()}})
	}
	return b
}

// errorReply is the reply type of op carrying e.
func errorReply(op messages.Op, e *messages.Error) []byte {
	switch op {
	case messages.OpOpen, messages.OpAttach:
		return encode(&messages.OpenReply{V: messages.Version, Error: e})
	case messages.OpList:
		return encode(&messages.ListReply{V: messages.Version, Error: e})
	case messages.OpNamespaces:
		return encode(&messages.NamespacesReply{V: messages.Version, Error: e})
	case messages.OpInvoke:
		return encode(&messages.InvokeReply{V: messages.Version, Error: e})
	default:
		return encode(&messages.AckReply{V: messages.Version, Error: e})
	}
}

func isOneOp(ctx context.Context) bool { return ctx.Value(subjectKey{}) == oneOpSubject }

func (f *Front) isOpen(ctx context.Context) bool { return ctx.Value(subjectKey{}) == openSubject }

// admit decodes a turn request, checks that its subject and its turn agree,
// and bounds the work by the caller's timeout.
func (f *Front) admit(ctx context.Context, data []byte, req messages.Request) (context.Context, context.CancelFunc, authority.AccessContext, error) {
	if err := messages.Decode(data, req, f.opts.Limits); err != nil {
		return nil, nil, authority.AccessContext{}, malformed(err)
	}
	if err := turnAccess(ctx, req.RequestAccess()); err != nil {
		return nil, nil, authority.AccessContext{}, err
	}
	access, err := f.accessFor(ctx, req.RequestAccess())
	if err != nil {
		return nil, nil, authority.AccessContext{}, err
	}
	traceprop.Set(ctx, traceprop.TurnIDKey.String(access.TurnID))
	ctx, cancel := f.requestContext(ctx, req.RequestTimeoutMs())
	return ctx, cancel, access, nil
}

// turnAccess refuses a turn subject without a turn id and a one-operation
// subject with one, so the subject always says what the request is.
func turnAccess(ctx context.Context, a messages.Access) error {
	switch one := isOneOp(ctx); {
	case one && a.TurnID != "":
		return reason.New(reason.InvalidRequest, "a one-operation request names no turn; send it to the turn's node")
	case !one && a.TurnID == "":
		return reason.New(reason.InvalidRequest, "a turn request names its turn")
	}
	return nil
}

func (f *Front) open(ctx context.Context, data []byte) (messages.Message, error) {
	var req messages.OpenRequest
	if err := messages.Decode(data, &req, f.opts.Limits); err != nil {
		return nil, malformed(err)
	}
	if f.isOpen(ctx) && req.Access.TurnID != "" {
		return nil, reason.New(reason.InvalidRequest, "open mints the turn id; join an existing turn with attach on its node")
	}
	if !f.isOpen(ctx) && req.Access.TurnID == "" {
		return nil, reason.New(reason.InvalidRequest, "attach names the turn to join")
	}
	access, err := f.accessFor(ctx, req.Access)
	if err != nil {
		return nil, err
	}
	if err := f.rateCheck(ctx, f.rates.Load().opens, "opens"); err != nil {
		return nil, err
	}
	ctx, cancel := f.requestContext(ctx, req.TimeoutMs)
	defer cancel()
	o, err := f.k.Open(ctx, access)
	if err != nil {
		return nil, err
	}
	traceprop.Set(ctx, traceprop.TurnIDKey.String(o.TurnID))
	return &messages.OpenReply{V: messages.Version, Node: f.k.Node(), TurnID: o.TurnID, LeaseID: o.LeaseID, Attached: o.Attached}, nil
}

func (f *Front) list(ctx context.Context, data []byte) (messages.Message, error) {
	var req messages.ListRequest
	ctx, cancel, access, err := f.admit(ctx, data, &req)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if req.Profile != "" {
		return f.listFor(ctx, access, &req)
	}
	if req.Query != "" || req.Budget != 0 || req.K != 0 || req.Encoding != "" {
		return nil, reason.New(reason.InvalidRequest, "query, k, budget and encoding are for a listing with a profile")
	}
	l, err := f.k.ListToolsPage(ctx, access, actors.ListPage{After: req.Cursor})
	if err != nil {
		return nil, err
	}
	rep := &messages.ListReply{V: messages.Version, CatalogHash: l.CatalogHash, Tools: make([]messages.Tool, len(l.Tools)), NextCursor: l.NextCursor}
	rep.Degraded = degradedOf(l.Degraded)
	for i, t := range l.Tools {
		rep.Tools[i] = messages.Tool{
			Alias: t.Alias, Provider: t.Identity.Provider, Name: t.Identity.Name, Namespace: t.Namespace, Revision: t.Revision,
			Description: t.Description, InputSchema: t.InputSchema, OutputSchema: t.OutputSchema, Annotations: t.Annotations,
			Title: t.Title, Icons: t.Icons,
		}
	}
	return rep, nil
}

// degradedOf is a resolution's degraded providers as the wire names them.
func degradedOf(ds []actors.ProviderStatus) []messages.ProviderFailure {
	var out []messages.ProviderFailure
	for _, d := range ds {
		out = append(out, messages.ProviderFailure{Provider: d.Provider, Status: d.Status, Code: d.Reason, Message: d.Error})
	}
	return out
}

// listFor answers a listing (or search) for a model profile.
func (f *Front) listFor(ctx context.Context, access authority.AccessContext, req *messages.ListRequest) (messages.Message, error) {
	if req.Cursor != "" {
		return nil, reason.New(reason.InvalidRequest, "a listing for a profile is not paged: no cursor")
	}
	ml, err := f.k.ListFor(ctx, access, turn.ProjectionRequest{Profile: projection.Profile(req.Profile), Budget: req.Budget,
		Encoding: req.Encoding, Query: req.Query, K: req.K})
	if err != nil {
		return nil, err
	}
	p := &ml.Projection
	m := &messages.ModelListing{Profile: string(p.Profile), Listing: p.Listing, Hash: p.Hash, Tokens: p.Tokens, TokenMethod: p.TokenMethod}
	for _, t := range p.Tools {
		m.Tools = append(m.Tools, messages.ModelTool{Name: t.Alias, Provider: t.Identity.Provider, Tool: t.Identity.Name, Revision: t.Revision, Tokens: t.Tokens})
	}
	for _, u := range p.Unrepresentable {
		mu := messages.Unrepresentable{Provider: u.Tool.Provider, Tool: u.Tool.Name}
		for _, r := range u.Reasons {
			mu.Reasons = append(mu.Reasons, messages.ModelIssue{Keyword: r.Keyword, Path: r.Path, Reason: r.Reason})
		}
		m.Unrepresentable = append(m.Unrepresentable, mu)
	}
	for _, id := range p.OverLimit {
		m.OverLimit = append(m.OverLimit, messages.ToolIdentity{Provider: id.Provider, Tool: id.Name})
	}
	for _, id := range p.OverBudget {
		m.OverBudget = append(m.OverBudget, messages.ToolIdentity{Provider: id.Provider, Tool: id.Name})
	}
	rep := &messages.ListReply{V: messages.Version, CatalogHash: ml.CatalogHash, Model: m}
	rep.Degraded = degradedOf(ml.Degraded)
	return rep, nil
}

func (f *Front) namespaces(ctx context.Context, data []byte) (messages.Message, error) {
	var req messages.TurnRequest
	ctx, cancel, access, err := f.admit(ctx, data, &req)
	if err != nil {
		return nil, err
	}
	defer cancel()
	ns, err := f.k.ListNamespaces(ctx, access)
	if err != nil {
		return nil, err
	}
	rep := &messages.NamespacesReply{V: messages.Version, Namespaces: make([]messages.Namespace, len(ns))}
	for i, n := range ns {
		rep.Namespaces[i] = messages.Namespace{Name: n.Name, Enabled: n.Enabled, Tools: n.Tools}
	}
	return rep, nil
}

func (f *Front) updateNamespaces(ctx context.Context, data []byte) (messages.Message, error) {
	var req messages.UpdateNamespacesRequest
	ctx, cancel, access, err := f.admit(ctx, data, &req)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if err := f.k.UpdateNamespaces(ctx, access, req.Namespaces); err != nil {
		return nil, err
	}
	return &messages.AckReply{V: messages.Version}, nil
}

func (f *Front) invoke(ctx context.Context, data []byte) (messages.Message, error) {
	var req messages.InvokeRequest
	ctx, cancel, access, err := f.admit(ctx, data, &req)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if err := f.rateCheck(ctx, f.rates.Load().calls, "calls"); err != nil {
		return nil, err
	}
	ctx, span := traceprop.StartExecuteTool(ctx, f.opts.Tracer, req.Tool, traceprop.TransportNATS)
	res, err := f.k.InvokeWith(ctx, access, req.Tool, req.Args, actors.CallOptions{RequestID: req.RequestID, Profile: projection.Profile(req.Profile), Approval: req.Approval})
	endExecuteTool(span, f.opts.CaptureContent, req.Args, res, err)
	if err != nil {
		var ce *actors.CallError
		if !errors.As(err, &ce) {
			return nil, err
		}
		// A refusal or failure the turn recorded: say which call it was.
		rep := &messages.InvokeReply{V: messages.Version, Error: messages.ErrorOf(ce.Err), CallID: ce.CallID, CatalogHash: ce.CatalogHash, Alias: req.Tool,
			Approval: messages.ApprovalOf(ce.Approval)}
		if ce.Dispatch != actors.DispatchUnknown {
			d := ce.Dispatch == actors.Dispatched
			rep.Dispatched = &d
		}
		return rep, nil
	}
	return &messages.InvokeReply{
		V: messages.Version, CallID: res.CallID, CatalogHash: res.CatalogHash, Alias: res.Alias,
		Provider: res.Identity.Provider, Name: res.Identity.Name, Text: res.Result.Text, Structured: res.Result.Structured, Content: res.Result.Content,
		IsError: res.Result.IsError, DurationUs: res.Duration.Microseconds(),
	}, nil
}

func (f *Front) close(ctx context.Context, data []byte) (messages.Message, error) {
	var req messages.CloseRequest
	if err := messages.Decode(data, &req, f.opts.Limits); err != nil {
		return nil, malformed(err)
	}
	access, err := f.accessFor(ctx, req.Access)
	if err != nil {
		return nil, err
	}
	ctx, cancel := f.requestContext(ctx, req.TimeoutMs)
	defer cancel()
	if err := f.k.Close(ctx, access, req.LeaseID); err != nil {
		return nil, err
	}
	return &messages.AckReply{V: messages.Version}, nil
}
