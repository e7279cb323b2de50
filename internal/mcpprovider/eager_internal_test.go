package mcpprovider

import (
	"testing"
	"time"
)

// An eager refresh comes at three quarters of the snapshot's TTL (the
// configured ttl when the server gave 0), never sooner than a second.
func TestEagerRefreshAtThreeQuartersOfTTL(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	p := &Provider{cfg: Config{TTL: Duration(time.Minute)}, opts: Options{Now: func() time.Time { return now }}}
	for _, c := range []struct {
		received time.Time
		ttl      time.Duration
		want     time.Duration
	}{
		{now, 40 * time.Second, 30 * time.Second},
		{now.Add(-10 * time.Second), 40 * time.Second, 20 * time.Second},
		{now, 0, 45 * time.Second},
		{now.Add(-time.Hour), 40 * time.Second, time.Second},
		{now, time.Second, time.Second},
	} {
		if got := p.refreshIn(&snapshot{received: c.received, expires: c.received.Add(c.ttl)}); got != c.want {
			t.Errorf("received %v ttl %v: refresh in %v, want %v", now.Sub(c.received), c.ttl, got, c.want)
		}
	}
}
