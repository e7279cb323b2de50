package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

// RunOptions control how a run is observed. The zero value is silent.
type RunOptions struct {
	// Progress, if set, receives a line every ProgressEvery while the
	// measured part of the run goes on.
	Progress io.Writer
	// ProgressEvery defaults to 2s.
	ProgressEvery time.Duration
	// ProfileDir, if set, receives <scenario>.cpu.pprof (the measured
	// part only) and <scenario>.allocs.pprof with the allocation profile
	// at its start, <scenario>.allocs.base.pprof, to diff against
	// (go tool pprof -base).
	ProfileDir string
	// MaxErrors stops the measured part early once this many calls
	// failed, default 1000.
	MaxErrors int
}

// Result is one scenario's measurement.
type Result struct {
	Scenario    string `json:"scenario"`
	Floor       string `json:"floor,omitempty"`
	Description string `json:"description,omitempty"`
	Params      Params `json:"params"`

	// Calls is the number of calls that succeeded; Errors failed.
	Calls      uint64 `json:"calls"`
	Errors     uint64 `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	Turns      uint64 `json:"turns"`
	// ElapsedSeconds is the measured part's wall time.
	ElapsedSeconds float64 `json:"elapsed_s"`
	// Throughput is successful calls per second of wall time (turn opens
	// and closes included in the time).
	Throughput float64 `json:"calls_per_s"`
	// Latency is of successful calls, from the caller's side.
	Latency Latency `json:"latency"`
	// TurnOpen and TurnClose are the latencies of opening and closing turns.
	TurnOpen  Latency `json:"turn_open"`
	TurnClose Latency `json:"turn_close"`

	// CPUPerCallMicros is process CPU time (user+system, every goroutine:
	// load generator, NATS server, node, provider) per successful call.
	CPUPerCallMicros float64 `json:"cpu_per_call_us"`
	// AllocsPerCall and AllocBytesPerCall are Go heap allocations per
	// successful call, process-wide.
	AllocsPerCall     float64 `json:"allocs_per_call"`
	AllocBytesPerCall float64 `json:"alloc_bytes_per_call"`
	// PeakRSSBytes is the resident set's high-water mark during the
	// measured part (the whole process's so far when PeakRSSWindowed is
	// false; see PeakRSS).
	PeakRSSBytes    int64 `json:"peak_rss_bytes"`
	PeakRSSWindowed bool  `json:"peak_rss_windowed"`

	// CatalogCallsPerTurn is provider catalogue calls per turn and per
	// provider (the promise: exactly 1); nil when the target does not
	// count them (floors).
	CatalogCallsPerTurn *float64 `json:"catalog_calls_per_turn,omitempty"`
	// ResolveShare is the time providers spent answering catalogue calls
	// over the summed latency of the calls (first calls resolve).
	ResolveShare *float64 `json:"resolve_share,omitempty"`

	// VsFloor compares this result with its floor's, when it has one.
	VsFloor *Ratio `json:"vs_floor,omitempty"`

	latency *Histogram
}

// Latency summarizes a histogram in microseconds.
type Latency struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"mean_us"`
	P50   float64 `json:"p50_us"`
	P90   float64 `json:"p90_us"`
	P99   float64 `json:"p99_us"`
	P999  float64 `json:"p99_9_us"`
	Max   float64 `json:"max_us"`
}

// Summarize reads h's quantiles.
func Summarize(h *Histogram) Latency {
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return Latency{
		Count: h.Count(), Mean: us(h.Mean()), P50: us(h.Quantile(0.50)), P90: us(h.Quantile(0.90)),
		P99: us(h.Quantile(0.99)), P999: us(h.Quantile(0.999)), Max: us(h.Max()),
	}
}

// Histogram returns the merged latency histogram of the successful calls.
func (r *Result) Histogram() *Histogram {
	if r.latency == nil {
		return &Histogram{}
	}
	return r.latency
}

// Run sets sc up, warms it up, measures it with p and tears it down.
func Run(ctx context.Context, sc Scenario, p Params, o RunOptions) (res Result, err error) {
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		return Result{}, err
	}
	if o.ProgressEvery == 0 {
		o.ProgressEvery = 2 * time.Second
	}
	if o.MaxErrors == 0 {
		o.MaxErrors = 1000
	}
	target, err := sc.Setup(ctx, p)
	if err != nil {
		return Result{}, fmt.Errorf("%s: setup: %w", sc.Name, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if cerr := target.Close(cctx); cerr != nil && err == nil {
			err = fmt.Errorf("%s: teardown: %w", sc.Name, cerr)
		}
	}()

	if p.WarmupTurns > 0 {
		warm := phase{target: target, turns: p.WarmupTurns, calls: p.CallsPerTurn, conc: p.Concurrency, maxErrors: o.MaxErrors}
		if w := warm.run(ctx); w.errors > 0 {
			return Result{}, fmt.Errorf("%s: warmup: %d calls failed; first: %v", sc.Name, w.errors, w.firstErr)
		}
	}

	counted, hasCounters := target.(Counted)
	var before Counters
	if hasCounters {
		before = counted.Counters()
	}
	stopProfiles, err := startProfiles(o.ProfileDir, sc.Name)
	if err != nil {
		return Result{}, err
	}
	peak := StartPeakRSS()
	u0 := ReadUsage()
	measured := phase{
		target: target, turns: p.Turns, calls: p.CallsPerTurn, conc: p.Concurrency, duration: p.Duration,
		maxErrors: o.MaxErrors, progress: o.Progress, every: o.ProgressEvery, name: sc.Name,
	}
	out := measured.run(ctx)
	u1 := ReadUsage()
	peakRSS := peak.Peak()
	if err := stopProfiles(); err != nil {
		return Result{}, err
	}

	res = Result{
		Scenario: sc.Name, Floor: sc.Floor, Description: sc.Description, Params: p,
		Calls: out.calls.Count(), Errors: out.errors, Turns: out.turns, ElapsedSeconds: out.elapsed.Seconds(),
		Latency: Summarize(out.calls), TurnOpen: Summarize(out.opens), TurnClose: Summarize(out.closes),
		PeakRSSBytes: peakRSS, PeakRSSWindowed: peak.Windowed, latency: out.calls,
	}
	if out.firstErr != nil {
		res.FirstError = out.firstErr.Error()
	}
	if n := float64(res.Calls); n > 0 {
		res.Throughput = n / out.elapsed.Seconds()
		res.CPUPerCallMicros = float64(u1.CPU-u0.CPU) / float64(time.Microsecond) / n
		res.AllocsPerCall = float64(u1.Mallocs-u0.Mallocs) / n
		res.AllocBytesPerCall = float64(u1.AllocBytes-u0.AllocBytes) / n
	}
	if hasCounters {
		after := counted.Counters()
		if perTurn := float64(out.turns) * float64(max(after.Providers, 1)); perTurn > 0 {
			v := float64(after.CatalogCalls-before.CatalogCalls) / perTurn
			res.CatalogCallsPerTurn = &v
		}
		if sum := out.calls.Sum(); sum > 0 {
			v := float64(after.CatalogTime-before.CatalogTime) / float64(sum)
			res.ResolveShare = &v
		}
	}
	return res, nil
}

// startProfiles starts the CPU profile and writes the allocation base.
func startProfiles(dir, name string) (stop func() error, err error) {
	if dir == "" {
		return func() error { return nil }, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := writeProfile("allocs", filepath.Join(dir, name+".allocs.base.pprof")); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, name+".cpu.pprof"))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("harness: cpu profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return errors.Join(f.Close(), writeProfile("allocs", filepath.Join(dir, name+".allocs.pprof")))
	}, nil
}

func writeProfile(kind, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(pprof.Lookup(kind).WriteTo(f, 0), f.Close())
}

// phase is one closed-loop load: conc workers, each opening a turn,
// making calls calls one after the other and closing it, until turns
// turns were started or duration passed.
type phase struct {
	target    Target
	turns     int
	calls     int
	conc      int
	duration  time.Duration
	maxErrors int
	progress  io.Writer
	every     time.Duration
	name      string
}

type phaseResult struct {
	calls, opens, closes *Histogram
	errors, turns        uint64
	firstErr             error
	elapsed              time.Duration
}

type worker struct {
	calls, opens, closes Histogram
	errors, turns        uint64
	firstErr             error
}

func (ph phase) run(ctx context.Context) phaseResult {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		done     atomic.Int64
		failures atomic.Int64
		wg       sync.WaitGroup
	)
	start := time.Now()
	var deadline time.Time
	if ph.duration > 0 {
		deadline = start.Add(ph.duration)
	}
	over := func() bool {
		return ctx.Err() != nil || (!deadline.IsZero() && !time.Now().Before(deadline))
	}
	fail := func(w *worker, err error) {
		w.errors++
		if w.firstErr == nil {
			w.firstErr = err
		}
		if failures.Add(1) >= int64(ph.maxErrors) {
			cancel()
		}
	}
	workers := make([]worker, ph.conc)
	for wi := range workers {
		w := &workers[wi]
		wg.Go(func() {
			for !over() {
				if n := next.Add(1); ph.turns > 0 && n > int64(ph.turns) {
					return
				}
				t0 := time.Now()
				turn, err := ph.target.Open(ctx)
				if err != nil {
					fail(w, fmt.Errorf("open: %w", err))
					continue
				}
				w.opens.Record(time.Since(t0))
				w.turns++
				for i := 0; i < ph.calls && !over(); i++ {
					t := time.Now()
					err := turn.Call(ctx, i)
					d := time.Since(t)
					if err != nil {
						fail(w, err)
					} else {
						w.calls.Record(d)
					}
					done.Add(1)
				}
				t0 = time.Now()
				if err := turn.Close(context.WithoutCancel(ctx)); err != nil {
					fail(w, fmt.Errorf("close: %w", err))
				} else {
					w.closes.Record(time.Since(t0))
				}
			}
		})
	}
	if ph.progress != nil {
		stop := make(chan struct{})
		defer close(stop)
		go ph.report(stop, start, &done, &failures)
	}
	wg.Wait()
	out := phaseResult{calls: &Histogram{}, opens: &Histogram{}, closes: &Histogram{}, elapsed: time.Since(start)}
	for i := range workers {
		w := &workers[i]
		out.calls.Merge(&w.calls)
		out.opens.Merge(&w.opens)
		out.closes.Merge(&w.closes)
		out.errors += w.errors
		out.turns += w.turns
		if out.firstErr == nil {
			out.firstErr = w.firstErr
		}
	}
	return out
}

// report prints progress until stop is closed.
func (ph phase) report(stop <-chan struct{}, start time.Time, done, failures *atomic.Int64) {
	t := time.NewTicker(ph.every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			el := now.Sub(start)
			n := done.Load()
			rate := float64(n) / el.Seconds()
			switch {
			case ph.turns > 0:
				total := int64(ph.turns) * int64(ph.calls)
				fmt.Fprintf(ph.progress, "  %s: %d/%d calls (%.0f%%), %.0f calls/s, %d errors\n",
					ph.name, n, total, 100*float64(n)/float64(total), rate, failures.Load())
			default:
				fmt.Fprintf(ph.progress, "  %s: %s/%s, %d calls, %.0f calls/s, %d errors\n",
					ph.name, el.Truncate(time.Second), ph.duration, n, rate, failures.Load())
			}
		}
	}
}
