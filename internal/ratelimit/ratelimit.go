// Package ratelimit is a token bucket per party: the limit on the ledger
// commands one hospital may have relayed or submitted.
package ratelimit

import (
	"sync"
	"time"
)

// Limiter allows each party burst requests at once, then one more every
// interval. It is safe for concurrent use.
type Limiter struct {
	burst    int
	interval time.Duration
	now      func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// New returns a limiter of burst requests per party, refilled one every
// interval, reading time from now.
func New(burst int, interval time.Duration, now func() time.Time) *Limiter {
	return &Limiter{burst: burst, interval: interval, now: now, buckets: map[string]*bucket{}}
}

// Allow takes a token of party's bucket; when there is none it returns
// false and how long until there is.
func (l *Limiter) Allow(party string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b, ok := l.buckets[party]
	if !ok {
		b = &bucket{tokens: float64(l.burst), last: now}
		l.buckets[party] = b
	}
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(float64(l.burst), b.tokens+float64(d)/float64(l.interval))
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) * float64(l.interval))
}
