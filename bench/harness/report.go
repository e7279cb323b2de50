package harness

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is everything one invocation measured.
type Report struct {
	Machine Machine   `json:"machine"`
	Started time.Time `json:"started"`
	// Command is the command line that produced the report.
	Command string   `json:"command"`
	Results []Result `json:"results"`
	// Sweep is throughput as concurrency grows.
	Sweep []Result `json:"sweep,omitempty"`
	// Memory is memory per idle open turn.
	Memory []Memory `json:"memory,omitempty"`
	// Goals are the budget, checked against the figures above.
	Goals []GoalResult `json:"goals,omitempty"`
}

// Ratio compares a result with its floor's, measured in the same run.
type Ratio struct {
	Floor string `json:"floor"`
	// P50 and P99 are the result's latency over the floor's (1.0: as fast
	// as the floor; higher is slower).
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	// Throughput is the result's calls/s over the floor's (lower is slower).
	Throughput float64 `json:"throughput"`
}

// Memory is memory held per idle open turn.
type Memory struct {
	Name string `json:"name"`
	// Turns is how many turns were open when it was measured.
	Turns int `json:"turns"`
	// State is what the turns had done: "opened" (nothing yet) or
	// "resolved" (one listing, so each holds its catalogue).
	State string `json:"state"`
	// BytesPerTurn is the growth of live heap and goroutine stacks,
	// after a full GC, over the turns.
	BytesPerTurn float64 `json:"bytes_per_turn"`
	// Registries is how many distinct catalogues the turns hold (1 when
	// the turns that resolved the same catalogue share it); -1 if unknown.
	Registries int `json:"registries"`
	// Seconds is how long opening (or resolving) the turns took.
	Seconds float64 `json:"seconds"`
	// PeakRSSBytes is the resident high-water mark while measuring.
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
}

// GoalResult is one budget line and whether the run met it.
type GoalResult struct {
	Goal     string `json:"goal"`
	Measured string `json:"measured"`
	// Met is nil when the run did not measure what the goal needs.
	Met *bool `json:"met"`
}

// ApplyFloors sets VsFloor on every result whose floor is among results
// or floors.
func ApplyFloors(results []Result, floors []Result) {
	byName := map[string]*Result{}
	for i := range floors {
		byName[floors[i].Scenario] = &floors[i]
	}
	for i := range results {
		r := &results[i]
		f, ok := byName[r.Floor]
		if !ok || f.Latency.P50 == 0 || f.Throughput == 0 {
			continue
		}
		r.VsFloor = &Ratio{Floor: f.Scenario, P50: r.Latency.P50 / f.Latency.P50, Throughput: r.Throughput / f.Throughput}
		if f.Latency.P99 > 0 {
			r.VsFloor.P99 = r.Latency.P99 / f.Latency.P99
		}
	}
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report for people.
func (r *Report) WriteTable(w io.Writer) error {
	m := r.Machine
	fmt.Fprintf(w, "machine: %s, %d CPUs (GOMAXPROCS %d), %s, %s/%s, %s memory\n",
		m.CPU, m.NumCPU, m.GOMAXPROCS, m.GoVersion, m.OS, m.Arch, bytesString(float64(m.MemTotal)))
	if r.Command != "" {
		fmt.Fprintf(w, "command: %s\n", r.Command)
	}
	for i := 0; i < len(r.Results); {
		// One table per concurrency level.
		p := r.Results[i].Params
		j := i
		for j < len(r.Results) && r.Results[j].Params.Concurrency == p.Concurrency {
			j++
		}
		fmt.Fprintf(w, "\nconcurrency %d: turns of %d calls, %s, payload %d B (latencies in µs; ×floor = scenario / its floor, same run)\n",
			p.Concurrency, p.CallsPerTurn, countOrDuration(p), p.PayloadBytes)
		writeResults(w, r.Results[i:j])
		i = j
	}
	if len(r.Sweep) > 0 {
		fmt.Fprintf(w, "\nconcurrency sweep (calls/s; p50 µs):\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "scenario\tconcurrency\tcalls/s\tp50\tp99\tfloor calls/s\tfloor p50\t×floor p50\t×floor calls/s\t")
		for _, s := range r.Sweep {
			if s.Floor == "" {
				continue
			}
			fc, fp, rp, rt := "-", "-", "-", "-"
			if s.VsFloor != nil {
				fc = fmt.Sprintf("%.0f", s.Throughput/s.VsFloor.Throughput)
				fp = fmt.Sprintf("%.1f", s.Latency.P50/s.VsFloor.P50)
				rp, rt = fmt.Sprintf("%.2f", s.VsFloor.P50), fmt.Sprintf("%.2f", s.VsFloor.Throughput)
			}
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t\n", s.Scenario, s.Params.Concurrency,
				s.Throughput, s.Latency.P50, s.Latency.P99, fc, fp, rp, rt)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.Memory) > 0 {
		fmt.Fprintf(w, "\nmemory per idle open turn:\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "measurement\tturns\tstate\tbytes/turn\tcatalogues held\ttime\tpeak RSS\t")
		for _, m := range r.Memory {
			regs := "?"
			if m.Registries >= 0 {
				regs = fmt.Sprint(m.Registries)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%.0f\t%s\t%.2fs\t%s\t\n", m.Name, m.Turns, m.State, m.BytesPerTurn, regs, m.Seconds, bytesString(float64(m.PeakRSSBytes)))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.Goals) > 0 {
		fmt.Fprintf(w, "\nbudget:\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, g := range r.Goals {
			verdict := "not measured"
			if g.Met != nil {
				verdict = map[bool]string{true: "met", false: "MISSED"}[*g.Met]
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", g.Goal, g.Measured, verdict)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func writeResults(w io.Writer, results []Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tcalls\terr\tp50\tp90\tp99\tp99.9\tmax\tcalls/s\tcpu µs/call\tallocs/call\tpeak RSS\tcatalog calls/turn\tresolve %\t×floor p50\t×floor calls/s\tfloor\t")
	for _, r := range results {
		cat, share := "-", "-"
		if r.CatalogCallsPerTurn != nil {
			cat = fmt.Sprintf("%.2f", *r.CatalogCallsPerTurn)
		}
		if r.ResolveShare != nil {
			share = fmt.Sprintf("%.2f", 100**r.ResolveShare)
		}
		rp, rt, floor := "-", "-", "-"
		if r.VsFloor != nil {
			rp, rt, floor = fmt.Sprintf("%.2f", r.VsFloor.P50), fmt.Sprintf("%.2f", r.VsFloor.Throughput), r.VsFloor.Floor
		}
		l := r.Latency
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f\t%.1f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			r.Scenario, r.Calls, r.Errors, l.P50, l.P90, l.P99, l.P999, l.Max, r.Throughput, r.CPUPerCallMicros,
			r.AllocsPerCall, bytesString(float64(r.PeakRSSBytes)), cat, share, rp, rt, floor)
	}
	_ = tw.Flush()
	for _, r := range results {
		if r.Errors > 0 {
			fmt.Fprintf(w, "  %s: %d calls failed; first: %s\n", r.Scenario, r.Errors, r.FirstError)
		}
	}
}

func countOrDuration(p Params) string {
	var parts []string
	if p.Turns > 0 {
		parts = append(parts, fmt.Sprintf("%d turns", p.Turns))
	}
	if p.Duration > 0 {
		parts = append(parts, fmt.Sprintf("at most %s", p.Duration))
	}
	return strings.Join(parts, ", ")
}

func bytesString(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.0f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.0f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}
