// Package auditortest holds the helpers the tests and benchmarks of
// party/auditor and its subpackages share. It depends on the standard
// library only, so that every package under party/auditor, raftnode
// included, can use it from its tests.
package auditortest

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
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

// Submitter is a raft node as the benchmarks use it.
type Submitter interface {
	Submit(ctx context.Context, cmd []byte) (result []byte, index uint64, err error)
}

// SubmitParallel submits cmd(i) for i = 1..b.N through target from 32
// goroutines per GOMAXPROCS, times each Submit, stops the timer and reports
// the throughput and latencies (see reportLatency). check, when not nil,
// sees each result outside the timing. A failed Submit is reported with
// b.Error and ends its goroutine.
func SubmitParallel(ctx context.Context, b *testing.B, target Submitter, cmd func(i uint64) []byte, check func(result []byte)) {
	var next atomic.Uint64
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism(32)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		local := make([]time.Duration, 0, 1024)
		for pb.Next() {
			c := cmd(next.Add(1))
			t0 := time.Now()
			res, _, err := target.Submit(ctx, c)
			if err != nil {
				b.Error(err)
				return
			}
			local = append(local, time.Since(t0))
			if check != nil {
				check(res)
			}
		}
		mu.Lock()
		lat = append(lat, local...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	reportLatency(b, lat, elapsed)
}

// reportLatency reports the throughput and the median and 99th-percentile
// latency of the commits timed in lat over elapsed, in place of ns/op.
// It sorts lat.
func reportLatency(b *testing.B, lat []time.Duration, elapsed time.Duration) {
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
