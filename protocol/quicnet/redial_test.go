package quicnet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/protocol"
)

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	r := rand.New(seeded(3))
	for n := 1; n <= 70; n++ {
		ceiling := min(b.Max, b.Min<<min(n-1, 20))
		var maxSeen time.Duration
		for range 200 {
			d := b.Delay(n, r)
			if d < 0 || d > ceiling {
				t.Fatalf("retry %d: delay %v outside [0, %v]", n, d, ceiling)
			}
			maxSeen = max(maxSeen, d)
		}
		// Full jitter spreads over the whole range: with 200 uniform draws
		// the largest is below 90% of the ceiling with probability
		// 0.9^200 < 1e-9.
		if maxSeen < ceiling*9/10 {
			t.Fatalf("retry %d: largest of 200 delays %v, ceiling %v", n, maxSeen, ceiling)
		}
	}
	// The same seed gives the same delays.
	a, c := rand.New(seeded(4)), rand.New(seeded(4))
	for n := 1; n < 10; n++ {
		if b.Delay(n, a) != b.Delay(n, c) {
			t.Fatal("delays differ for equal seeds")
		}
	}
}

// silentAggregator opens a loopback UDP port where nobody speaks QUIC,
// closed with the test, and returns it with a hospital's config that gives
// up each handshake after 200ms.
func silentAggregator(t *testing.T) (net.PacketConn, Config) {
	t.Helper()
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	cfg := newFederation(t).config(t, "hospital-1")
	cfg.HandshakeTimeout = 200 * time.Millisecond
	return silent, cfg
}

// TestConnectGivesUp dials a UDP port where nobody speaks QUIC.
func TestConnectGivesUp(t *testing.T) {
	ctx := testContext(t)
	silent, cfg := silentAggregator(t)
	logger, logs := newLogRecorder()
	cfg.Logger = logger
	clock := newFakeClock()
	go func() {
		for w := range clock.waits {
			w.fire <- time.Time{}
		}
	}()
	defer close(clock.waits)
	target := Target{Name: "aggregator", Addr: silent.LocalAddr().String(), Role: crypto.RoleAggregator}
	_, err := Connect(ctx, cfg, target, Backoff{MaxAttempts: 3, Rand: rand.New(seeded(5)), Clock: clock})
	if !errors.Is(err, ErrGaveUp) {
		t.Fatalf("err = %v, want ErrGaveUp", err)
	}
	var want []string
	for _, m := range logs() {
		if strings.Contains(m, "connecting to aggregator at "+target.Addr+", attempt ") {
			want = append(want, m)
		}
	}
	if len(want) != 2 || !strings.Contains(want[1], "attempt 2, next in ") {
		t.Fatalf("progress logs = %q", logs())
	}
}

func TestConnectCancelledWhileWaiting(t *testing.T) {
	silent, cfg := silentAggregator(t)
	clock := newFakeClock()
	ctx, cancel := context.WithCancel(testContext(t))
	done := make(chan error, 1)
	go func() {
		_, err := Connect(ctx, cfg, Target{Name: "aggregator", Addr: silent.LocalAddr().String(), Role: crypto.RoleAggregator},
			Backoff{Rand: rand.New(seeded(6)), Clock: clock})
		done <- err
	}()
	recv(t, clock.waits, "a backoff wait") // never fired
	cancel()
	if err := recv(t, done, "Connect to return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// hospitalsAggregator starts an aggregator that accepts hospitals only and
// keeps accepting them until the test ends.
func hospitalsAggregator(t *testing.T) (*federation, context.Context, *Listener) {
	t.Helper()
	f := newFederation(t)
	ctx := testContext(t)
	l := listen(t, f.config(t, "aggregator"), crypto.RoleHospital)
	acceptAll(ctx, l)
	return f, ctx, l
}

func TestConnectDoesNotRetryRefusal(t *testing.T) {
	f, ctx, l := hospitalsAggregator(t)
	clock := newFakeClock()
	_, err := Connect(ctx, f.config(t, "student-1"), Target{Name: "aggregator", Addr: l.Addr().String(), Role: crypto.RoleAggregator},
		Backoff{Rand: rand.New(seeded(7)), Clock: clock})
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("err = %v", err)
	}
	if len(clock.waits) != 0 {
		t.Fatal("Connect waited to retry a refusal")
	}
}

// TestReconnectAfterServerRestart: a hospital that keeps a connection to
// the aggregator comes back after the aggregator restarts on the same
// address, and serves requests again.
func TestReconnectAfterServerRestart(t *testing.T) {
	f := newFederation(t)
	ctx := testContext(t)
	acfg := f.config(t, "aggregator")
	l := listen(t, acfg, crypto.RoleHospital)
	addr := l.Addr().String()
	accepted := acceptAll(ctx, l)

	clock := newFakeClock()
	sessions := make(chan *Conn, 4)
	kctx, stop := context.WithCancel(ctx)
	kept := make(chan error, 1)
	go func() {
		kept <- KeepConnected(kctx, f.config(t, "hospital-1"), Target{Name: "aggregator", Addr: addr, Role: crypto.RoleAggregator},
			Backoff{Min: time.Second, Max: time.Minute, Rand: rand.New(seeded(8)), Clock: clock},
			func(ctx context.Context, c *Conn) error {
				sessions <- c
				return c.Serve(ctx, echoMux(crypto.RoleAggregator))
			})
	}()
	recv(t, sessions, "first session")
	agg := recv(t, accepted, "first connection")
	if _, body, err := agg.Call(ctx, protocol.TypeLedgerSubmit, []byte("one")); err != nil || string(body) != "one" {
		t.Fatalf("first call: %q %v", body, err)
	}

	// Restart the aggregator. The hospital waits a backoff delay; the
	// test lets it expire only once the new listener is up.
	l.Close()
	w := recv(t, clock.waits, "reconnect wait")
	if w.d < 0 || w.d > time.Second {
		t.Fatalf("first reconnect delay %v outside [0, 1s]", w.d)
	}
	l2, err := Listen(addr, acfg, crypto.RoleHospital)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	accepted2 := acceptAll(ctx, l2)
	w.fire <- time.Time{}
	recv(t, sessions, "second session")
	agg2 := recv(t, accepted2, "second connection")
	if _, body, err := agg2.Call(ctx, protocol.TypeLedgerSubmit, []byte("two")); err != nil || string(body) != "two" {
		t.Fatalf("call after restart: %q %v", body, err)
	}
	stop()
	if err := recv(t, kept, "KeepConnected to return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("KeepConnected = %v", err)
	}
}

// TestKeepConnectedBacksOffShortSessions: a peer that accepts and drops
// the connection at once makes the waits grow instead of staying at Min.
func TestKeepConnectedBacksOffShortSessions(t *testing.T) {
	f, ctx, l := hospitalsAggregator(t)
	clock := newFakeClock() // Now never moves: every session is short
	b := Backoff{Min: 100 * time.Millisecond, Max: time.Hour, Rand: rand.New(seeded(10)), Clock: clock}
	kctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- KeepConnected(kctx, f.config(t, "hospital-1"), Target{Name: "aggregator", Addr: l.Addr().String(), Role: crypto.RoleAggregator},
			b, func(context.Context, *Conn) error { return errors.New("dropped") })
	}()
	var longest time.Duration
	for n := 1; n <= 6; n++ {
		w := recv(t, clock.waits, "reconnect wait")
		if ceiling := b.Min << (n - 1); w.d > ceiling {
			t.Fatalf("wait %d: %v above its ceiling %v", n, w.d, ceiling)
		}
		longest = max(longest, w.d)
		w.fire <- time.Time{}
	}
	if longest <= b.Min {
		t.Fatalf("six short sessions in a row never waited more than Min (%v)", b.Min)
	}
	stop()
	if err := recv(t, done, "KeepConnected to return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

// A session that ends with Stop ends KeepConnected with its error, without
// another connection.
func TestKeepConnectedStops(t *testing.T) {
	f, ctx, l := hospitalsAggregator(t)
	clock := newFakeClock()
	b := Backoff{Min: 100 * time.Millisecond, Max: time.Hour, Rand: rand.New(seeded(10)), Clock: clock}
	refused := errors.New("refused configuration")
	sessions := 0
	err := KeepConnected(ctx, f.config(t, "hospital-1"), Target{Name: "aggregator", Addr: l.Addr().String(), Role: crypto.RoleAggregator},
		b, func(context.Context, *Conn) error { sessions++; return Stop(fmt.Errorf("hello: %w", refused)) })
	if !errors.Is(err, refused) || sessions != 1 {
		t.Fatalf("KeepConnected returned %v after %d sessions, want the refusal after 1", err, sessions)
	}
}
