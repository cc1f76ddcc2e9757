package auditor

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nzcfed/nzc/internal/cputime"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/party/auditor/intake"
)

// BenchmarkSubmitLedgerTLSCluster is raftnode's BenchmarkSubmitTLSCluster with the real
// state machine: each operation is one signed ledger charge, verified and
// accounted by every auditor, which then signs a checkpoint per batch.
//
// The sub-benchmarks compare group commit (the default: concurrent
// submissions packed into one raft entry) with one entry per charge.
func BenchmarkSubmitLedgerTLSCluster(b *testing.B) {
	for _, bc := range []struct {
		name      string
		maxPacked int
		receipts  bool
	}{{"packed", 0, false}, {"unpacked", 1, false}, {"packed+receipt", 0, true}} {
		b.Run(bc.name, func(b *testing.B) { benchSubmitLedger(b, bc.maxPacked, bc.receipts) })
	}
}

// benchSubmitLedger commits charges on a 3-auditor cluster; with receipts
// each charge also waits for its receipt (inclusion proof and a checkpoint
// a majority cosigned), as the intake answers the aggregator.
func benchSubmitLedger(b *testing.B, maxPacked int, receipts bool) {
	c := newTestCluster(b, []string{"hospital-a", "hospital-b", "regulator"}, func(c *Config) { c.Raft.MaxPacked = maxPacked })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sign := func(body ledger.Body, signer string) []byte {
		cmd, err := ledger.Sign(body, signer, ledgerKey(signer))
		if err != nil {
			b.Fatal(err)
		}
		return cmd
	}
	parties := []ledger.Party{
		ledgerParty("admin", ledger.RoleAdmin), ledgerParty("agg", ledger.RoleAggregator),
		ledgerParty("h1", ledger.RoleHospital),
		ledgerParty("hospital-a", ledger.RoleAuditor), ledgerParty("hospital-b", ledger.RoleAuditor),
		ledgerParty("regulator", ledger.RoleAuditor), ledgerParty("s1", ledger.RoleStudent),
	}
	for _, cmd := range [][]byte{
		sign(&ledger.Genesis{Origin: "bench.nzc/ledger", Parties: parties, Timestamp: 1}, "admin"),
		sign(&ledger.OpenAccount{Hospital: "h1", CapEpsilon: 1e6, CapDelta: 1e-5, Timestamp: 2}, "h1"),
		sign(&ledger.RegisterStudent{Student: "s1", Timestamp: 3}, "admin"),
	} {
		res, _, err := c.auds[0].Node().Submit(ctx, cmd)
		if err != nil {
			b.Fatal(err)
		}
		if r, _ := ledger.DecodeResult(res); r.Status != ledger.StatusAccepted {
			b.Fatalf("setup: %s %s", r.Status, r.Message)
		}
	}
	leader := c.auds[0].Node()
	rs := intake.NewReceipts(c.auds[0].Ledger().State(), c.auds[0].CosignQuorum, 0)
	curve := mechanism.Gaussian(mechanism.DefaultGrid(), math.Sqrt2, 400).Values()
	cmds := make([][]byte, b.N)
	for i := range cmds {
		batch := fmt.Sprintf("batch-%d", i)
		cmds[i] = sign(&ledger.Charge{BatchID: batch, Student: "s1", Hospitals: []string{"h1"}, Mechanism: "gnmax",
			Params: mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Classes: 10, Sigma: 400}.LedgerParams(), Queries: 1, Answers: 1,
			Curve: curve, AnswersHash: sha256.Sum256([]byte(batch)), Timestamp: int64(10 + i)}, "agg")
	}
	var next atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var refused atomic.Int64
	first := leader.Status().LastIndex
	cpu0, cpuOK := cputime.Process()
	b.SetParallelism(32)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		local := make([]time.Duration, 0, 1024)
		for pb.Next() {
			cmd := cmds[next.Add(1)-1]
			t0 := time.Now()
			res, _, err := leader.Submit(ctx, cmd)
			if err != nil {
				b.Error(err)
				return
			}
			r, _ := ledger.DecodeResult(res)
			if r.Status != ledger.StatusAccepted {
				refused.Add(1)
			} else if receipts {
				if _, err := rs.For(ctx, int64(r.Index)); err != nil {
					b.Error(err)
					return
				}
			}
			local = append(local, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, local...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if refused.Load() > 0 {
		b.Fatalf("%d charges refused", refused.Load())
	}
	if cpu1, ok := cputime.Process(); ok && cpuOK {
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "cpu-µs/charge")
	}
	if entries := leader.Status().LastIndex - first; entries > 0 {
		b.ReportMetric(float64(b.N)/float64(entries), "charges/entry")
	}
	reportLatency(b, lat, elapsed)
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
