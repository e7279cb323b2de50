package main

import (
	"fmt"

	"github.com/sharedos/sharedos/bench/harness"
	"github.com/sharedos/sharedos/bench/scenarios"
)

// The budget of issue #5 (2-core machine; ratios hold, absolutes are
// indicative).
const (
	goalInProcessP50     = 20.0  // µs
	goalNATSRatio        = 1.5   // × floor-composite p50
	goalNATSThroughput   = 25000 // calls/s at 64 concurrent
	goalAckedThroughput  = 10000 // calls/s
	goalBytesPerIdleTurn = 2048
	// Issue #13: acked audit with the stream fsyncing every write.
	goalAckedSyncThroughput = 15000 // calls/s at 64 concurrent
	goalAckedSyncP50        = 5000  // µs at 64 concurrent
)

// goals checks the report against the budget.
func goals(rep *harness.Report) []harness.GoalResult {
	// Latency goals are judged unloaded (the lowest concurrency run),
	// throughput goals at 64 concurrent (or the highest run).
	lowest, highest := 0, 0
	for _, r := range rep.Results {
		if lowest == 0 || r.Params.Concurrency < lowest {
			lowest = r.Params.Concurrency
		}
		if r.Params.Concurrency == 64 || (highest != 64 && r.Params.Concurrency > highest) {
			highest = r.Params.Concurrency
		}
	}
	findAt := func(name string, conc int) *harness.Result {
		for i := range rep.Results {
			if r := &rep.Results[i]; r.Scenario == name && r.Params.Concurrency == conc {
				return r
			}
		}
		return nil
	}
	verdict := func(ok bool) *bool { return &ok }
	var out []harness.GoalResult
	add := func(goal string, measured string, met *bool) {
		out = append(out, harness.GoalResult{Goal: goal, Measured: measured, Met: met})
	}

	g := fmt.Sprintf("inprocess p50 ≤ %.0f µs (concurrency %d)", goalInProcessP50, lowest)
	if r := findAt(scenarios.InProcess, lowest); r != nil {
		add(g, fmt.Sprintf("%.1f µs", r.Latency.P50), verdict(r.Latency.P50 <= goalInProcessP50))
	} else {
		add(g, "-", nil)
	}

	g = fmt.Sprintf("nats p50 ≤ %.1f× %s (concurrency %d)", goalNATSRatio, scenarios.FloorComposite, lowest)
	if r := findAt(scenarios.NATS, lowest); r != nil && r.VsFloor != nil {
		add(g, fmt.Sprintf("%.2f× (%.1f µs)", r.VsFloor.P50, r.Latency.P50), verdict(r.VsFloor.P50 <= goalNATSRatio))
	} else {
		add(g, "-", nil)
	}

	g = fmt.Sprintf("nats ≥ %dk calls/s at 64 concurrent", goalNATSThroughput/1000)
	at64 := findAt(scenarios.NATS, 64)
	for i := range rep.Sweep {
		if s := &rep.Sweep[i]; s.Scenario == scenarios.NATS && s.Params.Concurrency == 64 && at64 == nil {
			at64 = s
		}
	}
	if at64 != nil {
		add(g, fmt.Sprintf("%.0f calls/s", at64.Throughput), verdict(at64.Throughput >= goalNATSThroughput))
	} else {
		add(g, "-", nil)
	}

	g = fmt.Sprintf("acked audit ≥ %dk calls/s (nats-acked, concurrency %d)", goalAckedThroughput/1000, highest)
	if r := findAt(scenarios.NATSAcked, highest); r != nil {
		add(g, fmt.Sprintf("%.0f calls/s", r.Throughput), verdict(r.Throughput >= goalAckedThroughput))
	} else {
		add(g, "-", nil)
	}

	g = fmt.Sprintf("acked audit, sync always ≥ %dk calls/s and p50 ≤ %.0f ms (%s, concurrency %d)",
		goalAckedSyncThroughput/1000, goalAckedSyncP50/1000.0, scenarios.NATSAckedSync, highest)
	if r := findAt(scenarios.NATSAckedSync, highest); r != nil {
		add(g, fmt.Sprintf("%.0f calls/s, p50 %.2f ms", r.Throughput, r.Latency.P50/1000),
			verdict(r.Throughput >= goalAckedSyncThroughput && r.Latency.P50 <= goalAckedSyncP50))
	} else {
		add(g, "-", nil)
	}

	g = fmt.Sprintf("≤ %d B per idle open turn", goalBytesPerIdleTurn)
	if len(rep.Memory) > 0 {
		worst := rep.Memory[0]
		for _, m := range rep.Memory {
			if m.BytesPerTurn > worst.BytesPerTurn {
				worst = m
			}
		}
		add(g, fmt.Sprintf("%.0f B (worst: %d %s)", worst.BytesPerTurn, worst.Turns, worst.State), verdict(worst.BytesPerTurn <= goalBytesPerIdleTurn))
	} else {
		add(g, "-", nil)
	}
	return out
}
