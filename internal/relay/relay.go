// Package relay impairs links on loopback: a UDP or TCP forwarder that
// delays what it forwards by a fixed latency plus jitter and, for UDP, drops
// datagrams with a given probability, with a seeded source so that a run can
// be repeated. It stands in for a wide-area network between parties on one
// machine (the kernel's netem is not always available), one relay in front
// of each address a party dials.
//
// A relay forwards every datagram or byte stream it receives on its own
// address to its target. For UDP it keeps one upstream socket per client
// address, so the target sees one peer per client, as QUIC needs; for TCP
// it opens one upstream connection per accepted connection and keeps each
// direction's bytes in order (jitter never reorders a stream).
package relay

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Link is how a relay impairs what it forwards, the same in each direction.
type Link struct {
	// Delay is the one-way latency added to every datagram or chunk.
	Delay time.Duration
	// Jitter spreads the latency uniformly over [Delay−Jitter, Delay+Jitter]
	// (never below zero).
	Jitter time.Duration
	// Loss is the probability that a datagram is dropped, in [0, 1). A
	// stream (TCP) loses nothing: the kernel's TCP would resend it, so on a
	// stream loss shows only as delay, which Delay and Jitter model.
	Loss float64
}

// String is the link in a form for reports, for example "40ms±5ms 1% loss".
func (l Link) String() string {
	s := l.Delay.String()
	if l.Jitter > 0 {
		s += "±" + l.Jitter.String()
	}
	if l.Loss > 0 {
		s += fmt.Sprintf(" %g%% loss", 100*l.Loss)
	}
	return s
}

// ErrBadLink reports a Link with a negative delay or jitter, or a loss
// outside [0, 1).
var ErrBadLink = errors.New("relay: a link needs a delay and jitter ≥ 0 and a loss in [0, 1)")

func (l Link) validate() error {
	if l.Delay < 0 || l.Jitter < 0 || !(l.Loss >= 0 && l.Loss < 1) {
		return fmt.Errorf("%w (got %s)", ErrBadLink, l)
	}
	return nil
}

// Stats counts what a relay forwarded and dropped, both directions together.
type Stats struct {
	Forwarded uint64 // datagrams (UDP) or chunks (TCP) delivered
	Dropped   uint64 // datagrams dropped for Loss
}

// Relay is one impairing forwarder listening on a loopback address.
type Relay struct {
	target atomic.Pointer[string]
	link   atomic.Pointer[Link]

	mu  sync.Mutex // guards rng
	rng *rand.Rand

	forwarded, dropped atomic.Uint64

	close   func() error
	closed  chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
	addr    string
	connsMu sync.Mutex
	conns   map[closer]struct{}
}

// closer is a connection or socket the relay closes when it closes.
type closer interface{ Close() error }

func newRelay(target string, link Link, seed uint64) (*Relay, error) {
	if err := link.validate(); err != nil {
		return nil, err
	}
	r := &Relay{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), closed: make(chan struct{}), conns: map[closer]struct{}{}}
	r.target.Store(&target)
	r.link.Store(&link)
	return r, nil
}

// Addr is the relay's own address: dial this instead of the target.
func (r *Relay) Addr() string { return r.addr }

// SetLink changes the impairment for everything forwarded from now on.
func (r *Relay) SetLink(l Link) error {
	if err := l.validate(); err != nil {
		return err
	}
	r.link.Store(&l)
	return nil
}

// SetTarget changes where new clients are forwarded (for a target whose
// address is known only after the relay's own address was handed out).
func (r *Relay) SetTarget(addr string) { r.target.Store(&addr) }

// Stats returns the counts so far.
func (r *Relay) Stats() Stats {
	return Stats{Forwarded: r.forwarded.Load(), Dropped: r.dropped.Load()}
}

// Close stops the relay and closes every connection and socket it opened.
// What it still held back is not delivered.
func (r *Relay) Close() error {
	var err error
	r.once.Do(func() {
		close(r.closed)
		err = r.close()
		r.connsMu.Lock()
		for c := range r.conns {
			_ = c.Close()
		}
		r.connsMu.Unlock()
		r.wg.Wait()
	})
	return err
}

// track registers c to be closed with the relay; false when the relay is
// already closed (c is closed then).
func (r *Relay) track(c closer) bool {
	r.connsMu.Lock()
	defer r.connsMu.Unlock()
	select {
	case <-r.closed:
		_ = c.Close()
		return false
	default:
	}
	r.conns[c] = struct{}{}
	return true
}

// latency draws one datagram's or chunk's delay, and whether a datagram is
// lost (lossy is false for streams).
func (r *Relay) latency(lossy bool) (time.Duration, bool) {
	l := *r.link.Load()
	r.mu.Lock()
	defer r.mu.Unlock()
	if lossy && l.Loss > 0 && r.rng.Float64() < l.Loss {
		return 0, true
	}
	d := l.Delay
	if l.Jitter > 0 {
		d += time.Duration(r.rng.Int64N(int64(2*l.Jitter)+1)) - l.Jitter
	}
	return max(d, 0), false
}
