package quicnet

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
)

// testTimeout bounds every wait of these tests; nothing sleeps.
const testTimeout = 15 * time.Second

func seeded(seed byte) *rand.ChaCha8 {
	var s [32]byte
	s[0] = seed
	return rand.NewChaCha8(s)
}

// federation holds the test parties' credentials.
type federation struct {
	ca, other *crypto.CA
	creds     map[string]*crypto.Credential // by party id
}

func newFederation(t testing.TB) *federation {
	t.Helper()
	now := time.Now()
	ca, err := crypto.NewCA(seeded(1), "test federation", now.Add(-6*time.Hour), now.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	other, err := crypto.NewCA(seeded(2), "other federation", now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	f := &federation{ca: ca, other: other, creds: map[string]*crypto.Credential{}}
	issue := func(name string, by *crypto.CA, p crypto.Peer, from, to time.Time) {
		c, err := by.Issue(seeded(byte(len(f.creds)+10)), crypto.IssueRequest{Peer: p, NotBefore: from, NotAfter: to})
		if err != nil {
			t.Fatal(err)
		}
		f.creds[name] = c
	}
	valid := func(name string, role crypto.Role) {
		issue(name, ca, crypto.Peer{Role: role, ID: name}, now.Add(-3*time.Hour), now.Add(time.Hour))
	}
	valid("aggregator", crypto.RoleAggregator)
	valid("hospital-1", crypto.RoleHospital)
	valid("student-1", crypto.RoleStudent)
	valid("auditor-1", crypto.RoleAuditor)
	issue("foreign-hospital", other, crypto.Peer{Role: crypto.RoleHospital, ID: "hospital-1"}, now.Add(-time.Hour), now.Add(time.Hour))
	issue("foreign-aggregator", other, crypto.Peer{Role: crypto.RoleAggregator, ID: "aggregator"}, now.Add(-time.Hour), now.Add(time.Hour))
	issue("expired-hospital", ca, crypto.Peer{Role: crypto.RoleHospital, ID: "hospital-1"}, now.Add(-2*time.Hour), now.Add(-time.Hour))
	issue("expired-aggregator", ca, crypto.Peer{Role: crypto.RoleAggregator, ID: "aggregator"}, now.Add(-2*time.Hour), now.Add(-time.Hour))
	return f
}

func (f *federation) config(t *testing.T, party string) Config {
	t.Helper()
	c, ok := f.creds[party]
	if !ok {
		t.Fatalf("no party %q", party)
	}
	return Config{CA: f.ca.Cert, Credential: c, Logger: testLogger(t)}
}

// testLogger logs to t until the test ends; a connection set up in the
// background may still log after that, and those lines are dropped (the
// testing package panics on a Log after a test completed).
func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct {
	t    *testing.T
	mu   sync.Mutex
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// listen starts a listener on a free loopback port, closed with the test.
func listen(t *testing.T, cfg Config, roles ...crypto.Role) *Listener {
	t.Helper()
	l, err := Listen("127.0.0.1:0", cfg, roles...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// acceptAll accepts connections in the background and delivers them.
func acceptAll(ctx context.Context, l *Listener) <-chan *Conn {
	ch := make(chan *Conn, 16)
	go func() {
		for {
			c, err := l.Accept(ctx)
			if err != nil {
				return
			}
			ch <- c
		}
	}()
	return ch
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// rejections collects what a listener refused.
type rejections struct{ ch chan error }

func newRejections() *rejections { return &rejections{ch: make(chan error, 16)} }

func (r *rejections) record(_ net.Addr, err error) { r.ch <- err }

// fakeClock hands every requested wait to the test, which fires it.
type fakeClock struct{ waits chan fakeWait }

type fakeWait struct {
	d    time.Duration
	fire chan time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{waits: make(chan fakeWait, 16)} }

func (c *fakeClock) Now() time.Time { return time.Unix(0, 0) }

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.waits <- fakeWait{d: d, fire: ch}
	return ch
}

// logRecorder is a slog handler that keeps messages.
type logRecorder struct {
	mu   *sync.Mutex
	msgs *[]string
}

func newLogRecorder() (*slog.Logger, func() []string) {
	r := logRecorder{mu: &sync.Mutex{}, msgs: new([]string)}
	return slog.New(r), func() []string {
		r.mu.Lock()
		defer r.mu.Unlock()
		return append([]string(nil), *r.msgs...)
	}
}

func (r logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.msgs = append(*r.msgs, fmt.Sprintf("%s %s", rec.Level, rec.Message))
	return nil
}
func (r logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r logRecorder) WithGroup(string) slog.Handler      { return r }
