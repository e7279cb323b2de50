package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sharedos/sharedos/bench/harness"
	"github.com/sharedos/sharedos/bench/scenarios"
)

// TestSmoke runs every scenario, a two-point sweep and the idle-turn
// measurement with tiny counts, and checks the report is complete and the
// catalogue is resolved exactly once per turn. It checks that the harness
// works, not how fast anything is.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a NATS server and every scenario")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, progress bytes.Buffer
	err := run(ctx, []string{
		"--json", "--turns", "2", "--calls-per-turn", "5", "--concurrency", "1,64", "--warmup", "1",
		"--sweep", "1,2", "--idle-turns", "50", "--payload", "16",
	}, &out, &progress)
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}
	var rep harness.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, out.String())
	}

	env, err := scenarios.Start(scenarios.Options{})
	if err != nil {
		t.Fatal(err)
	}
	all := env.All()
	env.Close()
	if want := 2 * len(all); len(rep.Results) != want {
		t.Fatalf("%d results, want every scenario at both levels (%d)", len(rep.Results), want)
	}
	for _, r := range rep.Results {
		name := r.Scenario
		if r.Calls != 10 || r.Errors != 0 || r.Turns != 2 {
			t.Errorf("%s: %d calls, %d errors, %d turns; want 10, 0, 2 (%s)", name, r.Calls, r.Errors, r.Turns, r.FirstError)
		}
		l := r.Latency
		if !(l.P50 > 0 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
			t.Errorf("%s: latency quantiles out of order: %+v", name, l)
		}
		if r.Throughput <= 0 || r.CPUPerCallMicros <= 0 || r.AllocsPerCall <= 0 || r.PeakRSSBytes <= 0 {
			t.Errorf("%s: missing process figures: %+v", name, r)
		}
		isFloor := strings.HasPrefix(name, "floor-")
		switch {
		case isFloor && (r.CatalogCallsPerTurn != nil || r.VsFloor != nil):
			t.Errorf("%s: a floor has no catalogue or floor of its own", name)
		case !isFloor && (r.CatalogCallsPerTurn == nil || *r.CatalogCallsPerTurn != 1):
			t.Errorf("%s: catalogue calls per turn %v, want exactly 1", name, r.CatalogCallsPerTurn)
		case !isFloor && r.ResolveShare == nil:
			t.Errorf("%s: no resolve share", name)
		case !isFloor && r.Floor != "" && (r.VsFloor == nil || r.VsFloor.P50 <= 0 || r.VsFloor.Throughput <= 0):
			t.Errorf("%s: no ratio to its floor %s", name, r.Floor)
		}
	}
	if len(rep.Sweep) != 4 { // nats and its floor at two levels
		t.Errorf("sweep has %d points, want 4", len(rep.Sweep))
	}
	if len(rep.Memory) != 2 || rep.Memory[1].State != "resolved" || rep.Memory[1].BytesPerTurn <= 0 || rep.Memory[1].Registries != 1 {
		t.Errorf("memory: %+v", rep.Memory)
	}
	if len(rep.Goals) != 6 {
		t.Errorf("goals: %+v", rep.Goals)
	}
	for _, g := range rep.Goals {
		if g.Met == nil {
			t.Errorf("goal %q not measured by a full run", g.Goal)
		}
	}
	if rep.Machine.NumCPU == 0 || rep.Command == "" {
		t.Errorf("machine %+v command %q", rep.Machine, rep.Command)
	}
}

func TestTableAndFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"--list"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{scenarios.InProcess, scenarios.NATSProviderAcked, scenarios.FloorRaw, scenarios.NATSAckedSync, scenarios.FloorCompositeAckedSync} {
		if !strings.Contains(out.String(), name) {
			t.Errorf("--list lacks %s", name)
		}
	}
	for _, bad := range [][]string{{"--scenarios", "nope"}, {"--concurrency", "0"}, {"--runs", "0"}, {"extra"}, {"--sweep", "x"}} {
		if err := run(context.Background(), append(bad, "--quiet"), &out, &errOut); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	if testing.Short() {
		return
	}
	out.Reset()
	if err := run(context.Background(), []string{"--scenarios", "inprocess", "--turns", "2", "--calls-per-turn", "3", "--concurrency", "1", "--runs", "3", "--quiet"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"concurrency 1", "inprocess", "p99.9", "budget:", "inprocess p50"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}
