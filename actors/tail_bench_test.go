package actors_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sharedos/sharedos/audit"
)

// BenchmarkMediatedCallTail is the mediated call from 64 closed-loop
// callers, each on its own turn (bench's inprocess at concurrency 64,
// without the audit stream), reporting the latency quantiles the callers
// saw. On two cores a fair kernel gives every call about 64 × the time
// per call; the mean is that whatever the kernel does, the tail is not.
func BenchmarkMediatedCallTail(b *testing.B) {
	const callers = 64
	k := benchKernel(b, audit.Discard{}, nil)
	ctx := context.Background()
	args := []byte(`{"text":"tail"}`)
	var mu sync.Mutex
	var all []time.Duration
	per := max(b.N/callers, 1)
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			o, err := k.Open(ctx, benchAccess)
			if err != nil {
				b.Error(err)
				return
			}
			who := benchAccess
			who.TurnID, who.LeaseID = o.TurnID, o.LeaseID
			lat := make([]time.Duration, 0, per)
			for range per {
				t0 := time.Now()
				if _, err := k.Invoke(ctx, who, "tools_sha256", args); err != nil {
					b.Error(err)
					return
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	b.StopTimer()
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	q := func(f float64) float64 { return float64(all[int(f*float64(len(all)-1))].Microseconds()) }
	b.ReportMetric(q(0.5), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(q(0.999), "p99.9-µs")
	b.ReportMetric(q(1), "max-µs")
}
