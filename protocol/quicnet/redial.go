package quicnet

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/internal/backoff"
)

// Clock is the time source of the reconnecting dialer.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// After returns time.After(d).
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Backoff is exponential backoff with full jitter: before retry n (n ≥ 1)
// the dialer waits a uniformly random time in [0, min(Max, Min·2^(n−1))].
type Backoff struct {
	Min time.Duration // default 250ms
	Max time.Duration // default 30s
	// MaxAttempts bounds the attempts of Connect (0: until ctx ends).
	MaxAttempts int
	// Rand is the jitter source; nil means one seeded from crypto/rand.
	// It is used from one goroutine only.
	Rand *rand.Rand
	// Clock times the waits; nil means SystemClock.
	Clock Clock
}

// Defaults of Backoff.
const (
	DefaultBackoffMin = 250 * time.Millisecond
	DefaultBackoffMax = 30 * time.Second
)

// Delay returns the wait before retry n (n ≥ 1), drawn from r.
func (b Backoff) Delay(n int, r *rand.Rand) time.Duration {
	ceiling := backoff.Ceiling(n, orDefault(b.Min, DefaultBackoffMin), orDefault(b.Max, DefaultBackoffMax))
	return time.Duration(r.Int64N(int64(ceiling) + 1))
}

func (b *Backoff) init() {
	if b.Rand == nil {
		var seed [32]byte
		_, _ = crand.Read(seed[:])
		b.Rand = rand.New(rand.NewChaCha8(seed))
	}
	if b.Clock == nil {
		b.Clock = SystemClock{}
	}
}

// ErrGaveUp is matched when Connect ran out of attempts.
var ErrGaveUp = errors.New("gave up connecting")

// Target names the party a reconnecting dialer keeps a connection to.
type Target struct {
	// Name is how logs call the peer, e.g. "aggregator".
	Name string
	Addr string
	Role crypto.Role
}

// Connect dials t until it succeeds, waiting between attempts as b says,
// and logs each attempt through cfg.Logger ("connecting to aggregator at
// 10.0.0.1:7400, attempt 3, next in 1.2s"). It stops at once, without
// retrying, when either side refuses the other's certificate or role: that
// needs an operator, not patience.
func Connect(ctx context.Context, cfg Config, t Target, b Backoff) (*Conn, error) {
	b.init()
	log := cfg.logger()
	for attempt := 1; ; attempt++ {
		c, err := Dial(ctx, t.Addr, cfg, t.Role)
		if err == nil {
			log.Info(fmt.Sprintf("connected to %s at %s", t.Name, t.Addr), "attempt", attempt)
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("connecting to %s at %s: %w", t.Name, t.Addr, context.Cause(ctx))
		}
		if permanent(err) {
			log.Error(fmt.Sprintf("connecting to %s at %s refused; not retrying", t.Name, t.Addr), "attempt", attempt, "err", err)
			return nil, err
		}
		if b.MaxAttempts > 0 && attempt >= b.MaxAttempts {
			log.Error(fmt.Sprintf("connecting to %s at %s: giving up after %d attempts", t.Name, t.Addr, attempt), "err", err)
			return nil, fmt.Errorf("%w to %s at %s after %d attempts: %w", ErrGaveUp, t.Name, t.Addr, attempt, err)
		}
		d := b.Delay(attempt, b.Rand)
		log.Warn(fmt.Sprintf("connecting to %s at %s, attempt %d, next in %s", t.Name, t.Addr, attempt, roundDelay(d)),
			"attempt", attempt, "next", d, "err", err)
		if err := wait(ctx, b.Clock, d); err != nil {
			return nil, fmt.Errorf("connecting to %s at %s: %w", t.Name, t.Addr, err)
		}
	}
}

// KeepConnected keeps a connection to t for as long as ctx lasts: it
// connects (as Connect does, without an attempt limit), runs session on the
// connection, and when the connection or the session ends, waits a backoff
// delay and connects again. Sessions that end sooner than b.Max after they
// began count as consecutive failures and lengthen the wait, so a peer that
// accepts and at once drops the connection is not hammered; a longer
// session resets the backoff. It returns ctx's error, the error that
// stopped Connect for good, or a session's error that Stop marked as one
// reconnecting cannot mend.
func KeepConnected(ctx context.Context, cfg Config, t Target, b Backoff, session func(context.Context, *Conn) error) error {
	b.init()
	b.MaxAttempts = 0
	log := cfg.logger()
	stable := orDefault(b.Max, DefaultBackoffMax)
	short := 0
	for {
		c, err := Connect(ctx, cfg, t, b)
		if err != nil {
			return err
		}
		began := b.Clock.Now()
		serr := session(ctx, c)
		_ = c.Close()
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if stop := (*StopError)(nil); errors.As(serr, &stop) {
			log.Error(fmt.Sprintf("connection to %s at %s ended for good", t.Name, t.Addr), "err", stop.Err)
			return stop.Err
		}
		lasted := b.Clock.Now().Sub(began)
		if lasted < stable {
			short++
		} else {
			short = 1
		}
		d := b.Delay(short, b.Rand)
		log.Warn(fmt.Sprintf("connection to %s at %s ended after %s, reconnecting in %s", t.Name, t.Addr, roundDelay(lasted), roundDelay(d)),
			"short_sessions", short, "err", errors.Join(serr, c.Err()))
		if err := wait(ctx, b.Clock, d); err != nil {
			return err
		}
	}
}

// StopError is a session's error that reconnecting cannot mend, such as
// the peer refusing this party's configuration: KeepConnected returns its
// Err instead of reconnecting.
type StopError struct{ Err error }

func (e *StopError) Error() string { return e.Err.Error() }
func (e *StopError) Unwrap() error { return e.Err }

// Stop marks err as a session's error that ends KeepConnected.
func Stop(err error) error { return &StopError{Err: err} }

func permanent(err error) bool {
	return errors.Is(err, ErrRejected) || errors.Is(err, crypto.ErrUntrustedCertificate) ||
		errors.Is(err, crypto.ErrCertificateExpired) || errors.Is(err, crypto.ErrBadCertificate) ||
		errors.Is(err, crypto.ErrNoPeerIdentity) || errors.Is(err, crypto.ErrWrongRole)
}

func roundDelay(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

func wait(ctx context.Context, clock Clock, d time.Duration) error {
	select {
	case <-clock.After(d):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
