// Command bench is the SharedOS load harness's command line: it runs the
// scenarios of package bench/scenarios with the floors they are compared
// to, on one embedded NATS server, and prints a table (or JSON).
//
//	go run ./bench                                    # every scenario, the defaults
//	go run ./bench --scenarios nats --calls 50000 --concurrency 64
//	go run ./bench --sweep 1,4,16,64,256 --idle-turns 10000,100000
//	go run ./bench --json > bench.json                # for tracking over time
//	go run ./bench --scenarios nats --cpuprofile prof # pprof per scenario
//
// docs/performance.md has the figures and how to read them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sharedos/sharedos/bench/harness"
	"github.com/sharedos/sharedos/bench/scenarios"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type config struct {
	scenarios  []string
	levels     []int
	params     harness.Params
	calls      int
	runs       int
	jsonOut    bool
	quiet      bool
	sweep      []int
	sweepOf    []string
	idleTurns  []int
	profileDir string
	syncAlways bool
	// commitsInFlight and awaitCompletion set the audit writer's depth
	// and what a call's answer waits for (scenarios.Options).
	commitsInFlight int
	awaitCompletion bool
	listOnly        bool
	skipScenario    bool
}

func parse(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &config{}
	var names, levels, sweep, sweepOf, idle string
	fs.StringVar(&names, "scenarios", "all", "comma-separated scenarios to run (their floors are added), all, or none")
	fs.IntVar(&c.calls, "calls", 20000, "calls per scenario (turns = calls / calls-per-turn); see --turns")
	fs.IntVar(&c.params.Turns, "turns", 0, "turns per scenario (overrides --calls)")
	fs.IntVar(&c.params.CallsPerTurn, "calls-per-turn", 10, "calls each turn makes, one after the other")
	fs.StringVar(&levels, "concurrency", "1,64", "turns in flight at once (closed loop); a list runs every scenario at each level")
	fs.DurationVar(&c.params.Duration, "duration", 0, "run each scenario for this long instead (the turn count stays an upper bound if set)")
	fs.IntVar(&c.params.WarmupTurns, "warmup", 0, "warm-up turns per scenario, not recorded (default: one per worker)")
	fs.IntVar(&c.params.PayloadBytes, "payload", 64, "bytes of text in each call's arguments (echoed back)")
	fs.IntVar(&c.runs, "runs", 1, "run every scenario this many times and report per-figure medians")
	fs.BoolVar(&c.jsonOut, "json", false, "print the report as JSON instead of a table")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress on stderr")
	fs.StringVar(&sweep, "sweep", "", "concurrency levels for the throughput sweep, e.g. 1,4,16,64,256")
	fs.StringVar(&sweepOf, "sweep-scenarios", scenarios.NATS, "scenarios the sweep runs (with their floors)")
	fs.StringVar(&idle, "idle-turns", "", "open-turn counts for memory per idle turn, e.g. 10000,100000")
	fs.StringVar(&c.profileDir, "cpuprofile", "", "directory for a CPU and an allocation profile per scenario")
	fs.BoolVar(&c.syncAlways, "sync-always", false, "JetStream fsyncs every write (a node's embedded server does; see docs/performance.md)")
	fs.IntVar(&c.commitsInFlight, "commits-in-flight", 0, "audit commits the writer may have in flight (audit.commits_in_flight; 0: its default)")
	fs.BoolVar(&c.awaitCompletion, "await-completion", false, "a call's answer waits for its tool.completed to be stored (audit.await_completion)")
	fs.BoolVar(&c.listOnly, "list", false, "list the scenarios and exit")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if c.sweep, err = ints(sweep); err != nil {
		return nil, fmt.Errorf("--sweep: %w", err)
	}
	if c.levels, err = ints(levels); err != nil || len(c.levels) == 0 {
		return nil, fmt.Errorf("--concurrency: want positive numbers: %v", err)
	}
	c.params.Concurrency = c.levels[0]
	if c.idleTurns, err = ints(idle); err != nil {
		return nil, fmt.Errorf("--idle-turns: %w", err)
	}
	c.sweepOf = splitList(sweepOf)
	switch names {
	case "none":
		c.skipScenario = true
	case "all":
	default:
		c.scenarios = splitList(names)
	}
	if c.params.Turns == 0 && c.params.Duration == 0 {
		if c.params.CallsPerTurn <= 0 || c.calls <= 0 {
			return nil, errors.New("--calls and --calls-per-turn must be positive")
		}
		c.params.Turns = max(1, c.calls/c.params.CallsPerTurn)
	}
	if c.runs < 1 {
		return nil, errors.New("--runs must be at least 1")
	}
	if err := c.params.WithDefaults().Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// selectScenarios returns the named scenarios with their floors, in the
// catalogue's order (each floor before what is compared to it).
func selectScenarios(all []harness.Scenario, names []string) ([]harness.Scenario, error) {
	if names == nil {
		return all, nil
	}
	byName := map[string]harness.Scenario{}
	for _, s := range all {
		byName[s.Name] = s
	}
	want := map[string]bool{}
	for _, n := range names {
		s, ok := byName[n]
		if !ok {
			return nil, fmt.Errorf("unknown scenario %q (go run ./bench --list)", n)
		}
		want[n] = true
		if s.Floor != "" {
			want[s.Floor] = true
		}
	}
	var out []harness.Scenario
	for _, s := range all {
		if want[s.Name] {
			out = append(out, s)
		}
	}
	return out, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parse(args, stderr)
	if err != nil {
		return err
	}
	var progress io.Writer
	if !c.quiet {
		progress = stderr
	}
	say := func(format string, a ...any) {
		if progress != nil {
			fmt.Fprintf(progress, format+"\n", a...)
		}
	}

	env, err := scenarios.Start(scenarios.Options{SyncAlways: c.syncAlways, CommitsInFlight: c.commitsInFlight, AwaitCompletion: c.awaitCompletion})
	if err != nil {
		return err
	}
	defer env.Close()
	all := env.All()
	if c.listOnly {
		for _, s := range all {
			fmt.Fprintf(stdout, "%-32s %s\n", s.Name, s.Description)
		}
		return nil
	}

	rep := &harness.Report{Machine: harness.ThisMachine(), Started: time.Now().UTC(), Command: "go run ./bench " + strings.Join(args, " ")}
	opts := harness.RunOptions{Progress: progress, ProfileDir: c.profileDir}
	var problems []string

	if !c.skipScenario {
		selected, err := selectScenarios(all, c.scenarios)
		if err != nil {
			return err
		}
		for _, level := range c.levels {
			p := c.params
			p.Concurrency = level
			rounds := make([][]harness.Result, c.runs)
			for r := range c.runs {
				for i, s := range selected {
					say("[concurrency %d, %d/%d] %s (run %d/%d): %s", level, i+1, len(selected), s.Name, r+1, c.runs, s.Description)
					res, err := harness.Run(ctx, s, p, opts)
					if err != nil {
						return err
					}
					rounds[r] = append(rounds[r], res)
				}
				harness.ApplyFloors(rounds[r], rounds[r])
			}
			rep.Results = append(rep.Results, harness.Medians(rounds)...)
		}
	}

	if len(c.sweep) > 0 {
		selected, err := selectScenarios(all, c.sweepOf)
		if err != nil {
			return err
		}
		for _, conc := range c.sweep {
			p := c.params
			p.Concurrency, p.WarmupTurns = conc, 0
			var point []harness.Result
			for _, s := range selected {
				say("[sweep %d] %s", conc, s.Name)
				res, err := harness.Run(ctx, s, p, harness.RunOptions{Progress: progress})
				if err != nil {
					return err
				}
				point = append(point, res)
			}
			harness.ApplyFloors(point, point)
			rep.Sweep = append(rep.Sweep, point...)
		}
	}

	for _, n := range c.idleTurns {
		say("[idle] %d open turns", n)
		m, err := env.IdleTurns(ctx, n, progress, c.profileDir)
		if err != nil {
			return err
		}
		rep.Memory = append(rep.Memory, m...)
	}

	rep.Goals = goals(rep)
	for _, r := range append(slices.Clone(rep.Results), rep.Sweep...) {
		if r.Errors > 0 {
			problems = append(problems, fmt.Sprintf("%s: %d calls failed (first: %s)", r.Scenario, r.Errors, r.FirstError))
		}
		if r.CatalogCallsPerTurn != nil && *r.CatalogCallsPerTurn != 1 {
			problems = append(problems, fmt.Sprintf("%s: %.3f provider catalogue calls per turn; the promise is exactly 1", r.Scenario, *r.CatalogCallsPerTurn))
		}
	}

	if c.jsonOut {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteTable(stdout)
	}
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}
