package aggregator

import (
	"sync"
	"time"
)

// Defaults of the per-hospital limit on relayed ledger commands: a hospital
// relays two at start (its registration and its account opening) and a
// cap change now and then.
const (
	DefaultRelayBurst = 8
	DefaultRelayEvery = 5 * time.Second
)

// limiter is a token bucket per party: burst requests at once, then one
// more every interval.
type limiter struct {
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

func newLimiter(burst int, interval time.Duration, now func() time.Time) *limiter {
	return &limiter{burst: burst, interval: interval, now: now, buckets: map[string]*bucket{}}
}

// allow takes a token of party's bucket; when there is none it returns
// false and how long until there is.
func (l *limiter) allow(party string) (bool, time.Duration) {
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
