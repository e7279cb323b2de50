package harness

import (
	"math"
	"math/bits"
	"time"
)

// subBits sets the histogram's precision: every power of two is split
// into 1<<subBits equal buckets, so a recorded value is known to within
// 1/128 (0.8%) of itself, and the value reported for a bucket (its
// midpoint) to within 0.4%.
const subBits = 7

const subCount = 1 << subBits

// Histogram records durations in log-linear buckets (the HDR histogram
// layout: exact below 128 ns, then 128 buckets per power of two). It keeps
// the exact count, sum, minimum and maximum. The zero value is empty and
// ready to use. A Histogram is not safe for concurrent use: give each
// worker its own and Merge them.
type Histogram struct {
	counts []uint64
	n      uint64
	sum    time.Duration
	min    time.Duration
	max    time.Duration
}

// bucketOf is the bucket index of v nanoseconds.
func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1 // v>>shift is in [subCount, 2*subCount)
	return (shift+1)*subCount + int(v>>uint(shift)) - subCount
}

// bucketRange is the half-open range [lo, hi) of values in bucket i.
func bucketRange(i int) (lo, hi uint64) {
	if i < subCount {
		return uint64(i), uint64(i) + 1
	}
	shift := i/subCount - 1
	m := uint64(i%subCount + subCount)
	return m << uint(shift), (m + 1) << uint(shift)
}

// Record adds one duration; negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	i := bucketOf(uint64(d))
	if i >= len(h.counts) {
		grown := make([]uint64, max((i/subCount+2)*subCount, 2*len(h.counts)))
		copy(grown, h.counts)
		h.counts = grown
	}
	h.counts[i]++
	if h.n == 0 || d < h.min {
		h.min = d
	}
	if d > h.max {
		h.max = d
	}
	h.n++
	h.sum += d
}

// Merge adds every value recorded in o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	if len(o.counts) > len(h.counts) {
		grown := make([]uint64, len(o.counts))
		copy(grown, h.counts)
		h.counts = grown
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// Count is the number of values recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Sum is the total of the values recorded.
func (h *Histogram) Sum() time.Duration { return h.sum }

// Min is the smallest value recorded (exact).
func (h *Histogram) Min() time.Duration { return h.min }

// Max is the largest value recorded (exact).
func (h *Histogram) Max() time.Duration { return h.max }

// Mean is the exact mean, 0 when empty.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}

// Quantile returns the value at quantile q in [0, 1]: the midpoint of the
// bucket holding the ceil(q·n)-th smallest value, clamped to the exact
// minimum and maximum. Quantile(1) is the exact maximum; an empty
// histogram gives 0.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	if q >= 1 {
		return h.max
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := bucketRange(i)
			mid := time.Duration(lo + (hi-1-lo)/2)
			return min(max(mid, h.min), h.max)
		}
	}
	return h.max
}
