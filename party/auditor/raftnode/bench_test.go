package raftnode

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkSubmitTLSCluster measures committed submissions per second and
// the commit latency on a 3-node cluster on loopback mutual TLS with
// durable bbolt stores. Each operation is one Submit acknowledged after a
// majority has made it durable and the leader has applied it; 64 submitters
// run concurrently, so raft commits them in groups.
func BenchmarkSubmitTLSCluster(b *testing.B) {
	for _, via := range []string{"leader", "follower"} {
		b.Run("via-"+via, func(b *testing.B) {
			c := newTLSCluster(b, 3)
			leader := -1
			waitFor(b, 10*time.Second, "a leader", func() bool {
				for i, n := range c.nodes {
					if n.Status().State == "Leader" {
						leader = i
						return true
					}
				}
				return false
			})
			target := c.nodes[leader]
			if via == "follower" {
				target = c.nodes[(leader+1)%3]
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			var next atomic.Uint64
			var mu sync.Mutex
			var lat []time.Duration
			b.SetParallelism(32)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				local := make([]time.Duration, 0, 1024)
				for pb.Next() {
					cmd := chainCmd(next.Add(1), "charge-0123456789abcdef0123456789abcdef")
					t0 := time.Now()
					if _, _, err := target.Submit(ctx, cmd); err != nil {
						b.Error(err)
						return
					}
					local = append(local, time.Since(t0))
				}
				mu.Lock()
				lat = append(lat, local...)
				mu.Unlock()
			})
			elapsed := time.Since(start)
			b.StopTimer()
			reportLatency(b, lat, elapsed)
		})
	}
}

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
