package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// progressInterval is how often a long command rewrites its progress line.
const progressInterval = time.Second

// isTerminal reports whether w is a terminal: a character device. Pipes
// and regular files are not, so piped or redirected output never carries
// a progress line.
var isTerminal = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progress counts the records a long command (audit export, audit verify)
// has read and, when w is a terminal, rewrites one line on it with the
// count and the rate every progressInterval until stop, which clears the
// line. On anything else it counts and prints nothing. add may be called
// from any goroutine; stop is idempotent and waits for the line's writer,
// so nothing else is written to w meanwhile once it returns.
type progress struct {
	w     io.Writer
	what  string
	start time.Time
	on    bool
	n     atomic.Int64
	quit  chan struct{}
	done  chan struct{}
	once  sync.Once
}

// startProgress starts the progress line of what on w, rewritten on each
// tick; with a nil tick, every progressInterval.
func startProgress(w io.Writer, what string, tick <-chan time.Time) *progress {
	p := &progress{w: w, what: what, start: time.Now(), on: isTerminal(w), quit: make(chan struct{}), done: make(chan struct{})}
	if !p.on {
		close(p.done)
		return p
	}
	var t *time.Ticker
	if tick == nil {
		t = time.NewTicker(progressInterval)
		tick = t.C
	}
	go func() {
		defer close(p.done)
		if t != nil {
			defer t.Stop()
		}
		for {
			select {
			case <-tick:
				p.report()
			case <-p.quit:
				return
			}
		}
	}()
	return p
}

func (p *progress) add(n int) { p.n.Add(int64(n)) }

// report rewrites the progress line; only the line's goroutine calls it.
func (p *progress) report() {
	el := time.Since(p.start)
	n := p.n.Load()
	fmt.Fprintf(p.w, "\r\x1b[Knode: %s: %d records, %d/s, %s", p.what, n, int64(float64(n)/max(el.Seconds(), 1e-9)), el.Truncate(100*time.Millisecond))
}

// stop ends the progress line and clears it.
func (p *progress) stop() {
	p.once.Do(func() {
		close(p.quit)
		<-p.done
		if p.on {
			fmt.Fprint(p.w, "\r\x1b[K")
		}
	})
}
