package workpool_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/sharedos/sharedos/internal/workpool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunsEverythingAndNeverBlocks(t *testing.T) {
	p := workpool.New(2)
	block := make(chan struct{})
	var ran atomic.Int32
	var wg sync.WaitGroup
	// More blocking functions than workers: Go must still return for each.
	for range 10 {
		wg.Add(1)
		p.Go(func() {
			defer wg.Done()
			<-block
			ran.Add(1)
		})
	}
	close(block)
	wg.Wait()
	if ran.Load() != 10 {
		t.Fatalf("ran %d of 10", ran.Load())
	}
	p.Close()
	p.Close()
	done := make(chan struct{})
	p.Go(func() { close(done) })
	<-done
}
