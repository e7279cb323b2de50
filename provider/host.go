package provider

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/nats-io/nats.go"

	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/messages"
	"github.com/sharedos/sharedos/reason"
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// Host serves one provider over NATS.
type Host struct {
	id       string
	nc       *nats.Conn
	opts     Options
	p        Provider
	system   *actor.ActorSystem
	pid      *actor.PID
	subs     []*nats.Subscription
	norm     *catalog.Normalizer
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
	h := &Host{id: id, nc: nc, opts: o, p: p, norm: catalog.NewNormalizer(o.Limits, 1024)}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h.system = actor.NewActorSystem(actor.WithDeadLetterRequestLogging(false),
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return log.With("provider", id) }))
	h.pid = h.system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &ledgerActor{h: h, ledger: map[string]advertised{}}
	}))
	group := messages.ProviderQueueGroup(id)
	for subj, handle := range map[string]func(*nats.Msg){
		messages.ProviderCatalogSubject(o.Prefix, id): h.onCatalog,
		messages.ProviderInvokeSubject(o.Prefix, id):  h.onInvoke,
	} {
		sub, err := nc.QueueSubscribe(subj, group, handle)
		if err != nil {
			h.shutdown()
			return nil, fmt.Errorf("provider %s: subscribing %s: %w", id, subj, err)
		}
		h.subs = append(h.subs, sub)
	}
	if err := nc.Flush(); err != nil {
		h.shutdown()
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
		h.shutdown()
	})
	return err
}

func (h *Host) shutdown() {
	_ = h.system.Root.StopFuture(h.pid).Wait()
	h.system.Shutdown()
}

func (h *Host) respond(m *nats.Msg, reply messages.Message) {
	b, err := messages.Encode(reply)
	if err == nil {
		err = m.Respond(b)
	}
	if err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		h.system.Logger().Warn("provider: reply failed", "provider", h.id, "err", err)
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
	if !h.admit() {
		h.respond(m, &messages.ProviderCatalogReply{V: messages.Version, Error: &messages.Error{Code: string(reason.Overloaded), Message: "provider busy"}})
		return
	}
	go func() {
		defer h.release()
		ctx, cancel := requestContext(req.TimeoutMs)
		defer cancel()
		tools, err := h.current(ctx, req.Access.Context(time.Now()))
		if err != nil {
			h.respond(m, &messages.ProviderCatalogReply{V: messages.Version, Error: wireError(err)})
			return
		}
		// The ledger records what was advertised before the node can see it.
		_, _ = h.system.Root.RequestFuture(h.pid, &advertise{tools: tools, at: time.Now()}, 5*time.Second).Result()
		rep := &messages.ProviderCatalogReply{V: messages.Version, TTLMs: uint32(h.opts.TTL.Milliseconds()), Scope: h.opts.Scope}
		for _, t := range tools {
			d := t.tool.Definition()
			rep.Tools = append(rep.Tools, messages.ProviderTool{
				Name: d.Name, Namespace: d.Namespace, Description: d.Description, InputSchema: d.InputSchema,
				OutputSchema: d.OutputSchema, Annotations: d.Annotations, Capability: d.Capability,
				Requirement: d.Requirement, Revision: t.tool.Revision,
			})
		}
		h.respond(m, rep)
	}()
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
		access := req.Access.Context(time.Now())
		handler, err := h.choose(ctx, access, req.Tool, req.Revision)
		if err != nil {
			h.respond(m, &messages.ProviderInvokeReply{V: messages.Version, Error: wireError(err)})
			return
		}
		out, err := run(ctx, handler, Call{Access: access, CallID: req.CallID, Tool: req.Tool, Arguments: req.Args, Resource: req.Resource})
		if err != nil {
			h.respond(m, &messages.ProviderInvokeReply{V: messages.Version, Error: wireError(err)})
			return
		}
		h.respond(m, &messages.ProviderInvokeReply{V: messages.Version, Text: out.Text, Structured: out.Structured, IsError: out.IsError})
	}()
}

// choose finds the handler for the pinned revision: one advertised within
// its TTL runs without asking the provider again; otherwise the provider's
// current tools are listed and the revision must be current.
func (h *Host) choose(ctx context.Context, access Access, name, revision string) (Handler, error) {
	ask := func(current []normalized) (Handler, error) {
		res, err := h.system.Root.RequestFuture(h.pid, &choose{name: name, revision: revision, current: current, at: time.Now()}, 5*time.Second).Result()
		if err != nil {
			return nil, reason.New(reason.ProviderError, "provider %s: %v", h.id, err)
		}
		if handler, ok := res.(Handler); ok {
			return handler, nil
		}
		return nil, res.(error)
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
	}
	return &messages.Error{Code: string(providers.Classify(err)), Message: msg}
}

func run(ctx context.Context, handler Handler, call Call) (res Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("tool %s panicked: %v", call.Tool, r)
		}
	}()
	return handler(ctx, call)
}

// Messages to the ledger actor.
type (
	// advertise records the revisions a catalogue answer advertised.
	advertise struct {
		tools []normalized
		at    time.Time
	}
	// choose picks the handler for a pinned revision, or refuses.
	choose struct {
		name, revision string
		current        []normalized
		at             time.Time
	}
)

type advertised struct {
	name    string
	handler Handler
	until   time.Time
}

// ledgerActor owns which revisions this provider has advertised and until
// when it honours them. One message at a time; no locks.
type ledgerActor struct {
	h      *Host
	ledger map[string]advertised // by revision
}

func (l *ledgerActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
	case *advertise:
		for rev, a := range l.ledger {
			if msg.at.After(a.until) {
				delete(l.ledger, rev)
			}
		}
		for _, t := range msg.tools {
			l.ledger[t.tool.Revision] = advertised{name: t.tool.Identity.Name, handler: t.handler, until: msg.at.Add(l.h.opts.TTL)}
		}
		ctx.Respond(true)
	case *choose:
		for _, t := range msg.current {
			if t.tool.Identity.Name == msg.name && t.tool.Revision == msg.revision {
				ctx.Respond(t.handler)
				return
			}
		}
		if a, ok := l.ledger[msg.revision]; ok && a.name == msg.name && !msg.at.After(a.until) {
			ctx.Respond(a.handler)
			return
		}
		ctx.Respond(reason.New(reason.CapabilityChanged, "provider %s: tool %s revision %.12s is no longer offered; the contract changed", l.h.id, msg.name, msg.revision))
	default:
		l.h.system.Logger().Warn("provider ledger: unexpected message", "type", fmt.Sprintf("%T", msg))
	}
}
