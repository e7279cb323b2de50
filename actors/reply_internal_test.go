package actors

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// A reply slot is reused by one request after another; an answer to a
// request whose caller gave up is dropped, never read by the next request
// on the same slot, and a target that does not exist is answered with a
// dead letter through the slot.
func TestReplySlotDropsAnswersToEarlierRequests(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	r := newReplies(sys.ProcessRegistry)

	s1, late := r.take()
	r.give(s1) // the caller gave up
	s2, now := r.take()
	if s2 != s1 {
		t.Fatal("an idle slot was not reused")
	}
	if late.RequestId == now.RequestId {
		t.Fatal("two requests on one slot share a request id")
	}
	sys.Root.Send(late, "late answer")
	sys.Root.Send(now, "answer")
	sys.Root.Send(now, "second answer")
	if got := <-s2.ch; got != "answer" {
		t.Fatalf("got %v, want the answer to the current request", got)
	}
	select {
	case got := <-s2.ch:
		t.Fatalf("a slot holds one answer; got another: %v", got)
	default:
	}
	r.give(s2)
	sys.Root.Send(now, "after give") // dropped: the slot is free
	s3, _ := r.take()
	select {
	case got := <-s3.ch:
		t.Fatalf("a taken slot held an answer to an earlier request: %v", got)
	default:
	}

	r.give(s3)
	s4, self := r.take()
	sys.Root.RequestWithCustomSender(actor.NewPID(sys.Address(), "nobody"), "hello", self)
	select {
	case got := <-s4.ch:
		if _, dead := got.(*actor.DeadLetterResponse); !dead {
			t.Fatalf("a request to a missing target was answered %v, want a dead letter", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a request to a missing target was not answered")
	}
	r.give(s4)
}

// Slots beyond the idle bound leave the registry when given back.
func TestReplySlotsBeyondTheIdleBoundLeaveTheRegistry(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	r := newReplies(sys.ProcessRegistry)
	slots := make([]*replySlot, maxIdleReplies+2)
	pids := make([]*actor.PID, len(slots))
	for i := range slots {
		slots[i], pids[i] = r.take()
	}
	for _, s := range slots {
		r.give(s)
	}
	if n := len(r.idle); n != maxIdleReplies {
		t.Fatalf("%d idle slots, want %d", n, maxIdleReplies)
	}
	gone := 0
	for _, pid := range pids {
		if _, ok := sys.ProcessRegistry.Get(pid); !ok {
			gone++
		}
	}
	if gone != 2 {
		t.Fatalf("%d slots left the registry, want 2", gone)
	}
}
