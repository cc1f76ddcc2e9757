package quicnet

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/nzcfed/nzc/crypto"
)

// A holder dials once for all its callers, dials again only after the held
// connection was dropped, broke or was closed, and ignores a stale drop.
func TestHolder(t *testing.T) {
	f := newFederation(t)
	l := listen(t, f.config(t, "aggregator"), crypto.RoleHospital)
	ctx := testContext(t)
	acceptAll(ctx, l)
	var dials atomic.Int32
	h := NewHolder(func(ctx context.Context) (*Conn, error) {
		dials.Add(1)
		return Dial(ctx, l.Addr().String(), f.config(t, "hospital-1"), crypto.RoleAggregator)
	})
	defer h.Close()

	c1, err := h.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := h.Get(ctx); c != c1 || err != nil || dials.Load() != 1 {
		t.Fatalf("second Get: %p %v after %d dials; want the held %p after 1", c, err, dials.Load(), c1)
	}

	moved := 0
	h.Drop(c1, func() { moved++ })
	if c1.Err() == nil || moved != 1 {
		t.Fatalf("after Drop: connection error %v, moved %d times; want closed, moved once", c1.Err(), moved)
	}
	c2, err := h.Get(ctx)
	if err != nil || c2 == c1 || dials.Load() != 2 {
		t.Fatalf("Get after Drop: %p %v after %d dials; want a new connection after 2", c2, err, dials.Load())
	}
	h.Drop(c1, func() { moved++ }) // stale: c2 is held
	if c2.Err() != nil || moved != 1 {
		t.Fatalf("a stale Drop closed the held connection (%v) or moved on (%d)", c2.Err(), moved)
	}

	_ = c2.Close() // broken under the holder
	c3, err := h.Get(ctx)
	if err != nil || c3 == c2 || dials.Load() != 3 {
		t.Fatalf("Get after a break: %p %v after %d dials; want a new connection after 3", c3, err, dials.Load())
	}
	if err := h.Close(); err != nil || c3.Err() == nil {
		t.Fatalf("Close: %v, held connection error %v", err, c3.Err())
	}
}

// A dial's error reaches the caller and holds nothing; a caller waiting for
// another's dial stops waiting when its context ends.
func TestHolderDialErrorAndWait(t *testing.T) {
	refused := errors.New("refused")
	dialing, release := make(chan struct{}), make(chan struct{})
	calls := 0
	h := NewHolder(func(ctx context.Context) (*Conn, error) {
		calls++
		if calls == 2 {
			close(dialing)
			<-release
		}
		return nil, refused
	})
	if c, err := h.Get(t.Context()); c != nil || !errors.Is(err, refused) {
		t.Fatalf("Get = %v, %v; want the dial's error", c, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = h.Get(t.Context()) // the second dial, which blocks
	}()
	<-dialing
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if c, err := h.Get(ctx); c != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Get while another dials, with an ended context = %v, %v; want context.Canceled", c, err)
	}
	close(release)
	<-done
	if calls != 2 {
		t.Fatalf("%d dials; want 2 (the cancelled caller dials nothing)", calls)
	}
}
