package quicnet

import "context"

// Holder holds one connection that its callers share, dialled when there
// is none or the held one broke. Dial runs under the holder's lock, so
// callers wait for one dial rather than each making their own, and a
// caller's wait for the lock ends with its context.
type Holder struct {
	dial func(ctx context.Context) (*Conn, error)
	mu   chan struct{} // a lock whose wait respects a context
	conn *Conn
}

// NewHolder returns a holder that dials with dial: it may try several
// addresses, register over the connection, and wait between attempts.
func NewHolder(dial func(ctx context.Context) (*Conn, error)) *Holder {
	return &Holder{dial: dial, mu: make(chan struct{}, 1)}
}

func (h *Holder) lock(ctx context.Context) error {
	select {
	case h.mu <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *Holder) unlock() { <-h.mu }

// Get returns the held connection while it lives, and otherwise closes it
// and dials a new one.
func (h *Holder) Get(ctx context.Context) (*Conn, error) {
	if err := h.lock(ctx); err != nil {
		return nil, err
	}
	defer h.unlock()
	if h.conn != nil && h.conn.Err() == nil {
		return h.conn, nil
	}
	if h.conn != nil {
		_ = h.conn.Close()
		h.conn = nil
	}
	c, err := h.dial(ctx)
	if err != nil {
		return nil, err
	}
	h.conn = c
	return c, nil
}

// Drop closes c if it is still the held connection, so that the next Get
// dials again; then, if not nil, runs under the holder's lock, before any
// such dial: where a dialer that moves between addresses moves on. A c
// that another caller dropped already changes nothing.
func (h *Holder) Drop(c *Conn, then func()) {
	h.mu <- struct{}{}
	defer h.unlock()
	if c == nil || h.conn != c {
		return
	}
	_ = c.Close()
	h.conn = nil
	if then != nil {
		then()
	}
}

// Close closes the held connection; a later Get dials again.
func (h *Holder) Close() error {
	h.mu <- struct{}{}
	defer h.unlock()
	if h.conn == nil {
		return nil
	}
	err := h.conn.Close()
	h.conn = nil
	return err
}
