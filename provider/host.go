package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/internal/traceprop"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// Host serves one provider over NATS.
type Host struct {
	id     string
	nc     *nats.Conn
	opts   Options
	p      Provider
	log    *slog.Logger
	ledger ledger
	subs   []*nats.Subscription
	// norm holds every tool of a catalogue as large as a node takes, so
	// the pages of one catalogue do not normalize it again.
	norm *catalog.Normalizer
	// pageBytes bounds the tools' share of a catalogue page (see page).
	pageBytes int
	// tracer records the requests' spans (Options.TracerProvider); nil: none.
	tracer trace.Tracer
	// grants verifies execution grants; nil only with InsecureUnsigned.
	grants   *providers.GrantVerifier
	inflight atomic.Int64
	wg       sync.WaitGroup
	once     sync.Once
}

// Serve starts serving p as provider id on nc and returns once the
// subscriptions are registered with the server.
func Serve(nc *nats.Conn, id string, p Provider, opts *Options) (*Host, error) {
	if !idPattern.MatchString(id) {
		return nil, fmt.Errorf("provider: id %q must match %s", id, idPattern)
	}
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = "sharedos"
	}
	if o.Scope == "" {
		o.Scope = "principal"
	}
	if o.MaxConcurrent == 0 {
		o.MaxConcurrent = 1024
	}
	if o.PageTools <= 0 {
		o.PageTools = DefaultPageTools
	}
	switch o.Scope {
	case "principal", "tenant", "global":
	default:
		return nil, fmt.Errorf("provider %s: scope %q must be principal, tenant or global", id, o.Scope)
	}
	h := &Host{id: id, nc: nc, opts: o, p: p, norm: catalog.NewNormalizer(o.Limits, 2*providers.MaxCatalogTools), pageBytes: pageBytes(nc, o.PageBytes),
		tracer: traceprop.Tracer(o.TracerProvider)}
	switch {
	case len(o.TrustedKeys) > 0:
		v, err := providers.NewGrantVerifier(id, o.TrustedKeys)
		if err != nil {
			return nil, err
		}
		h.grants = v
	case !o.InsecureUnsigned:
		return nil, fmt.Errorf("provider %s: no trusted node keys (Options.TrustedKeys): the provider would run calls no node decided; set Options.InsecureUnsigned to serve without verifying (tests only)", id)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h.log = log.With("provider", id)
	h.ledger = ledger{ttl: o.TTL, byKey: map[ledgerKey]advertised{}}
	group := messages.ProviderQueueGroup(id)
	type endpoint struct {
		subject, queue string
		handle         func(*nats.Msg)
	}
	subjects := []endpoint{
		{messages.ProviderCatalogSubject(o.Prefix, id), group, h.onCatalog},
		{messages.ProviderInvokeSubject(o.Prefix, id), group, h.onInvoke},
	}
	if o.Instance != "" {
		if strings.ContainsAny(o.Instance, ".*> \t\r\n") {
			return nil, fmt.Errorf("provider %s: instance %q must be one subject token", id, o.Instance)
		}
		// No queue group: only this instance answers there.
		subjects = append(subjects,
			endpoint{messages.ProviderInstanceSubject(o.Prefix, id, o.Instance, "catalog"), "", h.onCatalog},
			endpoint{messages.ProviderInstanceSubject(o.Prefix, id, o.Instance, "invoke"), "", h.onInvoke})
	}
	for _, s := range subjects {
		sub, err := nc.QueueSubscribe(s.subject, s.queue, s.handle)
		if err != nil {
			h.unsubscribe()
			return nil, fmt.Errorf("provider %s: subscribing %s: %w", id, s.subject, err)
		}
		h.subs = append(h.subs, sub)
	}
	if err := nc.Flush(); err != nil {
		h.unsubscribe()
		return nil, fmt.Errorf("provider %s: %w", id, err)
	}
	return h, nil
}

// Stop stops taking requests and waits (until ctx ends) for those in
// flight to be answered. Idempotent.
func (h *Host) Stop(ctx context.Context) error {
	var err error
	h.once.Do(func() {
		for _, s := range h.subs {
			if uerr := s.Drain(); uerr != nil && !errors.Is(uerr, nats.ErrConnectionClosed) {
				err = errors.Join(err, uerr)
			}
		}
		done := make(chan struct{})
		go func() { h.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			err = errors.Join(err, fmt.Errorf("provider %s: requests still in flight: %w", h.id, ctx.Err()))
		}
	})
	return err
}

// pageBytes is the byte budget of a page's tools: the option if set,
// else the connection's max payload less an eighth (at least 4 KiB) for
// the rest of the reply and NATS headers.
func pageBytes(nc *nats.Conn, opt int) int {
	limit := int(nc.MaxPayload())
	if limit <= 0 {
		limit = 1 << 20
	}
	budget := limit - max(4096, limit/8)
	if opt > 0 && opt < budget {
		budget = opt
	}
	return max(budget, 1)
}

// unsubscribe drops the subscriptions Serve made before it failed.
func (h *Host) unsubscribe() {
	for _, s := range h.subs {
		_ = s.Unsubscribe()
	}
}

func (h *Host) respond(m *nats.Msg, reply messages.Message) {
	b, err := messages.Encode(reply)
	if err == nil {
		err = m.Respond(b)
	}
	if err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		h.log.Warn("provider: reply failed", "err", err)
	}
}

// admit bounds requests in flight.
func (h *Host) admit() bool {
	if h.inflight.Add(1) > int64(h.opts.MaxConcurrent) {
		h.inflight.Add(-1)
		return false
	}
	h.wg.Add(1)
	return true
}

func (h *Host) release() {
	h.inflight.Add(-1)
	h.wg.Done()
}

func requestContext(timeoutMs uint32) (context.Context, context.CancelFunc) {
	d := 30 * time.Second
	if timeoutMs > 0 && time.Duration(timeoutMs)*time.Millisecond < d {
		d = time.Duration(timeoutMs) * time.Millisecond
	}
	return context.WithTimeout(context.Background(), d)
}

func (h *Host) onCatalog(m *nats.Msg) {
	var req messages.ProviderCatalogRequest
	if err := messages.Decode(m.Data, &req, messages.DefaultLimits()); err != nil {
		h.respond(m, &messages.ProviderCatalogReply{V: messages.Version, Error: &messages.Error{Code: string(reason.InvalidRequest), Message: err.Error()}})
		return
	}
	var from pageCursor
	if req.Cursor != "" {
		var ok bool
		if from, ok = parseCursor(req.Cursor); !ok {
			h.respond(m, &messages.ProviderCatalogReply{V: messages.Version, Error: &messages.Error{Code: string(reason.InvalidRequest),
				Message: fmt.Sprintf("provider %s: malformed catalogue cursor", h.id)}})
			return
		}
	}
	if !h.admit() {
		h.respond(m, &messages.ProviderCatalogReply{V: messages.Version, Error: &messages.Error{Code: string(reason.Overloaded), Message: "provider busy"}})
		return
	}
	go func() {
		defer h.release()
		ctx, cancel := requestContext(req.TimeoutMs)
		defer cancel()
		ctx, span := h.startSpan(ctx, m, "catalog", "", "")
		defer span.End()
		access := req.Access.Context(time.Now())
		access.LeaseID = ""
		tools, err := h.current(ctx, access)
		if err != nil {
			h.respondIn(ctx, m, &messages.ProviderCatalogReply{V: messages.Version, Error: wireError(err)})
			return
		}
		page, next, err := h.page(tools, req.Cursor != "", from)
		if err != nil {
			h.respondIn(ctx, m, &messages.ProviderCatalogReply{V: messages.Version, Error: messages.ErrorOf(err)})
			return
		}
		// The ledger records what was advertised before the node can see it.
		h.ledger.advertise(h.scopeKey(access), page, time.Now())
		rep := &messages.ProviderCatalogReply{V: messages.Version, TTLMs: uint32(h.opts.TTL.Milliseconds()), Scope: h.opts.Scope, NextCursor: next}
		rep.Tools = make([]messages.ProviderTool, 0, len(page))
		for _, t := range page {
			rep.Tools = append(rep.Tools, wireTool(t.tool))
		}
		h.respondIn(ctx, m, rep)
	}()
}

func wireTool(t *catalog.Tool) messages.ProviderTool {
	d := t.Definition()
	return messages.ProviderTool{
		Name: d.Name, Namespace: d.Namespace, Description: d.Description, InputSchema: d.InputSchema,
		OutputSchema: d.OutputSchema, Annotations: d.Annotations, Capability: d.Capability,
		Requirement: d.Requirement, Revision: t.Revision, Title: d.Title, Icons: d.Icons,
	}
}

// Paging. The catalogue is computed afresh for every page (any instance
// can serve any page; nothing is kept between requests) and ordered by
// tool name. A cursor names the offset of the next page and the snapshot
// it belongs to: a hash of the revisions of the whole ordered catalogue.
// If the catalogue computed for a later page hashes differently, it
// changed between pages, and the page is refused capability_changed
// instead of mixing two catalogues; the node starts again from the first
// page.

// pageCursor is a parsed cursor: "c1.<offset>.<snapshot>", the offset in
// decimal and the snapshot 32 lowercase hex digits.
type pageCursor struct {
	offset   int
	snapshot string
}

func (c pageCursor) String() string { return "c1." + strconv.Itoa(c.offset) + "." + c.snapshot }

func parseCursor(s string) (pageCursor, bool) {
	rest, ok := strings.CutPrefix(s, "c1.")
	if !ok {
		return pageCursor{}, false
	}
	off, snap, ok := strings.Cut(rest, ".")
	if !ok || len(off) == 0 || len(off) > 9 || len(snap) != 32 {
		return pageCursor{}, false
	}
	n := 0
	for _, c := range []byte(off) {
		if c < '0' || c > '9' {
			return pageCursor{}, false
		}
		n = n*10 + int(c-'0')
	}
	for _, c := range []byte(snap) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return pageCursor{}, false
		}
	}
	if n == 0 {
		return pageCursor{}, false
	}
	return pageCursor{offset: n, snapshot: snap}, true
}

// snapshotOf hashes the ordered catalogue's revisions (each revision is
// the SHA-256 of the tool's canonical contract, name included).
func snapshotOf(tools []normalized) string {
	hash := sha256.New()
	for _, t := range tools {
		hash.Write([]byte(t.tool.Revision))
		hash.Write([]byte{0})
	}
	return hex.EncodeToString(hash.Sum(nil)[:16])
}

// wireSize bounds the encoded size of a tool's catalogue entry: its
// strings and documents plus, for each of its eleven keys, the key and the
// largest value header.
func wireSize(t *catalog.Tool) int {
	d := t.Definition()
	return 11*(16+5) + len(d.Name) + len(d.Namespace) + len(d.Description) + len(d.InputSchema) + len(d.OutputSchema) +
		len(d.Annotations) + len(d.Capability) + len(d.Requirement) + len(t.Revision) + len(d.Title) + len(d.Icons)
}

// page orders tools by name and returns the page a request asks for (the
// first when it carries no cursor) and the cursor of the next page, if any.
func (h *Host) page(tools []normalized, paging bool, from pageCursor) ([]normalized, string, error) {
	slices.SortStableFunc(tools, func(a, b normalized) int { return strings.Compare(a.tool.Identity.Name, b.tool.Identity.Name) })
	snapshot := snapshotOf(tools)
	start := 0
	if paging {
		if from.snapshot != snapshot {
			return nil, "", reason.New(reason.CapabilityChanged, "provider %s: the catalogue changed since its first page; start again", h.id)
		}
		if from.offset >= len(tools) {
			return nil, "", reason.New(reason.InvalidRequest, "provider %s: catalogue cursor beyond the catalogue", h.id)
		}
		start = from.offset
	}
	end, size := start, 0
	for end < len(tools) && end-start < h.opts.PageTools {
		n := wireSize(tools[end].tool)
		if end > start && size+n > h.pageBytes {
			break
		}
		size += n
		end++
	}
	next := ""
	if end < len(tools) {
		next = pageCursor{offset: end, snapshot: snapshot}.String()
	}
	return tools[start:end], next, nil
}

// normalized is a tool with its normalized contract.
type normalized struct {
	tool    *catalog.Tool
	handler Handler
}

// current asks the provider for its tools and normalizes them; a
// definition that fails the node's rules is an error here, so the author
// sees it.
func (h *Host) current(ctx context.Context, access Access) (out []normalized, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = reason.New(reason.ProviderError, "provider %s panicked listing tools: %v", h.id, r)
		}
	}()
	tools, err := h.p.Tools(ctx, access)
	if err != nil {
		return nil, err
	}
	for _, t := range tools {
		if t.Handler == nil {
			return nil, reason.New(reason.ProviderError, "provider %s: tool %s has no handler", h.id, t.Definition.Name)
		}
		d := t.Definition
		d.Token = ""
		nt, err := h.norm.Normalize(h.id, d)
		if err != nil {
			return nil, reason.New(reason.ProviderError, "%v", err)
		}
		out = append(out, normalized{tool: nt, handler: t.Handler})
	}
	return out, nil
}

func (h *Host) onInvoke(m *nats.Msg) {
	var req messages.ProviderInvokeRequest
	if err := messages.Decode(m.Data, &req, messages.DefaultLimits()); err != nil {
		h.respond(m, &messages.ProviderInvokeReply{V: messages.Version, Error: &messages.Error{Code: string(reason.InvalidRequest), Message: err.Error()}})
		return
	}
	if !h.admit() {
		h.respond(m, &messages.ProviderInvokeReply{V: messages.Version, Error: &messages.Error{Code: string(reason.Overloaded), Message: "provider busy"}})
		return
	}
	go func() {
		defer h.release()
		ctx, cancel := requestContext(req.TimeoutMs)
		defer cancel()
		ctx, span := h.startSpan(ctx, m, "invoke", req.Tool, req.CallID)
		defer span.End()
		now := time.Now()
		access := req.Access.Context(now)
		access.LeaseID = ""
		if h.grants != nil {
			// The node's signed decision, or nothing runs; the handler gets
			// the access the grant names, not the request's unsigned fields.
			g, err := h.grants.Verify(&req, now)
			if err != nil {
				h.respondIn(ctx, m, &messages.ProviderInvokeReply{V: messages.Version, Error: wireError(err)})
				return
			}
			access = g.Access(now)
			access.EnabledNamespaces = req.Access.Namespaces
			var gcancel context.CancelFunc
			ctx, gcancel = context.WithDeadline(ctx, time.UnixMilli(g.Expires).Add(providers.GrantSkew))
			defer gcancel()
		}
		handler, err := h.choose(ctx, access, req.Tool, req.Revision)
		if err != nil {
			h.respondIn(ctx, m, &messages.ProviderInvokeReply{V: messages.Version, Error: wireError(err)})
			return
		}
		out, err := run(ctx, handler, Call{Access: access, CallID: req.CallID, Tool: req.Tool, Arguments: req.Args, Resource: req.Resource})
		if err != nil {
			h.respondIn(ctx, m, &messages.ProviderInvokeReply{V: messages.Version, Error: wireError(err)})
			return
		}
		h.respondIn(ctx, m, &messages.ProviderInvokeReply{V: messages.Version, Text: out.Text, Structured: out.Structured, IsError: out.IsError, Content: out.Content})
	}()
}

// choose finds the handler for the pinned revision: one advertised within
// its TTL runs without asking the provider again; otherwise the provider's
// current tools are listed and the revision must be current.
func (h *Host) choose(ctx context.Context, access Access, name, revision string) (Handler, error) {
	ask := func(current []normalized) (Handler, error) {
		if handler, ok := h.ledger.choose(h.scopeKey(access), name, revision, current, time.Now()); ok {
			return handler, nil
		}
		return nil, reason.New(reason.CapabilityChanged, "provider %s: tool %s revision %.12s is no longer offered; the contract changed", h.id, name, revision)
	}
	if handler, err := ask(nil); err == nil {
		return handler, nil
	}
	tools, err := h.current(ctx, access)
	if err != nil {
		return nil, err
	}
	return ask(tools)
}

// wireError classifies a provider-side failure for the node: deadlines are
// provider_timeout, provider codes are kept, anything else provider_error.
func wireError(err error) *messages.Error {
	msg := err.Error()
	var re *reason.Error
	if errors.As(err, &re) {
		msg = re.Message
		if re.Code == reason.InvalidRequest { // a refused grant or a malformed request
			return &messages.Error{Code: string(re.Code), Message: msg}
		}
	}
	return &messages.Error{Code: string(providers.Classify(err)), Message: msg}
}

// scopeKey is who a catalogue answer for access is vouched for, by the
// declared scope: the tenant, principal and credential profile; the
// tenant; or everyone. The ledger holds an advertised revision under the
// scope key of the access it was advertised to, and honours it only for
// calls whose (granted) access has the same key.
func (h *Host) scopeKey(a Access) string {
	switch h.opts.Scope {
	case "global":
		return "g"
	case "tenant":
		return "t\x00" + a.Tenant
	}
	return "p\x00" + a.Tenant + "\x00" + a.Principal + "\x00" + a.CredentialProfile
}

func run(ctx context.Context, handler Handler, call Call) (res Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("tool %s panicked: %v", call.Tool, r)
		}
	}()
	return handler(ctx, call)
}

// ledgerKey is an advertised revision under the scope key of the access
// it was advertised to.
type ledgerKey struct{ scope, revision string }

type advertised struct {
	name    string
	handler Handler
	until   time.Time
}

// ledger is which revisions this provider has advertised, to which scope,
// and until when it honours them. Safe for concurrent use: every method
// holds mu for a map operation and nothing else (no I/O, no callbacks).
type ledger struct {
	ttl   time.Duration
	mu    sync.Mutex
	byKey map[ledgerKey]advertised
}

// advertise records the revisions a catalogue answer advertised to scope
// at at, and forgets the ones whose TTL has passed.
func (l *ledger) advertise(scope string, tools []normalized, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, a := range l.byKey {
		if at.After(a.until) {
			delete(l.byKey, k)
		}
	}
	for _, t := range tools {
		l.byKey[ledgerKey{scope: scope, revision: t.tool.Revision}] = advertised{name: t.tool.Identity.Name, handler: t.handler, until: at.Add(l.ttl)}
	}
}

// choose returns the handler of tool name at revision: from current (the
// provider's tools now) when it is there, else from what was advertised
// to scope and is still within its TTL at at.
func (l *ledger) choose(scope, name, revision string, current []normalized, at time.Time) (Handler, bool) {
	for _, t := range current {
		if t.tool.Identity.Name == name && t.tool.Revision == revision {
			return t.handler, true
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if a, ok := l.byKey[ledgerKey{scope: scope, revision: revision}]; ok && a.name == name && !at.After(a.until) {
		return a.handler, true
	}
	return nil, false
}
