package raftnode

import (
	"fmt"
	"sync"
	"time"
)

// peerBudget is a token bucket of bytes per forwarding auditor, kept by the
// leader: each auditor may have it screen and propose at most rate bytes
// of commands a second, rate at once. Only the leader proposes, so the
// budget bounds what each auditor gets proposed across the cluster.
type peerBudget struct {
	rate float64 // bytes per second, and the burst
	now  func() time.Time

	mu    sync.Mutex
	peers map[string]*byteBucket
}

type byteBucket struct {
	tokens float64
	last   time.Time
}

func newPeerBudget(rate int64, now func() time.Time) *peerBudget {
	if now == nil {
		now = time.Now
	}
	return &peerBudget{rate: float64(rate), now: now, peers: map[string]*byteBucket{}}
}

// take spends n bytes of peer's budget, or refuses with ErrPeerBudget and
// spends nothing.
func (b *peerBudget) take(peer string, n int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	k, ok := b.peers[peer]
	if !ok {
		k = &byteBucket{tokens: b.rate, last: now}
		b.peers[peer] = k
	}
	if d := now.Sub(k.last); d > 0 {
		k.tokens = min(b.rate, k.tokens+b.rate*d.Seconds())
		k.last = now
	}
	if float64(n) > k.tokens {
		return fmt.Errorf("%w (auditor %q: %d bytes, %.0f left of %.0f a second)", ErrPeerBudget, peer, n, k.tokens, b.rate)
	}
	k.tokens -= float64(n)
	return nil
}
