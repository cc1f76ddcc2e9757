package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestCeiling(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		n      int
		lo, hi time.Duration
		want   time.Duration
	}{
		{-3, 500 * ms, 15 * time.Second, 500 * ms},
		{0, 500 * ms, 15 * time.Second, 500 * ms},
		{1, 500 * ms, 15 * time.Second, 500 * ms},
		{2, 500 * ms, 15 * time.Second, time.Second},
		{5, 500 * ms, 15 * time.Second, 8 * time.Second},
		{6, 500 * ms, 15 * time.Second, 15 * time.Second},
		{64, 5 * ms, 200 * ms, 200 * ms},
		{1 << 30, time.Nanosecond, time.Hour, time.Hour},
		{3, time.Hour, time.Minute, time.Minute}, // a minimum above the maximum
	} {
		if got := Ceiling(c.n, c.lo, c.hi); got != c.want {
			t.Errorf("Ceiling(%d, %v, %v) = %v, want %v", c.n, c.lo, c.hi, got, c.want)
		}
	}
}

func TestWait(t *testing.T) {
	if err := Wait(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("a short wait: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Wait(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait: %v, want context.Canceled", err)
	}
}
