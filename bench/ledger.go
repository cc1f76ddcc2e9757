package bench

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/internal/parallel"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

// LedgerSection is the replicated ledger's speed: signed charges committed
// per second on the federation's three auditors (loopback mutual TLS,
// durable stores fsynced on every raft batch), each charge verified and
// accounted by every auditor, and the latency from submission to the
// leader's acknowledgement.
type LedgerSection struct {
	ChargesPerS Figure `json:"charges_per_s"`
	P50Ms       Figure `json:"p50_ms"`
	P99Ms       Figure `json:"p99_ms"`
	Nodes       int    `json:"nodes"`
	Charges     int    `json:"charges_per_rep"`
	Submitters  int    `json:"submitters"`
	Durable     bool   `json:"durable"`
}

// signedCharges returns n charges of a 256-query GNMax batch to every
// hospital, signed by the federation's aggregator.
func (f *federation) signedCharges(rep, n int) ([][]byte, error) {
	p, err := f.Party(crypto.RoleAggregator, "aggregator", f.log)
	if err != nil {
		return nil, err
	}
	var hs []string
	for _, h := range f.m.ByRole(crypto.RoleHospital) {
		hs = append(hs, h.ID)
	}
	slices.Sort(hs)
	st := f.m.ByRole(crypto.RoleStudent)[0].ID
	gp := benchMechanism()
	gp.Teachers = 250
	cost, err := gp.Charge(mechanism.DefaultGrid(), 256, 0)
	if err != nil {
		return nil, err
	}
	curve := cost.RDP.Values()
	out := make([][]byte, n)
	for i := range out {
		batch := fmt.Sprintf("bench-ledger-%d-%d", rep, i)
		out[i], err = ledger.Sign(&ledger.Charge{BatchID: batch, Student: st, Hospitals: hs, Mechanism: string(gp.Mechanism),
			Params: gp.LedgerParams(), Queries: 256, Answers: 256, Curve: curve,
			AnswersHash: sha256.Sum256([]byte(batch)), Timestamp: time.Now().UnixNano()}, p.ID, p.SigningKey)
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func runLedger(ctx context.Context, cfg Config, f *federation, progress Progress) (LedgerSection, error) {
	sec := LedgerSection{Nodes: len(f.nodes), Charges: cfg.Charges, Submitters: cfg.Submitters, Durable: true}
	var p50s, p99s []float64
	rate, err := repeat(ctx, cfg.Reps, func(rep int) (float64, error) {
		progress("ledger", rep, cfg.Reps)
		cmds, err := f.signedCharges(rep, cfg.Charges)
		if err != nil {
			return 0, err
		}
		leader, err := f.leader(ctx)
		if err != nil {
			return 0, err
		}
		r, p50, p99, err := submitAll(ctx, leader, cmds, cfg.Submitters)
		if err != nil {
			return 0, err
		}
		p50s, p99s = append(p50s, p50), append(p99s, p99)
		return r, nil
	})
	if err != nil {
		return sec, err
	}
	progress("ledger", cfg.Reps, cfg.Reps)
	sec.ChargesPerS, sec.P50Ms, sec.P99Ms = rate, NewFigure(p50s), NewFigure(p99s)
	return sec, nil
}

// submitAll submits every command from the given number of concurrent
// clients and returns the committed commands per second and the median and
// 99th-percentile latency in milliseconds. Every command must be accepted.
func submitAll(ctx context.Context, n *raftnode.Node, cmds [][]byte, clients int) (rate, p50, p99 float64, err error) {
	lat := make([]time.Duration, len(cmds))
	start := time.Now()
	err = parallel.ForEach(ctx, len(cmds), clients, func(ctx context.Context, i int) error {
		t0 := time.Now()
		res, _, err := n.Submit(ctx, cmds[i])
		if err != nil {
			return err
		}
		lat[i] = time.Since(t0)
		if r, err := ledger.DecodeResult(res); err != nil || r.Status != ledger.StatusAccepted {
			return fmt.Errorf("charge %d not accepted: %s %s %v", i, r.Status, r.Message, err)
		}
		return nil
	})
	elapsed := time.Since(start)
	if err != nil {
		return 0, 0, 0, err
	}
	slices.Sort(lat)
	pct := func(p float64) float64 { return ms(lat[min(len(lat)-1, int(p*float64(len(lat))))]) }
	return float64(len(cmds)) / elapsed.Seconds(), pct(0.50), pct(0.99), nil
}
