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
	"github.com/nzcfed/nzc/party/auditor/intake"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

// LedgerSection is the replicated ledger's speed: signed charges committed
// per second on the federation's three auditors (loopback mutual TLS,
// durable stores fsynced on every raft batch), each charge verified and
// accounted by every auditor, and the latency from submission to the
// leader's acknowledgement — with Proofs, to the receipt the aggregator
// waits for (the entry, its inclusion proof and a checkpoint a majority
// cosigned, gathered by the leader's intake and verified against the
// auditors' keys), as a release needs it.
type LedgerSection struct {
	ChargesPerS Figure `json:"charges_per_s"`
	P50Ms       Figure `json:"p50_ms"`
	P99Ms       Figure `json:"p99_ms"`
	Nodes       int    `json:"nodes"`
	Charges     int    `json:"charges_per_rep"`
	Submitters  int    `json:"submitters"`
	Durable     bool   `json:"durable"`
	Proofs      bool   `json:"proofs"`
	// WithoutProofs are the same figures in the same run, committing
	// without receipts; ProofCost is the charges per second without
	// proofs over those with them, repetition by repetition.
	WithoutProofs *LedgerFigures `json:"without_proofs,omitempty"`
	ProofCost     Figure         `json:"proof_cost_ratio,omitzero"`
}

// LedgerFigures are the ledger's rate and latencies.
type LedgerFigures struct {
	ChargesPerS Figure `json:"charges_per_s"`
	P50Ms       Figure `json:"p50_ms"`
	P99Ms       Figure `json:"p99_ms"`
}

func (s LedgerSection) proofsLabel() string {
	if s.Proofs {
		return ", receipts proven"
	}
	return ", without receipts"
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
	sec := LedgerSection{Nodes: len(f.nodes), Charges: cfg.Charges, Submitters: cfg.Submitters, Durable: true, Proofs: !cfg.LedgerWithoutProofs}
	var p50s, p99s, rates, bareP50s, bareP99s, bareRates, costs []float64
	for rep := range cfg.Reps {
		if err := ctx.Err(); err != nil {
			return sec, err
		}
		progress("ledger", rep, cfg.Reps)
		leader, err := f.leader(ctx)
		if err != nil {
			return sec, err
		}
		cmds, err := f.signedCharges(2*rep, cfg.Charges)
		if err != nil {
			return sec, err
		}
		r, p50, p99, err := submitAll(ctx, leader, cmds, cfg.Submitters, nil)
		if err != nil {
			return sec, err
		}
		bareRates, bareP50s, bareP99s = append(bareRates, r), append(bareP50s, p50), append(bareP99s, p99)
		if !sec.Proofs {
			continue
		}
		proofs, err := f.receiptsAt(leader)
		if err != nil {
			return sec, err
		}
		if cmds, err = f.signedCharges(2*rep+1, cfg.Charges); err != nil {
			return sec, err
		}
		rp, p50, p99, err := submitAll(ctx, leader, cmds, cfg.Submitters, proofs)
		if err != nil {
			return sec, err
		}
		rates, p50s, p99s = append(rates, rp), append(p50s, p50), append(p99s, p99)
		costs = append(costs, r/rp)
	}
	progress("ledger", cfg.Reps, cfg.Reps)
	bare := LedgerFigures{ChargesPerS: NewFigure(bareRates), P50Ms: NewFigure(bareP50s), P99Ms: NewFigure(bareP99s)}
	if !sec.Proofs {
		sec.ChargesPerS, sec.P50Ms, sec.P99Ms = bare.ChargesPerS, bare.P50Ms, bare.P99Ms
		return sec, nil
	}
	sec.ChargesPerS, sec.P50Ms, sec.P99Ms = NewFigure(rates), NewFigure(p50s), NewFigure(p99s)
	sec.WithoutProofs, sec.ProofCost = &bare, NewFigure(costs)
	return sec, nil
}

// prover gathers the receipt of a committed charge as the leader's intake
// makes it for the aggregator, and verifies it as the aggregator does.
type prover struct {
	receipts *intake.Receipts
	verifier *ledger.Verifier
}

// receiptsAt returns the prover of the auditor whose node is leader.
func (f *federation) receiptsAt(leader *raftnode.Node) (*prover, error) {
	for _, a := range f.auditors {
		if a.Node() == leader {
			v, err := ledger.NewVerifier(f.auditorKeys)
			if err != nil {
				return nil, err
			}
			return &prover{receipts: intake.NewReceipts(a.Ledger().State(), a.CosignQuorum, 0), verifier: v}, nil
		}
	}
	return nil, fmt.Errorf("bench: the leader is not one of the federation's auditors")
}

func (p *prover) prove(ctx context.Context, cmd []byte, index int64) error {
	r, err := p.receipts.For(ctx, index)
	if err != nil {
		return err
	}
	c, err := ledger.DecodeCommand(cmd)
	if err != nil {
		return err
	}
	want, err := c.Digest()
	if err != nil {
		return err
	}
	_, _, err = p.verifier.Receipt(r, want)
	return err
}

// submitAll submits every command from the given number of concurrent
// clients and returns the committed commands per second and the median and
// 99th-percentile latency in milliseconds. Every command must be accepted
// and, with a prover, proven by its receipt before it counts as done.
func submitAll(ctx context.Context, n *raftnode.Node, cmds [][]byte, clients int, proofs *prover) (rate, p50, p99 float64, err error) {
	lat := make([]time.Duration, len(cmds))
	start := time.Now()
	err = parallel.ForEach(ctx, len(cmds), clients, func(ctx context.Context, i int) error {
		t0 := time.Now()
		res, _, err := n.Submit(ctx, cmds[i])
		if err != nil {
			return err
		}
		r, err := ledger.DecodeResult(res)
		if err != nil || r.Status != ledger.StatusAccepted {
			return fmt.Errorf("charge %d not accepted: %s %s %v", i, r.Status, r.Message, err)
		}
		if proofs != nil {
			if err := proofs.prove(ctx, cmds[i], int64(r.Index)); err != nil {
				return fmt.Errorf("charge %d has no valid receipt: %w", i, err)
			}
		}
		lat[i] = time.Since(t0)
		return nil
	})
	elapsed := time.Since(start)
	if err != nil {
		return 0, 0, 0, err
	}
	slices.Sort(lat)
	return float64(len(cmds)) / elapsed.Seconds(), ms(percentile(lat, 0.50)), ms(percentile(lat, 0.99)), nil
}
