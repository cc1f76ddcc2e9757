package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// Concurrent writers lose nothing and interleave only whole writes (run
// with -race to check the locking).
func TestConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if _, err := b.Write([]byte("ab\n")); err != nil {
					t.Error(err)
				}
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := strings.Count(b.String(), "ab\n"); got != 800 {
		t.Fatalf("%d whole writes, want 800", got)
	}
}
