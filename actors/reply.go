package actors

import (
	"context"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// replySlot is where a kernel request's answer arrives: a process in the
// actor system's registry, registered once and reused by one request
// after another (replies below). The request's sender PID names the slot
// and, in RequestId, the request (the slot's generation): an answer that
// names an earlier request — one whose caller gave up — is dropped, so it
// can never reach a later caller. Room for exactly one answer.
//
// It replaces protoactor's Future on the request path (a Future that
// timed out is still written by a late answer without its lock while
// Result reads it — a data race the race detector finds under load), and
// a process registered and removed per request (the registry's insert and
// delete were 6% of a loaded in-process kernel's CPU).
type replySlot struct {
	id string
	mu sync.Mutex
	// gen is the request the slot answers now; 0 while it is free.
	gen  uint32
	next uint32
	ch   chan any
}

var _ actor.Process = (*replySlot)(nil)

func (s *replySlot) SendUserMessage(pid *actor.PID, message any) {
	_, msg, _ := actor.UnwrapEnvelope(message)
	s.mu.Lock()
	if pid != nil && pid.RequestId == s.gen && s.gen != 0 {
		select {
		case s.ch <- msg:
		default: // already answered
		}
	}
	s.mu.Unlock()
}

func (s *replySlot) SendSystemMessage(*actor.PID, any) {}

func (s *replySlot) Stop(*actor.PID) {}

// replies keeps the kernel's idle reply slots. A slot is taken for one
// request and given back when its caller has the answer or gives up;
// beyond maxIdleReplies idle slots, a returned slot leaves the registry.
type replies struct {
	reg  *actor.ProcessRegistryValue
	idle chan *replySlot
}

const maxIdleReplies = 1024

func newReplies(reg *actor.ProcessRegistryValue) *replies {
	return &replies{reg: reg, idle: make(chan *replySlot, maxIdleReplies)}
}

// take returns a slot and the sender PID that answers it, for one request.
func (r *replies) take() (*replySlot, *actor.PID) {
	var s *replySlot
	select {
	case s = <-r.idle:
	default:
		s = &replySlot{id: "reply" + r.reg.NextId(), ch: make(chan any, 1)}
		r.reg.Add(s, s.id)
	}
	s.mu.Lock()
	s.next++
	if s.next == 0 {
		s.next = 1
	}
	s.gen = s.next
	pid := &actor.PID{Address: r.reg.Address, Id: s.id, RequestId: s.gen}
	s.mu.Unlock()
	return s, pid
}

// give returns a slot: from now on an answer to its last request is dropped.
func (r *replies) give(s *replySlot) {
	s.mu.Lock()
	s.gen = 0
	select {
	case <-s.ch:
	default:
	}
	s.mu.Unlock()
	select {
	case r.idle <- s:
	default:
		r.reg.Remove(&actor.PID{Address: r.reg.Address, Id: s.id})
	}
}

// ask sends msg to pid and waits for the answer until ctx is done (and at
// most max when ctx has no deadline). A target that does not exist answers
// actor.ErrDeadLetter.
func (k *Kernel) ask(ctx context.Context, pid *actor.PID, msg any, max time.Duration) (any, error) {
	s, self := k.replies.take()
	defer k.replies.give(s)
	k.system.Root.RequestWithCustomSender(pid, msg, self)
	var timeout <-chan time.Time
	if _, ok := ctx.Deadline(); !ok {
		t := time.NewTimer(max)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case res := <-s.ch:
		if _, dead := res.(*actor.DeadLetterResponse); dead {
			return nil, actor.ErrDeadLetter
		}
		return res, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timeout:
		return nil, context.DeadlineExceeded
	}
}
