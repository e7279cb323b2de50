package node

import (
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The latency buckets reach the configured timeout and past it, whatever
// the timeout.
func TestTimeBucketsCoverTheTimeout(t *testing.T) {
	for _, timeout := range []time.Duration{time.Millisecond, time.Second, 30 * time.Second, 35 * time.Second, 10 * time.Minute} {
		b := timeBuckets(20e-6, timeout)
		if !slices.IsSorted(b) || len(slices.Compact(slices.Clone(b))) != len(b) {
			t.Errorf("%s: buckets not increasing: %v", timeout, b)
		}
		if !slices.Contains(b, timeout.Seconds()) || b[len(b)-1] <= timeout.Seconds() {
			t.Errorf("%s: buckets %v do not include the timeout and reach past it", timeout, b)
		}
		if len(b) > 40 {
			t.Errorf("%s: %d buckets", timeout, len(b))
		}
	}
	m := newMetrics(func() float64 { return 0 }, 5*time.Second, 30*time.Second)
	m.callTime.Observe(29)
	m.requestTime.WithLabelValues("invoke").Observe(34)
	for _, want := range []string{`sharedos_call_duration_seconds_bucket{le="30"} 1`, `sharedos_request_duration_seconds_bucket{op="invoke",le="35"} 1`} {
		if got := scrape(t, m); !strings.Contains(got, want) {
			t.Errorf("no %s in\n%s", want, got)
		}
	}
}

func scrape(t *testing.T, m *metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}
