package actors

import (
	"fmt"

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
type directory struct {
	sh       *shared
	turns    map[string]*lease
	byPID    map[string]string // child PID id -> turn id
	closed   tombstones
	draining *closeAllWaiter
}

type lease struct {
	pid     *actor.PID
	key     string
	holders map[string]struct{}
	closing bool
}

type closeAllWaiter struct{ sender *actor.PID }

func newDirectory(sh *shared) *directory {
	return &directory{sh: sh, turns: map[string]*lease{}, byPID: map[string]string{}, closed: newTombstones(65536)}
}

func (d *directory) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
	case *openTurn:
		ctx.Respond(d.open(ctx, msg.access))
	case *releaseLease:
		d.release(ctx, msg)
	case *idleExpired:
		if l, ok := d.turns[msg.turnID]; ok && !l.closing {
			l.closing = true
			ctx.Send(l.pid, &closeTurn{why: "idle"})
		}
	case *turnFinished:
		d.retire(msg.turnID)
		d.maybeDrained(ctx)
	case *actor.Terminated:
		// Normally the turn said it finished; a turn stopped by its
		// supervisor (a panic) did not, and is retired here.
		if id, ok := d.byPID[msg.Who.Id]; ok {
			delete(d.byPID, msg.Who.Id)
			d.retire(id)
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
	default:
		d.sh.log.Warn("directory: unexpected message", "type", fmt.Sprintf("%T", msg))
	}
}

func (d *directory) open(ctx actor.Context, access authority.AccessContext) any {
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
		id := randomID()
		l.holders[id] = struct{}{}
		return &Opened{TurnID: access.TurnID, LeaseID: id, Attached: true}
	}
	if d.closed.has(access.TurnID) {
		return reason.New(reason.TurnClosed, "turn %s was closed; turn ids are not reused", access.TurnID)
	}
	if len(d.turns) >= d.sh.opts.MaxTurns {
		return reason.New(reason.Overloaded, "node %s holds %d open turns", d.sh.opts.Node, len(d.turns))
	}
	pid, err := ctx.SpawnNamed(turnProps(d.sh, access, false), access.TurnID)
	if err != nil {
		return reason.New(reason.Internal, "spawning turn %s: %v", access.TurnID, err)
	}
	id := randomID()
	d.turns[access.TurnID] = &lease{pid: pid, key: key, holders: map[string]struct{}{id: {}}}
	d.byPID[pid.Id] = access.TurnID
	return &Opened{TurnID: access.TurnID, LeaseID: id}
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
	delete(l.holders, msg.leaseID)
	if len(l.holders) > 0 || l.closing {
		ctx.Respond(true)
		return
	}
	l.closing = true
	// The turn answers the caller itself, once turn.closed is recorded.
	ctx.RequestWithCustomSender(l.pid, &closeTurn{why: "released"}, ctx.Sender())
}

// retire forgets an open turn and remembers that its id was closed.
func (d *directory) retire(turnID string) {
	if _, ok := d.turns[turnID]; ok {
		delete(d.turns, turnID)
		d.closed.add(turnID)
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
