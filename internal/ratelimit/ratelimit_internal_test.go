package ratelimit

import (
	"strconv"
	"testing"
	"time"
)

// The limiter's memory follows the principals active recently: past
// maxBuckets, buckets that refilled (the same as new ones) are forgotten,
// and buckets still spent are kept.
func TestLimiterForgetsRefilledBuckets(t *testing.T) {
	l := New(Limit{Rate: 1, Burst: 2})
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i := range maxBuckets {
		if wait := l.Take(strconv.Itoa(i), t0); wait != 0 {
			t.Fatalf("first take of %d refused", i)
		}
	}
	// Spend "0" down to nothing at t0+2s, after the others refilled.
	t2 := t0.Add(2 * time.Second)
	l.Take("0", t2)
	l.Take("0", t2)
	if wait := l.Take("new", t2); wait != 0 || len(l.buckets) != 2 {
		t.Fatalf("after a new principal past the bound: %d buckets (want the spent one and the new one)", len(l.buckets))
	}
	if wait := l.Take("0", t2); wait != time.Second {
		t.Fatalf("the spent bucket was forgotten: wait %v, want 1s", wait)
	}
	if New(Limit{}) != nil || (*Limiter)(nil).Take("x", t0) != 0 {
		t.Fatal("the zero RateLimit must not limit")
	}
}
