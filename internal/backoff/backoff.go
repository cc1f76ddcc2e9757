// Package backoff is the one schedule of waits between retries: the wait
// before attempt n doubles from a minimum up to a maximum. Callers that
// want jitter draw below it (protocol/quicnet's Backoff).
package backoff

import (
	"context"
	"time"
)

// Ceiling returns the wait before attempt n (n ≥ 1; less counts as 1):
// min(hi, lo·2^(n−1)), without overflow however large n is.
func Ceiling(n int, lo, hi time.Duration) time.Duration {
	if n < 1 {
		n = 1
	}
	if n-1 < 62 && lo <= hi>>(n-1) {
		return lo << (n - 1)
	}
	return hi
}

// Wait waits d, or until ctx ends, and then returns ctx's error.
func Wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
