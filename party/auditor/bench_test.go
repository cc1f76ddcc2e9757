package auditor

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nzcfed/nzc/internal/cputime"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/party/auditor/intake"
	"github.com/nzcfed/nzc/party/auditor/internal/auditortest"
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
		cmd, err := ledger.Sign(body, signer, ledgerKeys.Key(signer))
		if err != nil {
			b.Fatal(err)
		}
		return cmd
	}
	parties := []ledger.Party{
		ledgerKeys.Party("admin", ledger.RoleAdmin), ledgerKeys.Party("agg", ledger.RoleAggregator),
		ledgerKeys.Party("h1", ledger.RoleHospital),
		ledgerKeys.Party("hospital-a", ledger.RoleAuditor), ledgerKeys.Party("hospital-b", ledger.RoleAuditor),
		ledgerKeys.Party("regulator", ledger.RoleAuditor), ledgerKeys.Party("s1", ledger.RoleStudent),
	}
	for _, cmd := range [][]byte{
		sign(&ledger.Genesis{Origin: "bench.nzc/ledger", Parties: parties, EpsilonBound: 1e6, DeltaBound: 1e-5, Timestamp: 1}, "admin"),
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
	var refused atomic.Int64
	first := leader.Status().LastIndex
	var target auditortest.Submitter = leader
	if receipts {
		target = withReceipt{leader, rs}
	}
	cpu0, cpuOK := cputime.Process()
	auditortest.SubmitParallel(ctx, b, target, func(i uint64) []byte { return cmds[i-1] }, func(res []byte) {
		if r, _ := ledger.DecodeResult(res); r.Status != ledger.StatusAccepted {
			refused.Add(1)
		}
	})
	if refused.Load() > 0 {
		b.Fatalf("%d charges refused", refused.Load())
	}
	if cpu1, ok := cputime.Process(); ok && cpuOK {
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "cpu-µs/charge")
	}
	if entries := leader.Status().LastIndex - first; entries > 0 {
		b.ReportMetric(float64(b.N)/float64(entries), "charges/entry")
	}
}

// withReceipt submits a command and, when the ledger accepts it, waits for
// its receipt, as the intake does before it answers the aggregator.
type withReceipt struct {
	n  auditortest.Submitter
	rs *intake.Receipts
}

func (w withReceipt) Submit(ctx context.Context, cmd []byte) ([]byte, uint64, error) {
	res, idx, err := w.n.Submit(ctx, cmd)
	if err != nil {
		return nil, 0, err
	}
	if r, _ := ledger.DecodeResult(res); r.Status == ledger.StatusAccepted {
		if _, err := w.rs.For(ctx, int64(r.Index)); err != nil {
			return nil, 0, err
		}
	}
	return res, idx, nil
}
