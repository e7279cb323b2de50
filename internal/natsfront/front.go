// Package natsfront serves a node's kernel over NATS: the turn protocol of
// package messages, registered as a NATS micro service ("sharedos") so
// `nats micro ls/info/stats` show the node and its endpoints.
//
// Opens and operations that name no turn are load-balanced over a queue
// group shared by every node; a turn's later operations are addressed to
// the node that owns it (its id is in the subject), so nothing is looked up
// on the call path. Each request is bounded and guarded before it is
// decoded, then handled on its own goroutine (the NATS subscription stays
// free); beyond MaxConcurrent requests in flight, requests are refused
// overloaded at once rather than queued without bound.
package natsfront

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/trace"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/internal/identity"
	"github.com/sharedos/sharedos/internal/ratelimit"
	"github.com/sharedos/sharedos/internal/traceprop"
	"github.com/sharedos/sharedos/internal/workpool"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

// Options configure a Front.
type Options struct {
	Prefix        string // default "sharedos"
	Version       string // service version reported by micro; default "0.1.0"
	Limits        messages.Limits
	MaxConcurrent int           // requests in flight; default 4096
	MaxTimeout    time.Duration // cap on a request's own timeout; default 2m
	Logger        *slog.Logger
	// Observe, if set, is called after each request with its op, outcome
	// code ("" for success) and latency (metrics).
	Observe func(op messages.Op, code reason.Code, d time.Duration)
	// Tokens mints execution tokens for the MCP front (op token); nil:
	// the op is refused node_unavailable.
	Tokens TokenMinter

	// Identities, if set, makes the front serve only authenticated
	// callers: a request's caller is the runtime identity whose account
	// the bus names in Nats-Request-Info; it may act only for the tenants
	// (and principals) it is bound to, else tenant_forbidden; its leases
	// are its own. nil: access is taken as sent (in-process use, tests).
	Identities *identity.Set
	// TrustUnstamped, with Identities, serves a request without
	// Nats-Request-Info as the node's own (it was published inside the
	// nodes' account, where only nodes may publish turn subjects). Set
	// it only when the bus's permissions guarantee that.
	TrustUnstamped bool
	// OpenRates and CallRates limit each runtime identity's opens and
	// calls on this node, by identity name (beyond: rate_limited).
	OpenRates, CallRates map[string]ratelimit.Limit
	// RefusalRate bounds, per identity, the tenant_forbidden and
	// credential_forbidden refusals recorded in tenants' trails; the rest
	// are counted (UnrecordedRefusals) and logged at debug level. Default
	// DefaultRefusalRate.
	RefusalRate ratelimit.Limit
	// Tracer, if set, records a server span per request (its parent the
	// caller's traceparent header, if any) and an execute_tool span per
	// call (docs/observability.md). nil: no spans.
	Tracer trace.Tracer
	// CaptureContent puts a call's arguments and result in its
	// execute_tool span (the conventions' opt-in attributes).
	CaptureContent bool
	// NoTenantBinding is for conformance proofs only
	// (turn.Switches.NoTenantBinding): callers are identified but not
	// held to their tenants.
	NoTenantBinding bool
}

// Front is a running NATS front.
type Front struct {
	k    *actors.Kernel
	nc   *nats.Conn
	opts Options
	// mu guards svc, draining and stopped (Drain and Stop).
	mu       sync.Mutex
	svc      micro.Service
	draining bool
	// opening counts opens in flight (dispatch to answer).
	opening atomic.Int64
	stopped bool
	// eps are the endpoints, fixed by Serve.
	eps  []endpoint
	sem  chan struct{}
	pool *workpool.Pool
	wg   sync.WaitGroup
	once sync.Once
	// maxPayload is the largest message the bus carries.
	maxPayload int
	// stats are each endpoint's real figures, by endpoint name; the map
	// is read-only once Serve has built it.
	stats map[string]*endpointStats
	// ids are the identities callers are judged against: Options.Identities,
	// replaced by SetIdentities.
	ids atomic.Pointer[identity.Set]
	// noReply counts requests that came without a reply subject (dropped
	// unhandled: nobody could hear the answer, and a call nobody hears
	// must not run).
	noReply atomic.Int64
	// sendFailures counts replies the bus refused even in their small
	// error form.
	sendFailures atomic.Int64
	// forbidden counts requests refused tenant_forbidden or
	// credential_forbidden; unrecorded those past the refusal rate.
	forbidden, unrecorded atomic.Int64
	// refusals is the identities' refusal-recording rate.
	refusals *ratelimit.Limiter
	// rates are the runtime identities' rate limiters, replaced whole by
	// SetRates.
	rates atomic.Pointer[identityRates]
}

// Serve registers the kernel's endpoints on nc and starts serving.
func Serve(nc *nats.Conn, k *actors.Kernel, opts Options) (*Front, error) {
	if opts.Prefix == "" {
		opts.Prefix = "sharedos"
	}
	if opts.Version == "" {
		opts.Version = "0.1.0"
	}
	if opts.Limits == (messages.Limits{}) {
		opts.Limits = messages.DefaultLimits()
	}
	if opts.MaxConcurrent == 0 {
		opts.MaxConcurrent = 4096
	}
	if opts.MaxTimeout == 0 {
		opts.MaxTimeout = 2 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.RefusalRate == (ratelimit.Limit{}) {
		opts.RefusalRate = DefaultRefusalRate
	}
	f := &Front{k: k, nc: nc, opts: opts, sem: make(chan struct{}, opts.MaxConcurrent), pool: workpool.New(64),
		maxPayload: int(nc.MaxPayload()), refusals: ratelimit.New(opts.RefusalRate)}
	f.rates.Store(&identityRates{opens: limiters(opts.OpenRates, nil), calls: limiters(opts.CallRates, nil)})
	f.ids.Store(opts.Identities)
	node, p := k.Node(), opts.Prefix
	f.eps = []endpoint{
		{"open", messages.OpenSubject(p), messages.QueueGroup, messages.OpOpen, f.open, "OpenRequest", "OpenReply"},
		{"attach", messages.TurnSubject(p, node, messages.OpAttach), "", messages.OpAttach, f.open, "OpenRequest", "OpenReply"},
		{"list", messages.TurnSubject(p, node, messages.OpList), "", messages.OpList, f.list, "ListRequest", "ListReply"},
		{"namespaces", messages.TurnSubject(p, node, messages.OpNamespaces), "", messages.OpNamespaces, f.namespaces, "TurnRequest", "NamespacesReply"},
		{"update_namespaces", messages.TurnSubject(p, node, messages.OpUpdateNamespaces), "", messages.OpUpdateNamespaces, f.updateNamespaces, "UpdateNamespacesRequest", "AckReply"},
		{"invoke", messages.TurnSubject(p, node, messages.OpInvoke), "", messages.OpInvoke, f.invoke, "InvokeRequest", "InvokeReply"},
		{"close", messages.TurnSubject(p, node, messages.OpClose), "", messages.OpClose, f.close, "CloseRequest", "AckReply"},
		{"token", messages.TurnSubject(p, node, messages.OpToken), "", messages.OpToken, f.token, "TokenRequest", "TokenReply"},
		{"oneop_list", messages.OneOpSubject(p, messages.OpList), messages.QueueGroup, messages.OpList, f.list, "ListRequest", "ListReply"},
		{"oneop_namespaces", messages.OneOpSubject(p, messages.OpNamespaces), messages.QueueGroup, messages.OpNamespaces, f.namespaces, "TurnRequest", "NamespacesReply"},
		{"oneop_invoke", messages.OneOpSubject(p, messages.OpInvoke), messages.QueueGroup, messages.OpInvoke, f.invoke, "InvokeRequest", "InvokeReply"},
	}
	// Each endpoint's figures, fixed before anything can read them.
	f.stats = make(map[string]*endpointStats, len(f.eps))
	for _, e := range f.eps {
		f.stats[e.name] = &endpointStats{}
	}
	svc, err := f.addService(f.eps)
	if err != nil {
		return nil, err
	}
	f.svc = svc
	return f, nil
}

// endpoint is one request subject the front serves.
type endpoint struct {
	name, subject, queue string
	op                   messages.Op
	handle               handler
	request, reply       string // message types, for endpoint metadata
}

// addService registers eps as the node's micro service and returns once
// the server has the subscriptions: a node that says it is ready must not
// answer its first client with "no responders".
func (f *Front) addService(eps []endpoint) (micro.Service, error) {
	p := f.opts.Prefix
	svc, err := micro.AddService(f.nc, micro.Config{
		Name:        "sharedos",
		Version:     f.opts.Version,
		Description: "SharedOS turn kernel: catalogue resolved once per turn, live authority, audited calls",
		Metadata:    map[string]string{"node": f.k.Node(), "prefix": p, "protocol": fmt.Sprint(messages.Version), "encoding": "msgpack"},
		// Requests are handled off the subscription, so micro's own
		// processing_time measures the hand-off; each endpoint's data
		// carries the real figures (see endpointStats).
		StatsHandler: func(e *micro.Endpoint) any {
			if st := f.stats[e.Name]; st != nil {
				return st.snapshot()
			}
			return nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("natsfront: registering service: %w", err)
	}
	for _, e := range eps {
		queue := e.queue
		if queue == "" { // the subject names this node; no other node subscribes to it
			queue = messages.NodeQueueGroup(f.k.Node())
		}
		opt := []micro.EndpointOpt{micro.WithEndpointSubject(e.subject), micro.WithEndpointQueueGroup(queue),
			micro.WithEndpointMetadata(map[string]string{
				"request": e.request, "reply": e.reply, "encoding": "msgpack", "protocol": fmt.Sprint(messages.Version),
			})}
		kind := turnSubject
		switch e.subject {
		case messages.OneOpSubject(p, e.op):
			kind = oneOpSubject
		case messages.OpenSubject(p):
			kind = openSubject
		}
		st, op, handle := f.stats[e.name], e.op, e.handle
		if err := svc.AddEndpoint(e.name, micro.HandlerFunc(func(r micro.Request) { f.dispatch(r, st, op, kind, handle) }), opt...); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("natsfront: endpoint %s: %w", e.name, err)
		}
	}
	if err := f.nc.Flush(); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("natsfront: flushing subscriptions: %w", err)
	}
	return svc, nil
}

// Drain stops taking what any node could take — opens and turns of one
// operation, which the other nodes' queue group members then get — while
// this node's own turns keep being served until Stop. It registers the
// turn endpoints as a new service (the same queue group, so a request in
// between is delivered to one of the two) before the old one drains: no
// request to a turn of this node goes unanswered. Idempotent.
func (f *Front) Drain() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.draining || f.stopped {
		return nil
	}
	var own []endpoint
	for _, e := range f.eps {
		if e.queue == "" {
			own = append(own, e)
		}
	}
	svc, err := f.addService(own)
	if err != nil {
		return err
	}
	old := f.svc
	f.svc, f.draining = svc, true
	if err := old.Stop(); err != nil {
		return fmt.Errorf("natsfront: draining: %w", err)
	}
	f.opts.Logger.Info("natsfront: draining: opens go to other nodes; this node's turns are still served", "node", f.k.Node())
	return nil
}

// isDraining reports whether Drain has run.
func (f *Front) isDraining() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.draining
}

// Opening is how many opens are in flight: taken before Drain, not yet
// answered. A draining node's turns are all counted once it is 0.
func (f *Front) Opening() int64 { return f.opening.Load() }

// Stop stops taking requests (draining the subscriptions) and waits, until
// ctx ends, for those in flight. Idempotent.
func (f *Front) Stop(ctx context.Context) error {
	var err error
	f.once.Do(func() {
		f.mu.Lock()
		f.stopped = true
		err = f.svc.Stop()
		f.mu.Unlock()
		done := make(chan struct{})
		go func() { f.wg.Wait(); close(done) }()
		select {
		case <-done:
			f.pool.Close()
		case <-ctx.Done():
			err = errors.Join(err, fmt.Errorf("natsfront: requests still in flight: %w", ctx.Err()))
		}
	})
	return err
}

// handler decodes one request and answers it; an error is sent as the
// op's reply type carrying the error's reason code.
type handler func(ctx context.Context, data []byte) (messages.Message, error)

// subjectKind says which subject a request arrived on.
type subjectKind int

const (
	turnSubject subjectKind = iota
	openSubject
	oneOpSubject
)

type subjectKey struct{}

// dispatch bounds concurrency and runs the handler off the subscription.
func (f *Front) dispatch(r micro.Request, st *endpointStats, op messages.Op, kind subjectKind, handle handler) {
	start := time.Now()
	if r.Reply() == "" {
		f.noReply.Add(1)
		return
	}
	// An open counts as in flight before the draining check, so a Drain
	// that set draining and then reads Opening as 0 has seen every open
	// that got past the check finish (its turn then counts as open).
	// Opens the stopped subscription still delivers after Drain are
	// refused node_unavailable, which clients send again to another node:
	// a draining node takes no new turn.
	if kind == openSubject {
		f.opening.Add(1)
		if f.isDraining() {
			f.opening.Add(-1)
			f.reply(r, st, op, start, nil, reason.New(reason.NodeUnavailable, "node %s is draining: its opens go to other nodes", f.k.Node()))
			return
		}
	}
	doneOpening := func() {
		if kind == openSubject {
			f.opening.Add(-1)
		}
	}
	select {
	case f.sem <- struct{}{}:
	default:
		doneOpening()
		f.reply(r, st, op, start, nil, reason.New(reason.Overloaded, "node %s has %d requests in flight", f.k.Node(), cap(f.sem)))
		return
	}
	data := r.Data()
	c := f.callerOf(r)
	f.wg.Add(1)
	f.pool.Go(func() {
		defer f.wg.Done()
		defer func() { <-f.sem }()
		defer doneOpening()
		if max := f.opts.Limits.MaxBytes; max > 0 && len(data) > max {
			f.reply(r, st, op, start, nil, reason.New(reason.InvalidRequest, "frame of %d bytes exceeds %d", len(data), max))
			return
		}
		ctx := context.WithValue(context.Background(), subjectKey{}, kind)
		ctx = context.WithValue(ctx, callerKey{}, c)
		var span trace.Span
		if f.opts.Tracer != nil {
			ctx, span = f.startSpan(ctx, r, op)
		}
		msg, err := handle(ctx, data)
		f.reply(r, st, op, start, msg, err)
		if span != nil {
			traceprop.End(span, outcome(msg, err))
		}
	})
}

// reply answers a request: every request gets an answer. A reply the bus
// cannot carry (larger than its max payload) is replaced by a
// result_too_large error reply; a reply the bus refuses is retried once in
// its small error form. Error replies carry the micro error headers
// (Nats-Service-Error, Nats-Service-Error-Code: the reason code).
func (f *Front) reply(r micro.Request, st *endpointStats, op messages.Op, start time.Time, msg messages.Message, err error) {
	var b []byte
	var e *messages.Error
	if err != nil {
		e = messages.ErrorOf(err)
		b = errorReply(op, e)
	} else {
		b = encode(msg)
		if rep, ok := msg.(messages.Reply); ok {
			e = rep.ReplyError()
		}
	}
	if f.maxPayload > 0 && len(b) > f.maxPayload-replyHeadroom {
		f.opts.Logger.Warn("natsfront: reply too large for the bus; answered result_too_large", "op", op, "bytes", len(b))
		e = messages.ErrorOf(reason.New(reason.ResultTooLarge, "the %s reply is %d bytes; the bus carries at most %d", op, len(b), f.maxPayload))
		b = errorReply(op, e)
	}
	// Counted before the reply is sent: a caller that has its answer finds
	// it in the endpoint's stats.
	code := reason.Code("")
	if e != nil {
		code = reason.Code(e.Code)
	}
	d := time.Since(start)
	st.observe(code, d)
	if f.opts.Observe != nil {
		f.opts.Observe(op, code, d)
	}
	if perr := f.respond(r, b, e); perr != nil && !errors.Is(perr, nats.ErrConnectionClosed) {
		e = messages.ErrorOf(reason.New(reason.Internal, "the node could not send its %s reply: %v", op, perr))
		if perr2 := f.respond(r, errorReply(op, e), e); perr2 != nil {
			f.sendFailures.Add(1)
			f.opts.Logger.Warn("natsfront: reply failed", "op", op, "err", perr, "retry", perr2)
		}
	}
}

// replyHeadroom is what a reply leaves of the bus's max payload for the
// NATS headers it may carry.
const replyHeadroom = 1024

// respond publishes b to the request's reply subject, with the micro error
// headers when e is set. (Published directly: the micro request's own
// Respond records its outcome in a field micro reads when the handler
// returns, which here is at hand-off, before the reply.)
func (f *Front) respond(r micro.Request, b []byte, e *messages.Error) error {
	m := &nats.Msg{Subject: r.Reply(), Data: b}
	if e != nil {
		desc := e.Message
		if desc == "" {
			desc = e.Code
		}
		if len(desc) > 256 {
			desc = desc[:256]
		}
		m.Header = nats.Header{micro.ErrorHeader: []string{desc}, micro.ErrorCodeHeader: []string{e.Code}}
	}
	return f.nc.PublishMsg(m)
}

// NoReplyDropped is how many requests came without a reply subject and
// were dropped unhandled.
func (f *Front) NoReplyDropped() int64 { return f.noReply.Load() }

// requestContext derives the operation's context from the caller's timeout.
func (f *Front) requestContext(parent context.Context, timeoutMs uint32) (context.Context, context.CancelFunc) {
	d := f.opts.MaxTimeout
	if t := time.Duration(timeoutMs) * time.Millisecond; t > 0 && t < d {
		d = t
	}
	return context.WithTimeout(parent, d)
}

func malformed(err error) error {
	return reason.New(reason.InvalidRequest, "%v", err)
}
