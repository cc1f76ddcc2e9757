package auditor

import (
	"context"
	"sync"
	"time"
)

// cosignCache shares one round of gathering the auditors' signatures among
// the callers that ask at once, and keeps the checkpoint a round returned
// (one a majority signed) while the ledger has not grown past it, for at
// most keep (its cosignatures carry the time they were made, which readers
// check for freshness): readers of /v1/checkpoint, the dashboard and
// /checkpoint/cosigned do not make every auditor sign on every call, and
// with an auditor down they do not each wait for it. An error is not
// kept, so the next call asks again.
type cosignCache struct {
	cosign  func(context.Context) ([]byte, error)
	size    func() int64                  // the ledger's size now
	sizeOf  func(cp []byte) (int64, bool) // cp's size, if it is a checkpoint
	timeout time.Duration                 // bounds one round
	keep    time.Duration                 // how long a checkpoint is kept
	now     func() time.Time

	mu     sync.Mutex
	cp     []byte
	cpSize int64
	cpAt   time.Time
	flight *cosignFlight
}

type cosignFlight struct {
	done chan struct{}
	cp   []byte
	err  error
}

// get returns the kept checkpoint if the ledger is still at its size and
// it is not older than keep, and
// otherwise the result of the round in flight, starting one if there is
// none. A caller whose ctx ends stops waiting; the round goes on, bounded
// by the timeout, for the others.
func (c *cosignCache) get(ctx context.Context) ([]byte, error) {
	c.mu.Lock()
	if c.cp != nil && c.cpSize == c.size() && c.now().Sub(c.cpAt) < c.keep {
		cp := c.cp
		c.mu.Unlock()
		return cp, nil
	}
	f := c.flight
	if f == nil {
		f = &cosignFlight{done: make(chan struct{})}
		c.flight = f
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
		go func() {
			defer cancel()
			f.cp, f.err = c.cosign(fctx)
			c.mu.Lock()
			c.flight = nil
			if f.err == nil {
				if size, ok := c.sizeOf(f.cp); ok {
					c.cp, c.cpSize, c.cpAt = f.cp, size, c.now()
				}
			}
			c.mu.Unlock()
			close(f.done)
		}()
	}
	c.mu.Unlock()
	select {
	case <-f.done:
		return f.cp, f.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
