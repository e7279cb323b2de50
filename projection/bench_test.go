package projection_test

import (
	"slices"
	"testing"
	"time"

	"github.com/sharedos/sharedos/projection"
)

// BenchmarkProject500 projects a 500-tool catalogue with the cache warm,
// per profile, and reports the median time of one projection (p50-ms)
// next to the mean (ns/op):
//
//	go test -run '^$' -bench BenchmarkProject500 -benchmem ./projection
func BenchmarkProject500(b *testing.B) {
	listed := synthetic(b, 500)
	for _, p := range projection.Profiles() {
		b.Run(string(p), func(b *testing.B) {
			cache := projection.NewCache(4096)
			opts := projection.Options{Cache: cache}
			if _, err := projection.Project(listed, p, opts); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			durations := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				proj, err := projection.Project(listed, p, opts)
				durations = append(durations, time.Since(start))
				if err != nil || len(proj.Tools)+len(proj.Unrepresentable)+len(proj.OverLimit) != 500 {
					b.Fatal(err)
				}
			}
			slices.Sort(durations)
			b.ReportMetric(float64(durations[len(durations)/2].Microseconds())/1000, "p50-ms")
		})
	}
}

// BenchmarkProject500Cold is the same with no cache: every schema
// translated and every tool's tokens counted.
func BenchmarkProject500Cold(b *testing.B) {
	listed := synthetic(b, 500)
	for _, p := range []projection.Profile{projection.OpenAIStrict, projection.Anthropic} {
		b.Run(string(p), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := projection.Project(listed, p, projection.Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
