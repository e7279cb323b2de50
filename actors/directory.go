package actors

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/reason"
)

// directory owns the node's leases: which turns are open, under which
// authority key, and which leases hold each. It spawns turn actors as its
// children, named by turn id, so operations reach a turn by name without
// asking the directory. It remembers recently closed turn ids so that an
// operation on one is told turn_closed, and a closed id is never reopened
// as a second turn with a second chain.
//
// It also closes idle turns: a turn counts the messages it receives, and a
// sweep every IdleTimeout/idleSweeps closes the turns whose count did not
// move for idleSweeps sweeps in a row — idle for at least IdleTimeout, at
// most a quarter more. (One timer for the node rather than a receive
// timeout per turn, which cost every idle turn a timer and the actor
// context's extras: a sixth of its memory.) A lease is not a keep-alive:
// a turn nobody operated on for IdleTimeout closes whether or not leases
// are still held (a holder that went quiet is indistinguishable from one
// that died), and its holders are told turn_closed. Releasing the last
// lease of a turn that is already closing answers once turn.closed is
// stored, like any close.
type directory struct {
	sh     *shared
	turns  map[string]*entry
	closed tombstones
	// perPrincipal counts each principal's open turns (both kinds).
	perPrincipal map[string]int
	draining     *closeAllWaiter
	sweep        *time.Timer
}

// idleSweeps is how many sweeps an idle turn must sit through.
const idleSweeps = 4

// entry is what the directory knows of an open turn (the turn itself holds its
// leases). A turn's child PID id is "turns/<turn id>", so the PID leads back
// to the entry without a map.
type entry struct {
	pid       *actor.PID
	key       string
	principal string // tenant and principal, for MaxTurnsPerPrincipal
	closing   bool
	// oneOp marks a turn of one operation: counted against MaxTurns and
	// closed at shutdown like any turn, but holding no leases and leaving
	// no tombstone (nobody can name it again).
	oneOp bool
	// activity is the turn's message count (the turn adds to it); seen is
	// its value at the last sweep, still the sweeps since it last moved.
	activity atomic.Uint32
	seen     uint32
	still    uint8
}

type closeAllWaiter struct{ sender *actor.PID }

func newDirectory(sh *shared) *directory {
	return &directory{sh: sh, turns: map[string]*entry{}, closed: newTombstones(65536), perPrincipal: map[string]int{}}
}

func (d *directory) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		root, self := ctx.ActorSystem().Root, ctx.Self()
		if d.sweep == nil {
			d.sweep = time.AfterFunc(d.sweepEvery(), func() { root.Send(self, &sweepIdle{}) })
		}
	case *actor.Stopping:
		if d.sweep != nil {
			d.sweep.Stop()
		}
	case *actor.Stopped, *actor.Restarting:
	case *sweepIdle:
		d.closeIdle(ctx)
		d.sweep.Reset(d.sweepEvery())
	case *openTurn:
		if res := d.open(ctx, msg.access, msg.attach); res != nil {
			ctx.Respond(res)
		}
	case *oneOperation:
		d.runOneOperation(ctx, msg)
	case *releaseLease:
		d.release(ctx, msg)
	case *turnFinished:
		d.retire(msg.turnID)
		d.maybeDrained(ctx)
	case *actor.Terminated:
		// Normally the turn said it finished; a turn stopped by its
		// supervisor (a panic) did not, and is retired here.
		if id, ok := strings.CutPrefix(msg.Who.Id, directoryName+"/"); ok {
			if l, open := d.turns[id]; open && l.pid.Equal(msg.Who) {
				d.retire(id)
			}
		}
		d.maybeDrained(ctx)
	case *closeAll:
		d.draining = &closeAllWaiter{sender: ctx.Sender()}
		for _, l := range d.turns {
			if !l.closing {
				l.closing = true
				ctx.Send(l.pid, &closeTurn{why: "shutdown"})
			}
		}
		d.maybeDrained(ctx)
	case *closedTurn:
		ctx.Respond(d.closed.has(msg.turnID))
	case *turnsSnapshot:
		ctx.Respond(len(d.turns))
	case *listTurns:
		ctx.Respond(d.list(msg))
	default:
		d.sh.log.Warn("directory: unexpected message", "type", fmt.Sprintf("%T", msg))
	}
}

func (d *directory) open(ctx actor.Context, access authority.AccessContext, attach bool) any {
	if d.draining != nil {
		return reason.New(reason.Overloaded, "node %s is shutting down", d.sh.opts.Node)
	}
	key := authority.TurnAuthorityKey(access)
	if l, ok := d.turns[access.TurnID]; ok {
		switch {
		case l.key != key:
			return reason.New(reason.InvalidRequest, "turn id %s is in use by another authority", access.TurnID)
		case l.closing:
			return reason.New(reason.TurnClosed, "turn %s is closing", access.TurnID)
		}
		// The turn owns its leases: it takes the new one, records
		// turn.attached and answers the caller.
		ctx.RequestWithCustomSender(l.pid, &attachLease{access: access}, ctx.Sender())
		return nil
	}
	if d.closed.has(access.TurnID) {
		return reason.New(reason.TurnClosed, "turn %s was closed; turn ids are not reused", access.TurnID)
	}
	if attach {
		// Only the node mints turn ids: an id that is not open here is
		// never opened as a new turn (it may have been closed before a
		// restart; reopening it would give it a second chain).
		return reason.New(reason.TurnNotFound, "no open turn %s on node %s", access.TurnID, d.sh.opts.Node)
	}
	if err := d.admit(access); err != nil {
		return err
	}
	pid, err := ctx.SpawnNamed(d.sh.turnProps, access.TurnID)
	if err != nil {
		return reason.New(reason.Internal, "spawning turn %s: %v", access.TurnID, err)
	}
	id := mintID()
	l := &entry{pid: pid, key: key}
	d.add(access, l)
	// First in the turn's mailbox: nobody can name the turn before this
	// open is answered.
	ctx.Send(pid, &startTurn{access: access, lease: id, activity: &l.activity})
	return &Opened{TurnID: access.TurnID, LeaseID: id}
}

// runOneOperation spawns a turn of one operation and hands it the
// operation, whose answer goes straight to the caller. It counts against
// MaxTurns like any turn: a flood of one-operation requests is refused
// overloaded rather than running without bound.
func (d *directory) runOneOperation(ctx actor.Context, msg *oneOperation) {
	if d.draining != nil {
		ctx.Respond(reason.New(reason.Overloaded, "node %s is shutting down", d.sh.opts.Node))
		return
	}
	if err := d.admit(msg.access); err != nil {
		ctx.Respond(err)
		return
	}
	pid, err := ctx.SpawnNamed(d.sh.turnProps, msg.access.TurnID)
	if err != nil {
		ctx.Respond(reason.New(reason.Internal, "spawning turn %s: %v", msg.access.TurnID, err))
		return
	}
	l := &entry{pid: pid, oneOp: true}
	d.add(msg.access, l)
	ctx.Send(pid, &startTurn{access: msg.access, oneOp: true, activity: &l.activity})
	ctx.RequestWithCustomSender(pid, msg.op, ctx.Sender())
}

func (d *directory) release(ctx actor.Context, msg *releaseLease) {
	l, ok := d.turns[msg.access.TurnID]
	if !ok || l.key != authority.TurnAuthorityKey(msg.access) {
		if ok || !d.closed.has(msg.access.TurnID) {
			ctx.Respond(reason.New(reason.TurnNotFound, "no open turn %s", msg.access.TurnID))
			return
		}
		ctx.Respond(true) // already closed: releasing again is harmless
		return
	}
	// The turn owns its leases: it records turn.detached and, for the
	// last one, closes — answering the caller once turn.closed is stored
	// (also when the release joins a close already under way).
	ctx.RequestWithCustomSender(l.pid, msg, ctx.Sender())
}

func (d *directory) sweepEvery() time.Duration {
	return max(d.sh.opts.IdleTimeout/idleSweeps, time.Millisecond)
}

// closeIdle closes the turns that received nothing for idleSweeps sweeps.
func (d *directory) closeIdle(ctx actor.Context) {
	for _, l := range d.turns {
		if l.closing {
			continue
		}
		if n := l.activity.Load(); n != l.seen {
			l.seen, l.still = n, 0
			continue
		}
		if l.still++; l.still >= idleSweeps {
			l.closing = true
			ctx.Send(l.pid, &closeTurn{why: "idle"})
		}
	}
}

// principalKey is tenant and principal, length-prefixed so no two pairs
// share a key.
func principalKey(a authority.AccessContext) string {
	return strconv.Itoa(len(a.Tenant)) + ":" + a.Tenant + a.Principal
}

// admit refuses a new turn beyond MaxTurns on the node or
// MaxTurnsPerPrincipal for its principal: one principal cannot take the
// node's every turn.
func (d *directory) admit(access authority.AccessContext) error {
	if len(d.turns) >= d.sh.opts.MaxTurns {
		return reason.New(reason.Overloaded, "node %s holds %d open turns", d.sh.opts.Node, len(d.turns))
	}
	if n := d.perPrincipal[principalKey(access)]; n >= d.sh.opts.MaxTurnsPerPrincipal {
		return reason.New(reason.Overloaded, "%s/%s holds %d open turns on node %s", access.Tenant, access.Principal, n, d.sh.opts.Node)
	}
	return nil
}

func (d *directory) add(access authority.AccessContext, l *entry) {
	l.principal = principalKey(access)
	d.turns[access.TurnID] = l
	d.perPrincipal[l.principal]++
}

// retire forgets an open turn and remembers that its id was closed.
func (d *directory) retire(turnID string) {
	if l, ok := d.turns[turnID]; ok {
		delete(d.turns, turnID)
		if d.perPrincipal[l.principal]--; d.perPrincipal[l.principal] <= 0 {
			delete(d.perPrincipal, l.principal)
		}
		if !l.oneOp {
			d.closed.add(turnID)
		}
	}
}

func (d *directory) maybeDrained(ctx actor.Context) {
	if d.draining != nil && d.draining.sender != nil && len(d.turns) == 0 {
		ctx.Send(d.draining.sender, true)
		d.draining.sender = nil
	}
}

// tombstones is a bounded set of recently closed turn ids (FIFO eviction).
type tombstones struct {
	set  map[string]struct{}
	ring []string
	next int
}

func newTombstones(n int) tombstones {
	return tombstones{set: make(map[string]struct{}, n), ring: make([]string, n)}
}

func (t *tombstones) add(id string) {
	if old := t.ring[t.next]; old != "" {
		delete(t.set, old)
	}
	t.ring[t.next] = id
	t.set[id] = struct{}{}
	t.next = (t.next + 1) % len(t.ring)
}

func (t *tombstones) has(id string) bool {
	_, ok := t.set[id]
	return ok
}
