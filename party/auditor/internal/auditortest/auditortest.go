// Package auditortest holds the helpers the tests and benchmarks of
// party/auditor and its subpackages share. It depends on the standard
// library only, so that every package under party/auditor, raftnode
// included, can use it from its tests.
package auditortest

import (
	"crypto/ed25519"
	"crypto/sha256"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"
)

// Logger returns a logger that writes at debug level to stderr when
// NZC_TEST_LOG is set, and discards everything otherwise.
func Logger(t testing.TB) *slog.Logger {
	if os.Getenv("NZC_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}

// WaitFor polls cond every 5ms until it holds, and fails the test naming
// what it waited for when it does not within the given time.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		<-tick.C
	}
}

// ReportLatency reports the throughput and the median and 99th-percentile
// latency of the commits timed in lat over elapsed, in place of ns/op.
// It sorts lat.
func ReportLatency(b *testing.B, lat []time.Duration, elapsed time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "commits/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// Key derives a fixed signing key from seed, so that a test's keys, and the
// golden files made with them, are the same on every run.
func Key(seed string) ed25519.PrivateKey {
	s := sha256.Sum256([]byte(seed))
	return ed25519.NewKeyFromSeed(s[:])
}
