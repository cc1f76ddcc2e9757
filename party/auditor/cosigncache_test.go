package auditor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Readers asking at once share one round of cosigning, and the checkpoint
// it returned is kept until the ledger grows: before, every call of
// /v1/checkpoint made every auditor sign.
func TestCosignCacheSharesAndKeeps(t *testing.T) {
	var rounds atomic.Int32
	var size atomic.Int64
	size.Store(5)
	clock := &fakeNow{t: time.Unix(1_800_000_000, 0)}
	release := make(chan struct{})
	c := &cosignCache{
		cosign: func(ctx context.Context) ([]byte, error) {
			rounds.Add(1)
			<-release
			return []byte{byte(size.Load())}, nil
		},
		size:    size.Load,
		sizeOf:  func(cp []byte) (int64, bool) { return int64(cp[0]), true },
		timeout: time.Minute,
		keep:    2 * time.Second,
		now:     clock.Now,
	}
	var wg sync.WaitGroup
	got := make([][]byte, 10)
	for i := range got {
		wg.Go(func() {
			cp, err := c.get(t.Context())
			if err != nil {
				t.Error(err)
			}
			got[i] = cp
		})
	}
	// The round is under way before it is let end (callers that come
	// after it ended find its checkpoint kept).
	for {
		c.mu.Lock()
		started := c.flight != nil
		c.mu.Unlock()
		if started && rounds.Load() == 1 {
			break
		}
	}
	close(release)
	wg.Wait()
	if rounds.Load() != 1 {
		t.Fatalf("%d rounds for 10 callers at once, want 1", rounds.Load())
	}
	for _, cp := range got {
		if len(cp) != 1 || cp[0] != 5 {
			t.Fatalf("callers got %v", got)
		}
	}
	if _, err := c.get(t.Context()); err != nil || rounds.Load() != 1 {
		t.Fatalf("at the same size: %v, %d rounds, want the kept checkpoint", err, rounds.Load())
	}
	size.Store(6)
	if cp, err := c.get(t.Context()); err != nil || cp[0] != 6 || rounds.Load() != 2 {
		t.Fatalf("after the ledger grew: %v %v, %d rounds", cp, err, rounds.Load())
	}
	// Its cosignatures' time ages: it is kept for keep only.
	clock.add(1999 * time.Millisecond)
	if _, err := c.get(t.Context()); err != nil || rounds.Load() != 2 {
		t.Fatalf("within keep: %v, %d rounds", err, rounds.Load())
	}
	clock.add(time.Millisecond)
	if _, err := c.get(t.Context()); err != nil || rounds.Load() != 3 {
		t.Fatalf("after keep: %v, %d rounds, want a new round", err, rounds.Load())
	}
}

// A caller that gives up does not cancel the round for the others, and
// errors are not kept.
func TestCosignCacheCallerGivesUp(t *testing.T) {
	release := make(chan struct{})
	var rounds atomic.Int32
	c := &cosignCache{
		cosign: func(ctx context.Context) ([]byte, error) {
			rounds.Add(1)
			select {
			case <-release:
				return nil, errors.New("no majority")
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
		size:    func() int64 { return 1 },
		sizeOf:  func([]byte) (int64, bool) { return 1, true },
		timeout: time.Minute,
		keep:    time.Hour,
		now:     time.Now,
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := c.get(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a caller that gave up: %v", err)
	}
	close(release)
	if _, err := c.get(t.Context()); err == nil || err.Error() != "no majority" {
		t.Fatalf("the round's error: %v", err)
	}
	before := rounds.Load()
	if _, err := c.get(t.Context()); err == nil || rounds.Load() != before+1 {
		t.Fatalf("errors are not kept: %v, %d rounds after %d", err, rounds.Load(), before)
	}
}

// fakeNow is a clock the test moves.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeNow) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeNow) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
