package parallel

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

func TestForEachRunsEveryIndexOnce(t *testing.T) {
	for _, tc := range []struct{ n, workers int }{{0, 2}, {1, 0}, {7, 1}, {7, 3}, {100, 16}, {3, 10}} {
		counts := make([]atomic.Int32, tc.n)
		var running, most atomic.Int32
		err := ForEach(context.Background(), tc.n, tc.workers, func(_ context.Context, i int) error {
			r := running.Add(1)
			for m := most.Load(); r > m && !most.CompareAndSwap(m, r); m = most.Load() {
			}
			counts[i].Add(1)
			running.Add(-1)
			return nil
		})
		if err != nil {
			t.Fatalf("n=%d workers=%d: %v", tc.n, tc.workers, err)
		}
		for i := range counts {
			if c := counts[i].Load(); c != 1 {
				t.Errorf("n=%d workers=%d: index %d ran %d times", tc.n, tc.workers, i, c)
			}
		}
		if tc.workers > 0 && int(most.Load()) > tc.workers {
			t.Errorf("n=%d: %d ran at once, limit %d", tc.n, most.Load(), tc.workers)
		}
	}
}

func TestForEachStopsAtTheFirstError(t *testing.T) {
	boom := errors.New("boom")
	var started atomic.Int32
	err := ForEach(context.Background(), 1000, 1, func(_ context.Context, i int) error {
		started.Add(1)
		if i == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want the error of index 3", err)
	}
	if s := started.Load(); s != 4 {
		t.Errorf("one worker started %d indices; the first error must stop it after 4", s)
	}
}

func TestForEachGivesTheCancelledContext(t *testing.T) {
	boom := errors.New("boom")
	release := make(chan struct{})
	err := ForEach(context.Background(), 2, 2, func(ctx context.Context, i int) error {
		if i == 0 {
			defer close(release)
			return boom
		}
		<-release
		<-ctx.Done() // the other worker's error cancels this one's context
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
}

func TestForEachReturnsTheParentsError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	err := ForEach(ctx, 5, 2, func(context.Context, int) error { ran = true; return nil })
	if !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("got %v, ran %v: a cancelled context runs nothing and says so", err, ran)
	}
}
