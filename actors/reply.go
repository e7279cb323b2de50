package actors

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// replyProcess is where one kernel request's answer arrives: a process
// in the actor system's registry whose PID is the request's sender, with
// room for exactly one message. The caller waits on it with its own
// context and removes it when done; an answer that comes later is dropped
// here (or, once removed, by the dead-letter process).
//
// It replaces protoactor's Future on the request path: a Future that timed
// out is still written by a late answer without its lock while Result
// reads it — a data race the race detector finds under load (300 callers
// with 50 ms deadlines).
type replyProcess struct{ ch chan any }

var _ actor.Process = (*replyProcess)(nil)

func (p *replyProcess) SendUserMessage(_ *actor.PID, message any) {
	_, msg, _ := actor.UnwrapEnvelope(message)
	select {
	case p.ch <- msg:
	default: // already answered
	}
}

func (p *replyProcess) SendSystemMessage(*actor.PID, any) {}

func (p *replyProcess) Stop(*actor.PID) {}

// ask sends msg to pid and waits for the answer until ctx is done (and at
// most max when ctx has no deadline). A target that does not exist answers
// actor.ErrDeadLetter.
func (k *Kernel) ask(ctx context.Context, pid *actor.PID, msg any, max time.Duration) (any, error) {
	reg := k.system.ProcessRegistry
	rp := &replyProcess{ch: make(chan any, 1)}
	self, _ := reg.Add(rp, "reply"+reg.NextId())
	defer reg.Remove(self)
	k.system.Root.RequestWithCustomSender(pid, msg, self)
	var timeout <-chan time.Time
	if _, ok := ctx.Deadline(); !ok {
		t := time.NewTimer(max)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case res := <-rp.ch:
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
