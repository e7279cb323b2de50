package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fake is a synthetic target: calls take no time, every failEvery-th call
// after the first failAfter fails, and it counts what it was asked.
type fake struct {
	opens, calls, closes atomic.Int64
	catalogs             atomic.Int64
	failEvery, failAfter int64
	closed               atomic.Bool
	mu                   sync.Mutex
	maxCall              int
}

func (f *fake) Open(context.Context) (Turn, error) {
	f.opens.Add(1)
	f.catalogs.Add(1)
	return &fakeTurn{f: f}, nil
}

func (f *fake) Close(context.Context) error {
	f.closed.Store(true)
	return nil
}

func (f *fake) Counters() Counters {
	return Counters{Providers: 1, CatalogCalls: f.catalogs.Load(), CatalogTime: time.Duration(f.catalogs.Load()) * time.Microsecond}
}

type fakeTurn struct{ f *fake }

func (t *fakeTurn) Call(_ context.Context, i int) error {
	n := t.f.calls.Add(1)
	t.f.mu.Lock()
	t.f.maxCall = max(t.f.maxCall, i)
	t.f.mu.Unlock()
	if t.f.failEvery > 0 && n > t.f.failAfter && n%t.f.failEvery == 0 {
		return errors.New("synthetic failure")
	}
	return nil
}

func (t *fakeTurn) Close(context.Context) error {
	t.f.closes.Add(1)
	return nil
}

func scenarioOf(f *fake) Scenario {
	return Scenario{Name: "fake", Floor: "fake-floor", Setup: func(context.Context, Params) (Target, error) { return f, nil }}
}

func TestRunCountsTurnsAndCalls(t *testing.T) {
	f := &fake{}
	var progress bytes.Buffer
	res, err := Run(context.Background(), scenarioOf(f),
		Params{Turns: 50, CallsPerTurn: 7, Concurrency: 4, WarmupTurns: 3},
		RunOptions{Progress: &progress, ProgressEvery: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Calls != 350 || res.Turns != 50 || res.Errors != 0 {
		t.Fatalf("calls %d turns %d errors %d", res.Calls, res.Turns, res.Errors)
	}
	// Warm-up turns ran but are not in the result.
	if f.opens.Load() != 53 || f.calls.Load() != 371 || f.closes.Load() != 53 || !f.closed.Load() || f.maxCall != 6 {
		t.Fatalf("opens %d calls %d closes %d closed %v maxCall %d", f.opens.Load(), f.calls.Load(), f.closes.Load(), f.closed.Load(), f.maxCall)
	}
	if res.CatalogCallsPerTurn == nil || *res.CatalogCallsPerTurn != 1 {
		t.Fatalf("catalog calls per turn %v", res.CatalogCallsPerTurn)
	}
	if res.ResolveShare == nil || *res.ResolveShare <= 0 {
		t.Fatalf("resolve share %v", res.ResolveShare)
	}
	if res.Latency.Count != 350 || res.Throughput <= 0 || res.PeakRSSBytes <= 0 || res.TurnOpen.Count != 50 || res.TurnClose.Count != 50 {
		t.Fatalf("%+v", res)
	}
}

func TestRunStopsAtDuration(t *testing.T) {
	f := &fake{}
	start := time.Now()
	res, err := Run(context.Background(), scenarioOf(f), Params{Duration: 50 * time.Millisecond, CallsPerTurn: 3, Concurrency: 2}, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 5*time.Second || res.Calls == 0 {
		t.Fatalf("ran %v, %d calls", el, res.Calls)
	}
}

func TestRunCountsErrorsAndStopsAtMaxErrors(t *testing.T) {
	// The warm-up (one turn of 10 calls) succeeds; then every other call fails.
	f := &fake{failEvery: 2, failAfter: 10}
	res, err := Run(context.Background(), scenarioOf(f), Params{Turns: 1000, CallsPerTurn: 10, Concurrency: 1},
		RunOptions{MaxErrors: 20})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors < 20 || res.Calls >= 5000 || res.FirstError != "synthetic failure" {
		t.Fatalf("errors %d calls %d first %q", res.Errors, res.Calls, res.FirstError)
	}
}

func TestRunReportsAFailingWarmup(t *testing.T) {
	f := &fake{failEvery: 1}
	if _, err := Run(context.Background(), scenarioOf(f), Params{Turns: 10, CallsPerTurn: 1, Concurrency: 1}, RunOptions{}); err == nil || !strings.Contains(err.Error(), "warmup") {
		t.Fatalf("err %v", err)
	}
	if !f.closed.Load() {
		t.Fatal("target not closed after a failed run")
	}
}

func TestParamsValidate(t *testing.T) {
	if err := (Params{Turns: -1}).WithDefaults().Validate(); err == nil {
		t.Error("negative turns accepted")
	}
	if err := (Params{}).Validate(); err == nil {
		t.Error("no count and no duration accepted")
	}
	if p := (Params{}).WithDefaults(); p.Turns != 1000 || p.CallsPerTurn != 10 || p.Concurrency != 64 || p.WarmupTurns != 64 || p.PayloadBytes != 64 {
		t.Errorf("defaults %+v", p)
	}
}

func TestReportRatiosTableAndJSON(t *testing.T) {
	one := 1.0
	results := []Result{
		{Scenario: "nats", Floor: "floor", Calls: 10, Throughput: 500, Latency: Latency{P50: 150, P99: 400}, CatalogCallsPerTurn: &one},
		{Scenario: "floor", Calls: 10, Throughput: 1000, Latency: Latency{P50: 100, P99: 200}},
		{Scenario: "orphan", Floor: "missing", Calls: 10, Throughput: 1, Latency: Latency{P50: 1}},
	}
	ApplyFloors(results, results)
	r := results[0].VsFloor
	if r == nil || r.P50 != 1.5 || r.P99 != 2 || r.Throughput != 0.5 || r.Floor != "floor" {
		t.Fatalf("ratio %+v", r)
	}
	if results[1].VsFloor != nil || results[2].VsFloor != nil {
		t.Fatal("floors and scenarios without a measured floor get no ratio")
	}
	met := true
	rep := &Report{Machine: ThisMachine(), Results: results, Sweep: results[:2],
		Memory: []Memory{{Name: "idle", Turns: 10, State: "opened", BytesPerTurn: 1500, Registries: 1}},
		Goals:  []GoalResult{{Goal: "p50 ≤ 1.5× floor", Measured: "1.50×", Met: &met}}}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"nats", "1.50", "0.50", "floor", "memory per idle open turn", "1500", "met", "concurrency sweep"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Results[0].VsFloor.P50 != 1.5 || *back.Results[0].CatalogCallsPerTurn != 1 || back.Memory[0].BytesPerTurn != 1500 {
		t.Fatalf("round trip %+v", back.Results[0])
	}
}

func TestThisMachine(t *testing.T) {
	m := ThisMachine()
	if m.NumCPU < 1 || m.GoVersion == "" {
		t.Fatalf("%+v", m)
	}
}
