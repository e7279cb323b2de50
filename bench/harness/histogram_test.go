package harness

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// within reports whether got is within rel of want.
func within(got, want time.Duration, rel float64) bool {
	d := float64(got - want)
	if d < 0 {
		d = -d
	}
	return d <= rel*float64(want)
}

func TestHistogramKnownQuantiles(t *testing.T) {
	var h Histogram
	// 1..100000 µs, each once: the q-quantile is q·100000 µs.
	for i := 1; i <= 100000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{
		{0.5, 50 * time.Millisecond}, {0.9, 90 * time.Millisecond}, {0.99, 99 * time.Millisecond},
		{0.999, 99900 * time.Microsecond}, {0.001, 100 * time.Microsecond},
	} {
		if got := h.Quantile(c.q); !within(got, c.want, 0.005) {
			t.Errorf("q%.3f = %v, want %v ±0.5%%", c.q, got, c.want)
		}
	}
	if h.Quantile(1) != 100*time.Millisecond || h.Max() != 100*time.Millisecond || h.Min() != time.Microsecond {
		t.Errorf("max %v min %v q1 %v", h.Max(), h.Min(), h.Quantile(1))
	}
	if h.Count() != 100000 || h.Mean() != 50000500*time.Nanosecond {
		t.Errorf("count %d mean %v", h.Count(), h.Mean())
	}
}

func TestHistogramMatchesExactSamplesWithinPrecision(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	samples := make([]time.Duration, 50000)
	for i := range samples {
		// log-normal-ish: latencies spanning ns to ms
		samples[i] = time.Duration(r.ExpFloat64() * r.ExpFloat64() * 100000)
		h.Record(samples[i])
	}
	slices.Sort(samples)
	for _, q := range []float64{0.1, 0.5, 0.9, 0.99, 0.999} {
		exact := samples[int(q*float64(len(samples)))-1]
		if got := h.Quantile(q); !within(got, exact, 0.01) && (got-exact > 1 || exact-got > 1) {
			t.Errorf("q%v = %v, exact %v", q, got, exact)
		}
	}
}

func TestHistogramSmallValuesAreExact(t *testing.T) {
	var h Histogram
	for _, v := range []time.Duration{3, 3, 3, 7, 100} {
		h.Record(v)
	}
	if h.Quantile(0.5) != 3 || h.Quantile(0.8) != 7 || h.Quantile(0.99) != 100 {
		t.Fatalf("p50 %v p80 %v p99 %v", h.Quantile(0.5), h.Quantile(0.8), h.Quantile(0.99))
	}
}

func TestHistogramEmptyAndNegative(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Mean() != 0 || h.Max() != 0 {
		t.Fatal("empty histogram must read 0")
	}
	h.Record(-5)
	if h.Count() != 1 || h.Quantile(0.5) != 0 {
		t.Fatalf("negative recorded as %v", h.Quantile(0.5))
	}
}

func TestHistogramMergeEqualsRecordingEverything(t *testing.T) {
	var a, b, all Histogram
	for i := 1; i <= 1000; i++ {
		d := time.Duration(i*i) * time.Nanosecond
		all.Record(d)
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	var m Histogram
	m.Merge(&a)
	m.Merge(&b)
	m.Merge(&Histogram{})
	for _, q := range []float64{0, 0.25, 0.5, 0.9, 0.99, 1} {
		if m.Quantile(q) != all.Quantile(q) {
			t.Errorf("q%v: merged %v, direct %v", q, m.Quantile(q), all.Quantile(q))
		}
	}
	if m.Count() != all.Count() || m.Sum() != all.Sum() || m.Min() != all.Min() || m.Max() != all.Max() {
		t.Fatalf("merged %d/%v/%v/%v, direct %d/%v/%v/%v", m.Count(), m.Sum(), m.Min(), m.Max(), all.Count(), all.Sum(), all.Min(), all.Max())
	}
}

func TestBucketsTileTheLine(t *testing.T) {
	// Every value falls in the bucket whose range holds it, and
	// consecutive buckets are contiguous.
	prevHi := uint64(0)
	for i := range 40 * subCount {
		lo, hi := bucketRange(i)
		if lo != prevHi || hi <= lo {
			t.Fatalf("bucket %d = [%d,%d), previous ended at %d", i, lo, hi, prevHi)
		}
		if bucketOf(lo) != i || bucketOf(hi-1) != i {
			t.Fatalf("bucket %d = [%d,%d) but bucketOf(lo)=%d bucketOf(hi-1)=%d", i, lo, hi, bucketOf(lo), bucketOf(hi-1))
		}
		if rel := float64(hi-lo) / float64(lo+1); i >= subCount && rel > 1.0/subCount {
			t.Fatalf("bucket %d is %.4f of its value wide", i, rel)
		}
		prevHi = hi
	}
}
