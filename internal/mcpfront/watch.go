package mcpfront

import (
	"sync/atomic"

	"github.com/sharedos/sharedos/audit"
)

// Watch is an audit.Sink in front of the kernel's sink that tells the
// front of every turn.closed, so a closed turn's tokens are refused from
// the moment it closes (not only once an operation finds it closed). The
// kernel is built before the front, so the front is attached after.
// Emit is safe for concurrent use.
type Watch struct {
	next  audit.Sink
	front atomic.Pointer[Front]
}

// NewWatch passes every record on to next.
func NewWatch(next audit.Sink) *Watch { return &Watch{next: next} }

// Attach starts telling f.
func (w *Watch) Attach(f *Front) { w.front.Store(f) }

// Emit passes rec on, noting a turn.closed first.
func (w *Watch) Emit(rec *audit.Record) audit.Receipt {
	if rec.Event != nil && rec.Event.Type == audit.TurnClosed {
		if f := w.front.Load(); f != nil {
			f.TurnClosed(rec.Event.TurnID)
		}
	}
	return w.next.Emit(rec)
}
