package config_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sharedos/sharedos/actors"
	"github.com/sharedos/sharedos/internal/auditstore"
	"github.com/sharedos/sharedos/internal/config"
)

// The defaults a file leaves out are the components' own: the kernel's
// timeouts are actors', the audit stream and durability auditstore's, and
// a hosted provider's ttl is set here, not by whoever starts it.
func TestDefaultsAreTheComponents(t *testing.T) {
	c, err := config.Parse([]byte(`providers:
  - {id: hosted, kind: nats, host: calendar}
  - {id: hosted-ttl, kind: nats, host: calendar, ttl: 1m}
  - {id: remote, kind: nats}
`))
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(c.Kernel.ResolveTimeout) != actors.DefaultResolveTimeout || time.Duration(c.Kernel.CallTimeout) != actors.DefaultCallTimeout {
		t.Errorf("kernel timeouts %v, %v; want actors' %v, %v", c.Kernel.ResolveTimeout, c.Kernel.CallTimeout, actors.DefaultResolveTimeout, actors.DefaultCallTimeout)
	}
	if c.Audit.Stream != auditstore.DefaultStream || c.Audit.Durability != auditstore.DurabilityAcked {
		t.Errorf("audit stream %q durability %q", c.Audit.Stream, c.Audit.Durability)
	}
	want := map[string]time.Duration{"hosted": config.DefaultHostedTTL, "hosted-ttl": time.Minute, "remote": 0}
	for _, p := range c.Providers {
		if time.Duration(p.TTL) != want[p.ID] {
			t.Errorf("provider %s: ttl %v, want %v", p.ID, p.TTL, want[p.ID])
		}
	}
}

// audit.segment_max_bytes is bounded below by the sink's own bound.
func TestSegmentMaxBytesLowerBoundIsTheSinks(t *testing.T) {
	for _, tc := range []struct {
		bytes int
		ok    bool
	}{{auditstore.MinSegmentBytes - 1, false}, {auditstore.MinSegmentBytes, true}} {
		_, err := config.Parse(fmt.Appendf(nil, "audit: {segment_max_bytes: %d}\n", tc.bytes))
		if (err == nil) != tc.ok {
			t.Errorf("segment_max_bytes %d: %v", tc.bytes, err)
		}
	}
}
