package harness

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Params shape a run. Zero values take the defaults named.
type Params struct {
	// Turns is how many turns the run opens (count mode), default 1000.
	// With Duration set it is an upper bound; 0 then means "no bound".
	Turns int `json:"turns"`
	// CallsPerTurn is how many calls each turn makes, one after the
	// other, default 10.
	CallsPerTurn int `json:"calls_per_turn"`
	// Concurrency is how many turns run at once (closed loop: a worker
	// starts its next turn when the last one closed), default 64.
	Concurrency int `json:"concurrency"`
	// Duration, when set, ends the run once it has passed (each worker
	// finishes the call it is in, then closes its turn).
	Duration time.Duration `json:"duration_ns,omitempty"`
	// WarmupTurns run before the measurement and are not recorded,
	// default Concurrency (every worker warms up once).
	WarmupTurns int `json:"warmup_turns"`
	// PayloadBytes is the size of each call's payload, default 64.
	PayloadBytes int `json:"payload_bytes"`
}

// WithDefaults returns p with zero fields set to their defaults.
func (p Params) WithDefaults() Params {
	if p.Turns == 0 && p.Duration == 0 {
		p.Turns = 1000
	}
	if p.CallsPerTurn == 0 {
		p.CallsPerTurn = 10
	}
	if p.Concurrency == 0 {
		p.Concurrency = 64
	}
	if p.WarmupTurns == 0 {
		p.WarmupTurns = p.Concurrency
	}
	if p.PayloadBytes == 0 {
		p.PayloadBytes = 64
	}
	return p
}

// Validate reports parameters a run cannot use.
func (p Params) Validate() error {
	switch {
	case p.Turns < 0, p.CallsPerTurn < 0, p.Concurrency < 0, p.Duration < 0, p.WarmupTurns < 0, p.PayloadBytes < 0:
		return errors.New("harness: negative parameter")
	case p.Turns == 0 && p.Duration == 0:
		return errors.New("harness: a run needs a turn count or a duration")
	case p.Concurrency > 65536:
		return fmt.Errorf("harness: concurrency %d is more than 65536", p.Concurrency)
	}
	return nil
}

// Scenario is one thing to measure: a transport, a configuration, or a
// floor. Adding a transport is adding a Scenario.
type Scenario struct {
	// Name identifies the scenario on the command line and in reports.
	Name string
	// Floor names the scenario this one is compared to (run in the same
	// invocation); empty for floors and for scenarios with no floor.
	Floor string
	// Description is one line for the report.
	Description string
	// Setup builds the target: servers, connections, kernels. Its cost is
	// not measured.
	Setup func(ctx context.Context, p Params) (Target, error)
}

// Target is a set-up scenario under load.
//
// Open is called concurrently by the workers; each Turn is used by one
// worker only, so its methods are not called concurrently. Close is
// called once, after every turn is closed.
type Target interface {
	// Open begins a turn. A target without turns (a floor) returns a
	// Turn whose Close does nothing.
	Open(ctx context.Context) (Turn, error)
	// Close tears the target down and waits for what it started.
	Close(ctx context.Context) error
}

// Turn is one open turn of a target.
type Turn interface {
	// Call makes the turn's i-th call (0-based) and waits for its answer.
	Call(ctx context.Context, i int) error
	// Close ends the turn.
	Close(ctx context.Context) error
}

// Counted is implemented by targets that count provider catalogue calls
// and the time spent in them. The runner reads it before and after the
// measured part of a run.
type Counted interface {
	Counters() Counters
}

// Counters are a target's cumulative provider counters.
type Counters struct {
	// Providers is how many providers each turn resolves.
	Providers int
	// CatalogCalls is how many catalogue calls providers answered.
	CatalogCalls int64
	// CatalogTime is the time spent in those calls, summed.
	CatalogTime time.Duration
}
