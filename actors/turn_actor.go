package actors

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/trace"

	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/audit"
	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/reason"
	"github.com/sharedos/sharedos/turn"
)

// turnActor is the shell around one turn.Machine. It has two phases, as
// behaviours: serving (decide operations; start a resolution when the
// catalogue is needed and not held) and resolving (stash every operation,
// in order, until the one resolution returns).
//
// Every turn of a kernel is spawned from the same props (one idle open turn
// is a few hundred bytes, and a per-turn props with a per-turn producer
// closure was a fifth of them); the spawner tells the new turn who it is
// with *startTurn, its first message, before anyone else can reach it.
type turnActor struct {
	sh     *shared
	turnID string
	oneOp  bool
	// activity counts the messages a named turn receives; the directory's
	// idle sweep reads it (nil for a turn of one operation).
	activity *atomic.Uint32
	m        *turn.Machine
	behavior actor.Behavior
	stash    []envelope
	// closers are waiting for turn.closed; why is the close reason.
	closers []*actor.PID
	why     string
	// unconfirmed are receipts of records not yet known stored, in the
	// order emitted; failed is set once one of them failed (see
	// checkReceipts). An answer waits for every one of them emitted
	// before it (answer), so nothing reaches a caller before each earlier
	// record of its turn is stored.
	unconfirmed []audit.Receipt
	failed      bool
	// calls are the executions in flight, by call id: who waits for each,
	// and how to stop it.
	calls map[string]*pendingCall
	// leases are the leases held on this turn (a named turn), each with
	// the bus identity that took it (AccessContext.Caller): every
	// operation must name one; the turn closes when the last is released.
	// A slice, not a map: a turn holds one or a few (at most
	// MaxLeasesPerTurn), and a one-entry map costs an idle turn ~300 B.
	leases []heldLease
	// opener is the bus identity that opened the turn: attaching is
	// for it (and the identities Options.SharesTurns names) alone.
	opener string
	// linger ends a finished turn's linger (finish).
	linger *time.Timer
	// closedReceipt is turn.closed's receipt, once recorded: a close that
	// reaches a finished turn is answered when that record is stored.
	closedReceipt audit.Receipt
	// keyed are the calls that came with a request id (keyed.go); nil
	// until the first.
	keyed *keyedCalls
}

// pendingCall is one dispatched execution the turn waits for.
type pendingCall struct {
	sender      *actor.PID
	cancel      context.CancelFunc
	catalogHash string
	// key is the call's request key when it is keyed, else "".
	key string
	// dispatched is set by the execution once the call is handed to its
	// provider (after its tool.invoked is stored), and cleared when the
	// provider's error says it never sent it (providers.ErrNotDispatched).
	dispatched atomic.Bool
}

func (pc *pendingCall) dispatch() Dispatch {
	if pc.dispatched.Load() {
		return Dispatched
	}
	return NotDispatched
}

// startTurn is a turn actor's first message: the turn's access context as
// opened, and whether it is a turn of one operation.
type startTurn struct {
	access authority.AccessContext
	// lease is the opener's lease (a named turn).
	lease    string
	oneOp    bool
	activity *atomic.Uint32
}

type envelope struct {
	sender *actor.PID
	msg    any
}

func newTurnActor(sh *shared) actor.Actor {
	a := &turnActor{sh: sh, behavior: actor.NewBehavior()}
	a.behavior.Become(a.starting)
	return a
}

// newTurnProps are the props every turn actor of a kernel is spawned
// from: its mailbox (lock-free, nothing preallocated) runs on the kernel's
// warm worker pool (see internal/workpool), or on the execution that
// completes (turnMailbox).
func newTurnProps(sh *shared) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return newTurnActor(sh) },
		actor.WithMailbox(newTurnMailbox(sh.pool, 300)))
}

// starting waits for *startTurn, which the spawner sends first.
func (a *turnActor) starting(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *startTurn:
		a.turnID, a.oneOp, a.activity, a.opener = msg.access.TurnID, msg.oneOp, msg.activity, msg.access.Caller
		if msg.lease != "" {
			a.leases = []heldLease{{id: msg.lease, caller: msg.access.Caller}}
		}
		msg.access.LeaseID = "" // the turn's context holds no capability
		m, rec := turn.New(turn.Config{
			Node: a.sh.opts.Node, Incarnation: randomID(), StepCeiling: a.sh.opts.StepCeiling,
			MaxInFlight: a.sh.opts.MaxInFlightPerTurn, OneOperation: a.oneOp, Switches: a.sh.opts.Switches,
			Projections: a.sh.projections, Approvals: a.sh.opts.Approvals.Rules,
		}, msg.access)
		a.m = m
		a.emit(rec)
		a.behavior.Become(a.serving)
		// Replay anything that arrived first (possible only for a turn
		// id the caller chose, named before its open was answered).
		early := a.stash
		a.stash = nil
		for _, env := range early {
			a.dispatch(ctx, env)
		}
	case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
	default:
		a.stash = append(a.stash, envelope{sender: ctx.Sender(), msg: msg})
	}
}

func (a *turnActor) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*inspectTurn); ok { // not activity (inspect.go)
		a.inspect(ctx)
		return
	}
	if a.activity != nil {
		a.activity.Add(1)
	}
	a.behavior.Receive(ctx)
}

// lifecycle handles what both phases handle alike; it reports whether msg was one.
func (a *turnActor) lifecycle(ctx actor.Context) bool {
	switch ctx.Message().(type) {
	case *actor.Started:
	case *actor.Stopping, *actor.Restarting:
	case *actor.Stopped:
		// Stopped without a close (a panic, or the system going down past
		// its deadline): every caller still waiting is answered now, each
		// call in flight is recorded as ended, then the chain is closed.
		if a.m != nil {
			now := a.now()
			for _, id := range slices.Sorted(maps.Keys(a.calls)) {
				pc := a.calls[id]
				pc.cancel()
				err := reason.New(reason.TurnClosed, "turn %s stopped while call %s was in flight", a.turnID, id)
				if rec, cerr := a.m.Complete(now, turn.Completion{CallID: id, Err: err}); cerr == nil {
					a.emit(rec)
				}
				ce := &CallError{Err: err, CallID: id, CatalogHash: pc.catalogHash, Dispatch: pc.dispatch()}
				ctx.Send(pc.sender, ce)
				if pc.key != "" {
					a.keyedStopped(ctx, pc.key, ce)
				}
			}
			a.calls = nil
			if rec := a.m.Finish(now, "shutdown"); rec != nil {
				a.emit(rec)
			}
		}
		for _, s := range a.stash {
			ctx.Send(s.sender, reason.New(reason.TurnClosed, "turn %s stopped", a.turnID))
		}
		a.stash = nil
	default:
		return false
	}
	return true
}

func (a *turnActor) serving(ctx actor.Context) {
	if a.lifecycle(ctx) {
		return
	}
	a.checkReceipts(ctx)
	switch msg := ctx.Message().(type) {
	case *completed:
		a.complete(ctx, msg)
	case *closeTurn:
		a.beginClose(ctx, ctx.Sender(), msg.why)
	case *attachLease:
		a.attach(ctx, ctx.Sender(), msg)
	case *releaseLease:
		a.release(ctx, ctx.Sender(), msg)
	case *approvalFetched:
		if msg.err != nil {
			ctx.Send(msg.sender, reason.New(reason.Internal, "the approvals store could not be read; the call was not decided: %v", msg.err))
			return
		}
		a.operate(ctx, envelope{sender: msg.sender, msg: msg.msg})
	case *requestStored:
		if msg.err != nil && a.m != nil {
			a.m.ForgetRequest(msg.id)
		}
	case *listTools, *projectTools, *listNamespaces, *updateNamespaces, *invokeTool, *describeTurn:
		if a.failed {
			if inv, ok := msg.(*invokeTool); ok && a.replayRetry(ctx, ctx.Sender(), inv) {
				return
			}
			ctx.Respond(reason.New(reason.AuditUnavailable, "turn %s closed: the audit stream did not store one of its records", a.turnID))
			return
		}
		a.operate(ctx, envelope{sender: ctx.Sender(), msg: msg})
	default:
		a.sh.log.Warn("turn: unexpected message", "turn", a.turnID, "type", fmt.Sprintf("%T", msg))
	}
}

func (a *turnActor) resolving(ctx actor.Context) {
	if a.lifecycle(ctx) {
		return
	}
	switch msg := ctx.Message().(type) {
	case *resolved:
		a.emit(a.m.Resolve(a.now(), msg.res))
		a.behavior.Become(a.serving)
		stash := a.stash
		a.stash = nil
		for _, env := range stash {
			if msg.res.Err != nil {
				if _, isClose := env.msg.(*closeTurn); !isClose {
					ctx.Send(env.sender, msg.res.Err)
					continue
				}
			}
			a.dispatch(ctx, env)
		}
		if a.oneOp && msg.res.Err != nil && a.m != nil {
			a.finish(ctx, "one_operation")
		}
	case *completed:
		a.complete(ctx, msg)
	case *approvalFetched:
		a.stash = append(a.stash, envelope{sender: msg.sender, msg: msg.msg})
	case *requestStored:
		if msg.err != nil {
			a.m.ForgetRequest(msg.id)
		}
	default:
		a.stash = append(a.stash, envelope{sender: ctx.Sender(), msg: msg})
	}
}

// dispatch handles an unstashed message as serving would. If it needs a
// fresh resolution (only with Switches.ReresolvePerOperation) the rest of
// the stash waits for it, in order.
func (a *turnActor) dispatch(ctx actor.Context, env envelope) {
	if a.m == nil { // an earlier message of this stash closed the turn
		if env.sender != nil {
			ctx.Send(env.sender, reason.New(reason.TurnClosed, "turn %s is closed", a.turnID))
		}
		return
	}
	if len(a.stash) > 0 { // a resolution started by an earlier unstashed message
		a.stash = append(a.stash, env)
		return
	}
	switch msg := env.msg.(type) {
	case *closeTurn:
		a.beginClose(ctx, env.sender, msg.why)
	case *attachLease:
		a.attach(ctx, env.sender, msg)
	case *releaseLease:
		a.release(ctx, env.sender, msg)
	default:
		a.operate(ctx, env)
	}
}

// attach takes another lease on the turn for the same authority and
// records turn.attached; the caller gets the lease once that is stored.
func (a *turnActor) attach(ctx actor.Context, sender *actor.PID, msg *attachLease) {
	if err := a.m.CheckAccess(msg.access); err != nil {
		ctx.Send(sender, err)
		return
	}
	if !a.sh.opts.SharesTurns(a.opener, msg.access.Caller) {
		// Another identity of the tenant knows the id (it is in every
		// audit event) but not the turn: answered as if there were none.
		ctx.Send(sender, reason.New(reason.TurnNotFound, "no open turn %s for this caller", a.turnID))
		return
	}
	if len(a.leases) >= a.sh.opts.MaxLeasesPerTurn {
		ctx.Send(sender, reason.New(reason.Overloaded, "turn %s holds %d leases", a.turnID, len(a.leases)))
		return
	}
	id := mintID()
	rec, err := a.m.Attached(a.now(), id, msg.access.Caller, len(a.leases)+1)
	if err != nil {
		ctx.Send(sender, err)
		return
	}
	a.leases = append(a.leases, heldLease{id: id, caller: msg.access.Caller})
	a.answer(ctx, sender, &Opened{TurnID: a.turnID, LeaseID: id, Attached: true}, a.emit(rec))
}

// release releases a lease and records turn.detached; the last release
// closes the turn (answered once turn.closed is stored). Releasing a
// lease the turn does not hold (again, or never) is harmless.
func (a *turnActor) release(ctx actor.Context, sender *actor.PID, msg *releaseLease) {
	if !a.holds(msg.leaseID, msg.access.Caller) {
		if a.m.Closed() {
			a.beginClose(ctx, sender, "released") // joins the close under way
			return
		}
		ctx.Send(sender, true)
		return
	}
	a.leases = slices.DeleteFunc(a.leases, func(l heldLease) bool { return l.id == msg.leaseID })
	receipt := a.emit(a.m.Detached(a.now(), msg.leaseID, len(a.leases)))
	if len(a.leases) > 0 {
		a.answer(ctx, sender, true, receipt)
		return
	}
	a.beginClose(ctx, sender, "released")
}

// holds reports whether the turn holds lease for caller: a lease taken by
// one bus identity is no lease for another.
func (a *turnActor) holds(lease, caller string) bool {
	if lease == "" {
		return false
	}
	for _, l := range a.leases {
		if l.id == lease {
			return l.caller == caller
		}
	}
	return false
}

// heldLease is a lease on a turn and the bus identity that took it.
type heldLease struct{ id, caller string }

// now stamps an instant from the kernel's clock. (The machine never
// records an instant earlier than one it already recorded, so a clock that
// steps back cannot make a turn's event times decrease.)
func (a *turnActor) now() time.Time { return a.sh.opts.Clock() }

// operate decides one operation, resolving first if the catalogue is
// needed. The operation's instant is stamped here, when it is decided —
// not when the node admitted it: an operation that waited behind the
// first resolution is judged at the instant it is decided.
func (a *turnActor) operate(ctx actor.Context, env envelope) {
	access := accessOf(env.msg)
	if err := a.m.CheckAccess(access); err != nil {
		ctx.Send(env.sender, err)
		return
	}
	if !a.oneOp && !a.holds(access.LeaseID, access.Caller) && !a.sh.opts.Switches.NoLeaseCheck {
		// Without its lease nobody may operate on a turn, even with its
		// id and authority; saying more would reveal the turn exists.
		ctx.Send(env.sender, reason.New(reason.TurnNotFound, "no turn %s for this lease", access.TurnID))
		return
	}
	if !a.m.Resolved() {
		if _, ok := env.msg.(*updateNamespaces); !ok {
			a.stash = append(a.stash, env)
			a.behavior.Become(a.resolving)
			a.startResolution(ctx, access)
			return
		}
	}
	now := a.now()
	if a.sh.opts.Switches.StampAtAdmission {
		now = access.Now
	}
	if upd, ok := env.msg.(*updateNamespaces); ok {
		rec, err := a.m.UpdateNamespaces(now, upd.namespaces)
		if err != nil {
			ctx.Send(env.sender, err)
			return
		}
		a.answer(ctx, env.sender, true, a.emit(rec))
		a.afterOp(ctx)
		return
	}
	switch msg := env.msg.(type) {
	case *listTools:
		page := turn.Page{After: msg.page.After, MaxTools: msg.page.MaxTools, Transport: msg.access.Transport}
		if a.sh.opts.MaxReplyBytes > 0 {
			page.MaxBytes = max(a.sh.opts.MaxReplyBytes-ReplyOverhead, 1)
		}
		listed, next, hash, rec, err := a.m.ListPage(now, page)
		if err != nil {
			ctx.Send(env.sender, err)
			return
		}
		receipt := a.emit(rec)
		out := &ToolList{CatalogHash: hash, Tools: make([]ListedTool, len(listed)), NextCursor: next, Degraded: degraded(a.m.Degraded())}
		for i, l := range listed {
			t := l.Tool
			out.Tools[i] = ListedTool{Alias: l.Alias, Identity: t.Identity, Namespace: t.Namespace, Revision: t.Revision,
				Description: t.Description, Title: t.Title, Icons: t.Icons, InputSchema: t.InputSchema, OutputSchema: t.OutputSchema, Annotations: t.Annotations}
		}
		a.answer(ctx, env.sender, out, receipt)
		a.afterOp(ctx)
	case *projectTools:
		req := msg.req
		req.Transport = msg.access.Transport
		if a.sh.opts.MaxReplyBytes > 0 {
			// The listing travels with its report and names: half the
			// reply for the bytes to send.
			req.MaxBytes = max((a.sh.opts.MaxReplyBytes-ReplyOverhead)/2, 1)
		}
		p, rec, err := a.m.Project(now, req)
		if err != nil {
			ctx.Send(env.sender, err)
			return
		}
		a.answer(ctx, env.sender, &ModelListing{CatalogHash: rec.Event.CatalogHash, Projection: p, Degraded: degraded(a.m.Degraded())}, a.emit(rec))
		a.afterOp(ctx)
	case *listNamespaces:
		ns, err := a.m.ListNamespaces()
		if err != nil {
			ctx.Send(env.sender, err)
			return
		}
		ctx.Send(env.sender, &ns)
		a.afterOp(ctx)
	case *describeTurn:
		acc := a.m.Access()
		ctx.Send(env.sender, &TurnInfo{TurnID: a.turnID, CatalogHash: a.m.Registry().Hash(), Tenant: acc.Tenant, Principal: acc.Principal,
			CredentialProfile: acc.CredentialProfile, Attributes: acc.Attributes, Steps: a.m.Steps(), StepCeiling: a.sh.opts.StepCeiling})
		a.afterOp(ctx)
	case *invokeTool:
		a.invoke(ctx, env.sender, msg, now)
	}
}

func degraded(sts []audit.ProviderStatus) []ProviderStatus {
	if len(sts) == 0 {
		return nil
	}
	out := make([]ProviderStatus, len(sts))
	for i, st := range sts {
		msg := st.Error
		if st.Status == "partial" {
			msg = truncate(strings.Join(st.Refused, "; "), 1024)
		}
		out[i] = ProviderStatus{Provider: st.Provider, Status: st.Status, Reason: st.Reason, Error: msg}
	}
	return out
}

func accessOf(msg any) authority.AccessContext {
	switch m := msg.(type) {
	case *listTools:
		return m.access
	case *projectTools:
		return m.access
	case *listNamespaces:
		return m.access
	case *updateNamespaces:
		return m.access
	case *invokeTool:
		return m.access
	case *describeTurn:
		return m.access
	}
	return authority.AccessContext{}
}

// startResolution asks the authority source and every provider, off the
// mailbox; the answer comes back as *resolved. The ports are asked with
// the context of the operation that first needed the catalogue: its
// instant, and the namespaces the turn has enabled then.
func (a *turnActor) startResolution(ctx actor.Context, first authority.AccessContext) {
	root, self := ctx.ActorSystem().Root, ctx.Self()
	access := a.m.Access()
	access.Now = a.now()
	access.EnabledNamespaces = a.m.Namespaces()
	access.Attributes = first.Attributes
	go func() {
		res := resolve(context.Background(), a.sh, access)
		root.Send(self, &resolved{res: res})
	}()
}

// replyMargin is how much of a caller's remaining time an execution leaves
// for recording the completion and answering: a twentieth, within [1ms, 250ms].
func replyMargin(remaining time.Duration) time.Duration {
	return min(max(remaining/20, time.Millisecond), 250*time.Millisecond)
}

func (a *turnActor) invoke(ctx actor.Context, sender *actor.PID, msg *invokeTool, now time.Time) {
	// The execution's deadline: the earlier of CallTimeout and the
	// caller's own deadline less a margin to record and answer. A call
	// whose caller's deadline already passed is not decided at all.
	wall := time.Now()
	execDeadline, callerBound := wall.Add(a.sh.opts.CallTimeout), false
	if !msg.deadline.IsZero() {
		if cd := msg.deadline.Add(-replyMargin(msg.deadline.Sub(wall))); cd.Before(execDeadline) {
			execDeadline, callerBound = cd, true
		}
	}
	var key string
	var fp [32]byte
	if msg.requestID != "" && !a.oneOp {
		key, fp = requestKey(msg.access.LeaseID, msg.requestID), callFingerprint(msg.inv.Alias, msg.inv.Arguments)
		if a.replay(ctx, sender, key, fp) {
			return
		}
	}
	if a.fetchApproval(ctx, sender, msg) {
		return
	}
	inv := msg.inv
	inv.Late = callerBound && !wall.Before(execDeadline)
	d, rec := a.m.Decide(now, inv)
	var receipt audit.Receipt
	if rec != nil {
		receipt = a.emit(rec)
	}
	if d.Err != nil {
		var answer any = d.Err
		if rec != nil {
			ce := &CallError{Err: d.Err, CallID: d.CallID, CatalogHash: rec.Event.CatalogHash, Dispatch: NotDispatched}
			if d.Request != nil {
				ce.Approval = &approval.State{Request: *d.Request, Status: approval.Pending}
				if st := inv.Approval; st != nil && st.ID == d.Request.ID {
					ce.Approval = st
				}
			}
			answer = ce
		}
		if d.NewRequest {
			// The request is recorded after the refusal that made it,
			// and stored once both records are.
			first := receipt
			receipt = a.emit(a.m.ApprovalRequested(now, *d.Request))
			a.storeRequest(ctx, sender, *d.Request, answer, first, receipt)
		} else {
			a.answer(ctx, sender, answer, receipt)
		}
		a.afterOp(ctx)
		return
	}
	p := a.sh.provs.Load().byID[d.Tool.Identity.Provider] // nil: retired since the turn resolved (execute)
	access := msg.access
	access.Now, access.LeaseID = now, "" // a lease is never shown to a provider
	call := providers.Call{
		Access: access, CallID: d.CallID, Tool: d.Tool.Identity, Revision: d.Tool.Revision, Token: d.Tool.Token,
		Arguments: msg.inv.Arguments, Resource: d.Resource, CatalogHash: rec.Event.CatalogHash, Node: a.sh.opts.Node,
	}
	parent := context.Background()
	if msg.span.IsValid() {
		parent = trace.ContextWithSpanContext(parent, msg.span)
	}
	cctx, cancel := context.WithDeadline(parent, execDeadline)
	pc := &pendingCall{sender: sender, cancel: cancel, catalogHash: rec.Event.CatalogHash, key: key}
	if a.calls == nil {
		a.calls = map[string]*pendingCall{}
	}
	a.calls[d.CallID] = pc
	if key != "" {
		a.keyedStarted(key, fp, d.CallID)
	}
	root, self, maxResult, earlier := ctx.ActorSystem().Root, ctx.Self(), a.sh.opts.MaxReplyBytes-ReplyOverhead, a.pendingBefore(receipt)
	store, consume := a.sh.opts.Approvals.Store, d.Approval != nil && !a.sh.opts.Switches.NoApprovalBinding
	a.sh.pool.Go(func() {
		defer cancel()
		c := &completed{comp: turn.Completion{CallID: call.CallID}}
		callerGone := func() bool { return callerBound && errors.Is(cctx.Err(), context.DeadlineExceeded) }
		// Record before effect: a tool runs only once its tool.invoked,
		// and every record of the turn before it, is stored.
		if err := waitAll(cctx, earlier, receipt); err != nil {
			if callerGone() {
				c.comp.Err = reason.New(reason.DeadlineExceeded, "the caller's deadline passed before tool.invoked was stored; the call did not run")
			} else {
				c.comp.Err = reason.New(reason.AuditUnavailable, "audit did not store tool.invoked; the call did not run: %v", err)
				c.unrecorded = true
			}
			root.Send(self, c)
			return
		}
		// Consume before effect: the approval is used (at the revision
		// the decision read) before the tool runs; if another call, on
		// any node, used or changed it first, this one does not run.
		if consume {
			if err := store.Use(cctx, access.Tenant, d.Approval.ID, d.ApprovalRev, call.CallID, now); err != nil {
				c.comp.Err = reason.New(reason.ApprovalInvalid, "approval %s was not consumed (used or changed elsewhere, or the store did not answer); the call did not run: %v", d.Approval.ID, err)
				root.Send(self, c)
				return
			}
		}
		pc.dispatched.Store(true)
		res, err := execute(cctx, p, call)
		if errors.Is(err, providers.ErrNotDispatched) {
			pc.dispatched.Store(false) // the provider says it never sent it
		}
		n := res.Size()
		switch {
		case err != nil && callerGone() && !pc.dispatched.Load():
			c.comp.Err = reason.New(reason.DeadlineExceeded, "the caller's deadline passed before %s was sent; the call did not run", call.Tool)
		case err != nil && callerGone():
			c.comp.Err = reason.New(reason.DeadlineExceeded, "the caller's deadline passed while %s ran; it may have taken effect", call.Tool)
		case err != nil:
			c.comp.Err = providers.ClassifiedError(call.Tool.Provider, err)
		case maxResult > 0 && n > maxResult:
			c.comp.Err = reason.New(reason.ResultTooLarge, "%s returned %d bytes; a reply carries at most %d", call.Tool, n, maxResult)
			c.comp.ResultLen = n
		default:
			c.result, c.comp.IsError, c.comp.ResultLen = res, res.IsError, n
		}
		root.Send(self, c)
	})
}

// fetchApproval reads, off the mailbox, the approval the turn must know
// of before deciding msg (turn.Machine.ApprovalFor) and brings msg back
// with it (approvalFetched); it reports whether it did. A message that
// comes back is decided at its own later instant.
func (a *turnActor) fetchApproval(ctx actor.Context, sender *actor.PID, msg *invokeTool) bool {
	store := a.sh.opts.Approvals.Store
	if store == nil || msg.fetched {
		return false
	}
	id := a.m.ApprovalFor(msg.inv)
	if id == "" {
		return false
	}
	again := *msg
	again.fetched = true
	root, self, tenant, timeout := ctx.ActorSystem().Root, ctx.Self(), msg.access.Tenant, a.sh.opts.CallTimeout
	a.sh.pool.Go(func() {
		rctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		f := &approvalFetched{sender: sender, msg: &again}
		st, rev, err := store.Get(rctx, tenant, id)
		switch {
		case err == nil:
			again.inv.Approval, again.inv.ApprovalRev = &st, rev
		case !errors.Is(err, approval.ErrNotFound):
			f.err = err
		}
		root.Send(self, f)
	})
	return true
}

// storeRequest stores a new approval request once the records of its
// refusal are, then answers the caller the refusal that names it: an
// approver can decide a request only once its turn's record of it is in
// the trail, and a caller is never told of a request that is not stored.
func (a *turnActor) storeRequest(ctx actor.Context, sender *actor.PID, req approval.Request, answer any, receipts ...audit.Receipt) {
	root, self, store, timeout := ctx.ActorSystem().Root, ctx.Self(), a.sh.opts.Approvals.Store, a.sh.opts.CallTimeout
	a.sh.pool.Go(func() {
		wctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		for _, receipt := range receipts {
			if err := audit.Wait(wctx, receipt); err != nil {
				root.Send(self, &requestStored{id: req.ID, err: err})
				root.Send(sender, answerOrAuditError(answer, err))
				return
			}
		}
		err := store.Put(wctx, req)
		root.Send(self, &requestStored{id: req.ID, err: err})
		if err != nil {
			root.Send(sender, reason.New(reason.Internal, "approval request %s could not be stored; the call did not run: %v", req.ID, err))
			return
		}
		root.Send(sender, answer)
	})
}

// execute runs the provider's Invoke, turning a panic into a provider error.
func execute(ctx context.Context, p providers.ContextToolProvider, call providers.Call) (res providers.Result, err error) {
	if p == nil {
		return providers.Result{}, providers.NotDispatched(reason.New(reason.ProviderUnavailable,
			"provider %s was retired since the turn resolved its catalogue", call.Tool.Provider))
	}
	defer func() {
		if r := recover(); r != nil {
			err = reason.New(reason.ProviderError, "provider %s panicked: %v", p.ID(), r)
		}
	}()
	return p.Invoke(ctx, call)
}

func (a *turnActor) complete(ctx actor.Context, msg *completed) {
	pc, ok := a.calls[msg.comp.CallID]
	if !ok {
		a.sh.log.Error("turn: completion for a call not in flight", "turn", a.turnID, "call", msg.comp.CallID)
		return
	}
	delete(a.calls, msg.comp.CallID)
	now := a.now()
	rec, err := a.m.Complete(now, msg.comp)
	if err != nil {
		a.sh.log.Error("turn: completion", "turn", a.turnID, "err", err)
		return
	}
	// What the answer waits for: the records of the turn before the
	// completion, and the completion itself only with AwaitCompletion.
	// Without it the completion is stored before anything later of the
	// turn is answered or run (every later answer waits for it), one
	// stored commit per call instead of two. A call whose tool.invoked
	// was not stored is answered that failure at once: nothing ran, and
	// no record of it is outstanding that its caller must wait for.
	earlier := slices.Clone(a.unconfirmed)
	receipt := a.emit(rec)
	answerAfter := audit.Completed(nil)
	if a.sh.opts.AwaitCompletion && !msg.unrecorded {
		answerAfter = receipt
	}
	if msg.unrecorded {
		earlier = nil
	}
	var ans any
	if msg.comp.Err != nil {
		ans = &CallError{Err: msg.comp.Err, CallID: msg.comp.CallID, CatalogHash: rec.Event.CatalogHash, Dispatch: pc.dispatch()}
	} else {
		c := rec.Event.Call
		ans = &CallResult{
			CallID: c.ID, CatalogHash: rec.Event.CatalogHash, Alias: c.Alias,
			Identity: catalog.Identity{Provider: c.Provider, Name: c.Name},
			Result:   msg.result, Duration: time.Duration(rec.Event.Call.Duration) * time.Microsecond,
		}
	}
	a.reply(ctx, pc.sender, ans, earlier, answerAfter)
	if pc.key != "" {
		a.keyedDone(ctx, pc.key, ans, earlier, answerAfter)
	}
	if a.m.Closed() && a.m.InFlight() == 0 {
		a.finish(ctx, a.why)
		return
	}
	a.afterOp(ctx)
}

// afterOp closes a turn of one operation once its operation is answered.
func (a *turnActor) afterOp(ctx actor.Context) {
	if a.oneOp && a.m.InFlight() == 0 && len(a.stash) == 0 && !a.m.Closed() {
		a.m.BeginClose()
		a.finish(ctx, "one_operation")
	}
}

func (a *turnActor) beginClose(ctx actor.Context, sender *actor.PID, why string) {
	if sender != nil {
		a.closers = append(a.closers, sender)
	}
	if a.why == "" {
		a.why = why
	}
	if a.m.BeginClose() {
		a.finish(ctx, a.why)
	}
}

// finish records turn.closed and answers whoever asked to close. A named
// turn then lingers, answering turn_closed, before it stops: protoactor
// drops (without a dead-letter reply) messages that reach an actor while
// it stops, so stopping at once would leave a racing caller waiting for
// its deadline. After the linger, callers get a dead letter, which the
// kernel turns into turn_closed from the directory's tombstones.
func (a *turnActor) finish(ctx actor.Context, why string) {
	receipt := audit.Completed(nil)
	if rec := a.m.Finish(a.now(), why); rec != nil {
		receipt = a.emit(rec)
	}
	a.closedReceipt = receipt
	if ctx.Parent() != nil {
		ctx.Send(ctx.Parent(), &turnFinished{turnID: a.turnID})
	}
	for _, c := range a.closers {
		a.answer(ctx, c, true, receipt)
	}
	a.closers = nil
	if a.oneOp {
		ctx.Stop(ctx.Self())
		return
	}
	// The lingering actor answers turn_closed and nothing else: let the
	// held registry, authority and chain go now.
	a.m, a.stash = nil, nil
	a.behavior.Become(a.finished)
	// The linger is a timer of the turn's own, not protoactor's receive
	// timeout: that one's timer goroutine reads the actor's context
	// without a lock while a stopping actor clears it (a data race when
	// the kernel stops with turns lingering).
	root, self := ctx.ActorSystem().Root, ctx.Self()
	a.linger = time.AfterFunc(a.sh.opts.Linger, func() { root.Send(self, lingerOver{}) })
}

// lingerOver ends a finished turn's linger.
type lingerOver struct{}

// finished answers every operation turn_closed until the linger passes.
func (a *turnActor) finished(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case lingerOver:
		ctx.Stop(ctx.Self())
	case *actor.Stopping:
		a.linger.Stop()
	case *actor.Started, *actor.Stopped, *actor.Restarting:
	case *closeTurn, *releaseLease:
		// Answered once turn.closed is stored, like the close that did it.
		a.answer(ctx, ctx.Sender(), true, a.closedReceipt)
	case *completed:
		// Cannot happen: a turn finishes only with nothing in flight.
		a.sh.log.Error("turn: completion after close", "turn", a.turnID, "call", msg.comp.CallID)
	case *invokeTool:
		if !a.replayRetry(ctx, ctx.Sender(), msg) {
			ctx.Respond(reason.New(reason.TurnClosed, "turn %s is closed", a.turnID))
		}
	case *approvalFetched:
		ctx.Send(msg.sender, reason.New(reason.TurnClosed, "turn %s is closed", a.turnID))
	case *requestStored:
	default:
		if ctx.Sender() != nil {
			ctx.Respond(reason.New(reason.TurnClosed, "turn %s is closed", a.turnID))
		}
	}
}

// replayRetry answers a retry of a keyed call the turn already decided,
// from a turn that takes no new operations (closed, or failed for its
// audit): a client that resent its call gets the first answer, not a
// refusal that hides it. It reports false for anything else: a call
// without a request id, one the turn never saw, or one from a caller
// that does not hold the lease it names.
func (a *turnActor) replayRetry(ctx actor.Context, sender *actor.PID, msg *invokeTool) bool {
	if msg.requestID == "" || a.oneOp || !a.holds(msg.access.LeaseID, msg.access.Caller) {
		return false
	}
	return a.replay(ctx, sender, requestKey(msg.access.LeaseID, msg.requestID), callFingerprint(msg.inv.Alias, msg.inv.Arguments))
}

// answer sends msg to the caller once receipt, and every record of the
// turn emitted before it, is stored: nothing reaches a caller before the
// record of it and the chain leading to it are. If the sink could not
// store one the caller gets audit_unavailable instead (the sink completes
// receipts successfully when configured to fail open).
func (a *turnActor) answer(ctx actor.Context, sender *actor.PID, msg any, receipt audit.Receipt) {
	if sender == nil {
		return
	}
	a.reply(ctx, sender, msg, a.pendingBefore(receipt), receipt)
}

// pendingBefore is what of the turn's unconfirmed records was emitted
// before r (r itself is the last of them when it is pending): nil in the
// common case, where everything earlier is known stored.
func (a *turnActor) pendingBefore(r audit.Receipt) []audit.Receipt {
	u := a.unconfirmed
	if n := len(u); n > 0 && u[n-1] == r {
		u = u[:n-1]
	}
	if len(u) == 0 {
		return nil
	}
	return slices.Clone(u)
}

// reply sends msg to sender once every receipt of earlier and receipt
// completed, or audit_unavailable if one failed. The common case —
// everything already complete — answers at once; otherwise a worker
// waits, at most CallTimeout.
func (a *turnActor) reply(ctx actor.Context, sender *actor.PID, msg any, earlier []audit.Receipt, receipt audit.Receipt) {
	if sender == nil {
		return
	}
	if len(earlier) == 0 {
		select {
		case <-receipt.Done():
			ctx.Send(sender, answerOrAuditError(msg, receipt.Err()))
			return
		default:
		}
	}
	root, timeout := ctx.ActorSystem().Root, a.sh.opts.CallTimeout
	a.sh.pool.Go(func() {
		wctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		root.Send(sender, answerOrAuditError(msg, waitAll(wctx, earlier, receipt)))
	})
}

// waitAll waits for every receipt of earlier, then last, and returns the
// first failure, or ctx's error once it ends.
func waitAll(ctx context.Context, earlier []audit.Receipt, last audit.Receipt) error {
	for _, r := range earlier {
		if err := audit.Wait(ctx, r); err != nil {
			return err
		}
	}
	return audit.Wait(ctx, last)
}

func answerOrAuditError(msg any, err error) any {
	if err == nil {
		return msg
	}
	return reason.New(reason.AuditUnavailable, "the audit stream did not store this operation's record: %v", err)
}

func (a *turnActor) emit(rec *audit.Record) audit.Receipt {
	r := a.sh.opts.Sink.Emit(rec)
	select {
	case <-r.Done():
		if r.Err() != nil {
			a.failed = true
		}
	default:
		a.unconfirmed = append(a.unconfirmed, r)
	}
	return r
}

// checkReceipts notices a record the audit stream did not store. From then
// on the turn's chain has a hole, so the turn fails closed: it takes no
// more operations (they are refused audit_unavailable) and closes as soon
// as nothing is in flight, rather than carrying on past a record it could
// not keep. (A sink configured to fail open completes receipts without
// error, and never gets here.)
func (a *turnActor) checkReceipts(ctx actor.Context) {
	if len(a.unconfirmed) > 0 {
		kept := a.unconfirmed[:0]
		for _, r := range a.unconfirmed {
			select {
			case <-r.Done():
				if r.Err() != nil {
					a.failed = true
				}
			default:
				kept = append(kept, r)
			}
		}
		clear(a.unconfirmed[len(kept):])
		a.unconfirmed = kept
	}
	if a.failed && a.m != nil && !a.m.Closed() {
		a.sh.log.Error("turn: the audit stream did not store a record; closing the turn", "turn", a.turnID)
		a.beginClose(ctx, nil, "audit_unavailable")
	}
}
