package actors

import (
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sharedos/sharedos/internal/workpool"
)

// turnMailbox is a turn actor's mailbox: protoactor's lock-free mailbox,
// run on the kernel's worker pool, except that an execution that posts
// its completion to an idle mailbox runs that mailbox itself instead of
// handing it to another worker. The execution has finished by then (the
// post is its last act), so executions still never run on the mailbox
// and decisions are still made one at a time (the mailbox lets one run
// at a time, whichever goroutine it is on). It saves one goroutine
// hand-off per call — a wake-up and a park, with a futex call whenever
// another P is idle.
type turnMailbox struct {
	actor.Mailbox
	pool  *workpool.Pool
	batch int
	// claim is how a completing execution takes the mailbox's next run:
	// 0 nobody asks; 1 an execution is posting and would run it; 2 the
	// run was claimed (run holds it). At most one Schedule is in progress
	// per mailbox (it is called only when the mailbox goes from idle to
	// running, and a claimed run has not run yet).
	claim atomic.Int32
	run   func()
}

func newTurnMailbox(pool *workpool.Pool, batch int) actor.MailboxProducer {
	inner := actor.UnboundedLockfree()
	return func() actor.Mailbox {
		return &turnMailbox{Mailbox: inner(), pool: pool, batch: batch}
	}
}

// RegisterHandlers makes the mailbox its own dispatcher.
func (m *turnMailbox) RegisterHandlers(invoker actor.MessageInvoker, _ actor.Dispatcher) {
	m.Mailbox.RegisterHandlers(invoker, m)
}

// Schedule runs the mailbox on the pool, unless a completing execution
// claimed this run.
func (m *turnMailbox) Schedule(fn func()) {
	m.run = fn
	if m.claim.CompareAndSwap(1, 2) {
		return
	}
	m.run = nil
	m.pool.Go(fn)
}

// Throughput is how many messages a run processes before yielding.
func (m *turnMailbox) Throughput() int { return m.batch }

// PostUserMessage posts msg; a completion posted to an idle mailbox is
// followed by the mailbox's run on the poster's goroutine.
func (m *turnMailbox) PostUserMessage(msg any) {
	if _, ok := msg.(*completed); !ok || !m.claim.CompareAndSwap(0, 1) {
		m.Mailbox.PostUserMessage(msg)
		return
	}
	m.Mailbox.PostUserMessage(msg)
	if m.claim.CompareAndSwap(1, 0) {
		return // the mailbox was already running, or someone else scheduled it
	}
	run := m.run
	m.run = nil
	m.claim.Store(0)
	run()
}
