package actors

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharedos/sharedos/internal/workpool"
)

// recordingInvoker counts the messages a mailbox delivers and fails the
// test if two runs of the mailbox ever overlap.
type recordingInvoker struct {
	t       *testing.T
	running atomic.Int32
	n       atomic.Int64
	last    atomic.Pointer[completed]
}

func (r *recordingInvoker) InvokeSystemMessage(any) {}

func (r *recordingInvoker) InvokeUserMessage(msg any) {
	if r.running.Add(1) != 1 {
		r.t.Error("two runs of one mailbox overlapped")
	}
	if c, ok := msg.(*completed); ok {
		r.last.Store(c)
	}
	r.n.Add(1)
	runtime.Gosched() // a run that overlapped this one would be inside by now
	r.running.Add(-1)
}

func (r *recordingInvoker) EscalateFailure(reason, _ any) { r.t.Errorf("failure: %v", reason) }

// A completion posted to an idle turn mailbox is processed on the
// poster's goroutine before the post returns (no hand-off to a worker);
// anything else is run on the pool.
func TestTurnMailboxRunsACompletionOnItsPoster(t *testing.T) {
	pool := workpool.New(2)
	defer pool.Close()
	inv := &recordingInvoker{t: t}
	mb := newTurnMailbox(pool, 300)()
	mb.RegisterHandlers(inv, nil)
	c := &completed{}
	mb.PostUserMessage(c)
	if inv.n.Load() != 1 || inv.last.Load() != c {
		t.Fatal("the completion was not processed before its post returned")
	}
	mb.PostUserMessage("other")
	for deadline := time.Now().Add(10 * time.Second); inv.n.Load() != 2; {
		if time.Now().After(deadline) {
			t.Fatal("a message posted from outside was never processed")
		}
		time.Sleep(time.Millisecond)
	}
}

// Completions and other messages posted at once from many goroutines —
// the mailbox going idle now and then, so that a completion runs it on its
// poster while others post — are each processed exactly once, and the
// mailbox never runs twice at once.
func TestTurnMailboxUnderConcurrentPosts(t *testing.T) {
	pool := workpool.New(4)
	defer pool.Close()
	inv := &recordingInvoker{t: t}
	mb := newTurnMailbox(pool, 3)()
	mb.RegisterHandlers(inv, nil)
	const posters, each = 8, 2000
	var posted atomic.Int64
	var wg sync.WaitGroup
	for range posters {
		wg.Go(func() {
			for i := range each {
				posted.Add(1)
				if i%2 == 0 {
					mb.PostUserMessage(&completed{})
				} else {
					mb.PostUserMessage(i)
				}
				if i%4 == 1 { // let the mailbox go idle: the completion posted next runs it
					for inv.n.Load() < posted.Load() {
						runtime.Gosched()
					}
				}
			}
		})
	}
	wg.Wait()
	for deadline := time.Now().Add(10 * time.Second); inv.n.Load() != posters*each; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages processed", inv.n.Load(), posters*each)
		}
		time.Sleep(time.Millisecond)
	}
}
