// Package ratelimit is token buckets kept per key (a principal, a bus
// identity), judged on a clock the caller passes in.
package ratelimit

import (
	"sync"
	"time"
)

// Limit is a token bucket kept per key: Rate requests a second on
// average, up to Burst at once. The zero value is no limit.
type Limit struct {
	Rate  float64
	Burst int
}

func (r Limit) enabled() bool { return r.Rate > 0 && r.Burst > 0 }

// Limiter keeps a Limit's buckets, judged on the kernel's clock. Safe
// for concurrent use. Buckets that have refilled are forgotten when the
// map grows past maxBuckets (a full bucket is the same as a new one), so
// memory follows the keys active recently, not all ever seen.
type Limiter struct {
	lim     Limit
	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

const maxBuckets = 1 << 16

// New returns a limiter of lim; nil (no limit) for the zero Limit.
func New(lim Limit) *Limiter {
	if !lim.enabled() {
		return nil
	}
	return &Limiter{lim: lim, buckets: map[string]*bucket{}}
}

// Take spends one token of key's bucket at now. It returns 0 when the
// request may go ahead, and otherwise how long until a token is there.
func (l *Limiter) Take(key string, now time.Time) time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			l.forgetFull(now)
		}
		b = &bucket{tokens: float64(l.lim.Burst), at: now}
		l.buckets[key] = b
	}
	l.refill(b, now)
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	return time.Duration((1 - b.tokens) / l.lim.Rate * float64(time.Second))
}

func (l *Limiter) refill(b *bucket, now time.Time) {
	if d := now.Sub(b.at); d > 0 { // a clock stepping back refills nothing
		b.tokens = min(float64(l.lim.Burst), b.tokens+d.Seconds()*l.lim.Rate)
		b.at = now
	}
}

func (l *Limiter) forgetFull(now time.Time) {
	for k, b := range l.buckets {
		if l.refill(b, now); b.tokens >= float64(l.lim.Burst) {
			delete(l.buckets, k)
		}
	}
}

// Limit is the limit l keeps.
func (l *Limiter) Limit() Limit {
	if l == nil {
		return Limit{}
	}
	return l.lim
}
