package audit

import (
	"context"
	"slices"
	"sync"
)

// Sink receives encoded events. Each turn hands it its events in chain
// order, from the turn actor. Emit must not block on I/O: it enqueues and
// returns a Receipt that completes when the event is durable (or at once,
// for sinks without durability). Emit is called concurrently by many
// turns. A Sink that cannot take an event returns a Receipt that fails.
type Sink interface {
	Emit(rec *Record) Receipt
}

// Receipt completes when its event is stored, or fails.
type Receipt interface {
	// Done is closed when the outcome is known.
	Done() <-chan struct{}
	// Err is the outcome, valid once Done is closed.
	Err() error
}

// Wait blocks until r completes or ctx ends.
func Wait(ctx context.Context, r Receipt) error {
	select {
	case <-r.Done():
		return r.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

type doneReceipt struct{ err error }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (d doneReceipt) Done() <-chan struct{} { return closedChan }
func (d doneReceipt) Err() error            { return d.err }

// Completed returns a Receipt that is already complete with err.
func Completed(err error) Receipt {
	if err == nil {
		return stored
	}
	return doneReceipt{err: err}
}

var stored Receipt = doneReceipt{}

// Discard is a Sink that drops every event (benchmarks).
type Discard struct{}

// Emit drops rec.
func (Discard) Emit(*Record) Receipt { return stored }

// Memory is an in-memory Sink, safe for concurrent use. Tests read it;
// the single-machine node can serve `audit tail` from it when no stream is
// configured.
type Memory struct {
	mu      sync.Mutex
	records []*Record
	notify  chan struct{}
}

// NewMemory returns an empty Memory sink.
func NewMemory() *Memory { return &Memory{notify: make(chan struct{})} }

// Emit appends rec.
func (m *Memory) Emit(rec *Record) Receipt {
	m.mu.Lock()
	m.records = append(m.records, rec)
	close(m.notify)
	m.notify = make(chan struct{})
	m.mu.Unlock()
	return stored
}

// Records returns a copy of everything emitted so far.
func (m *Memory) Records() []*Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.records)
}

// Events returns the emitted events, optionally only those of one turn.
func (m *Memory) Events(turnID string) []*Event {
	var out []*Event
	for _, r := range m.Records() {
		if turnID == "" || r.Event.TurnID == turnID {
			out = append(out, r.Event)
		}
	}
	return out
}

// WaitFor blocks until pred holds over the records or ctx ends.
func (m *Memory) WaitFor(ctx context.Context, pred func([]*Record) bool) error {
	for {
		m.mu.Lock()
		ok, ch := pred(m.records), m.notify
		m.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
