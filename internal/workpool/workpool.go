// Package workpool runs short functions on long-lived goroutines.
//
// Why: the turns' mailboxes (actors/mailbox.go) and the kernel's tool
// executions each need a goroutine to run on, over and over. A new goroutine
// starts on a small stack, and the kernel's work (schema validation, audit
// encoding) grows it every time: in the mediated-call profile, stack
// copying was 30% of CPU. Workers here keep their grown stacks.
//
// Go never blocks: it hands fn to an idle worker if one is waiting and
// otherwise starts a goroutine, so a pool can neither deadlock nor starve
// a slow execution; it only makes the common case cheaper.
package workpool

import "sync"

// Pool is a set of idle workers. Safe for concurrent use.
type Pool struct {
	work chan func()
	quit chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// New starts a pool of n workers.
func New(n int) *Pool {
	p := &Pool{work: make(chan func()), quit: make(chan struct{})}
	p.wg.Add(n)
	for range n {
		go p.worker()
	}
	return p
}

func (p *Pool) worker() {
	defer p.wg.Done()
	for {
		select {
		case fn := <-p.work:
			fn()
		case <-p.quit:
			return
		}
	}
}

// Go runs fn on an idle worker, or on a new goroutine if none is idle.
func (p *Pool) Go(fn func()) {
	select {
	case p.work <- fn:
	default:
		go fn()
	}
}

// Close stops the workers once they finish what they run, and waits for
// them. Go keeps working after Close (on new goroutines). Idempotent.
func (p *Pool) Close() {
	p.once.Do(func() { close(p.quit) })
	p.wg.Wait()
}
