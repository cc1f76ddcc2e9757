// Package intake connects the privacy ledger to the auditor cluster and to
// the federation: Machine is the ledger as a replicated state machine of
// party/auditor, and Server takes charges from the aggregator over QUIC
// (only a peer whose certificate names the aggregator role may submit) and
// answers budget reads.
package intake

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// Machine is a ledger.State as a replicated state machine. Apply returns
// the JSON encoding of the ledger.Result (decode it with DecodeResult):
// a refusal is a recorded, deterministic outcome, not an error.
type Machine struct {
	state *ledger.State
	id    string
	key   ed25519.PrivateKey
}

// NewMachine returns an empty ledger whose checkpoints are signed by the
// auditor id with key (nil key: no signing).
func NewMachine(id string, key ed25519.PrivateKey) *Machine {
	return &Machine{state: ledger.New(), id: id, key: key}
}

// State is the ledger, for reads.
func (m *Machine) State() *ledger.State { return m.state }

// Apply applies one command.
func (m *Machine) Apply(_ uint64, cmd []byte) ([]byte, error) {
	res, err := m.state.Apply(cmd)
	if err != nil {
		return nil, err
	}
	// JSON has no infinities: an unbounded figure is reported as the
	// largest float, which reads as "over any cap".
	for _, f := range []*float64{&res.SpentEpsilon, &res.ChargeEpsilon, &res.CapEpsilon} {
		if math.IsInf(*f, 1) || math.IsNaN(*f) {
			*f = math.MaxFloat64
		}
	}
	return json.Marshal(res)
}

// Snapshot returns the ledger's snapshot.
func (m *Machine) Snapshot() ([]byte, error) { return m.state.Snapshot() }

// Restore replaces the ledger with a snapshot.
func (m *Machine) Restore(b []byte) error { return m.state.Restore(b) }

// Checkpoint returns this auditor's signature on the checkpoint of the
// whole log; treeSize, when not 0, must be the log's current size.
func (m *Machine) Checkpoint(treeSize uint64) ([]byte, error) {
	if m.key == nil {
		return nil, errors.New("intake: this auditor has no signing key")
	}
	cp, err := m.state.Checkpoint()
	if err != nil {
		return nil, err
	}
	if treeSize != 0 && uint64(cp.Size) != treeSize {
		return nil, fmt.Errorf("intake: the log has %d entries, not %d: ask for the current checkpoint", cp.Size, treeSize)
	}
	signer, err := ledger.NewCheckpointSigner(m.id, m.key)
	if err != nil {
		return nil, err
	}
	return ledger.SignCheckpoint(cp, signer)
}

// DecodeResult decodes what Apply returned.
func DecodeResult(b []byte) (ledger.Result, error) {
	var r ledger.Result
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("intake: undecodable ledger result: %w", err)
	}
	return r, nil
}

// ToWire turns a ledger result into the LedgerResult message.
func ToWire(r ledger.Result) *nzcpb.LedgerResult {
	out := &nzcpb.LedgerResult{Index: r.Index, Reason: r.Message}
	switch {
	case r.Status == ledger.StatusAccepted:
		out.Code = nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED
	case r.Status == ledger.StatusDuplicate:
		out.Code = nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_DUPLICATE
		out.Index = r.Original
	case r.Code == ledger.CodeCapExceeded || r.Code == ledger.CodeDeltaExhausted ||
		r.Code == ledger.CodeQuotaExceeded || r.Code == ledger.CodeSessionExhausted:
		out.Code = nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_BUDGET_EXHAUSTED
	default:
		out.Code = nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_REJECTED
	}
	if out.Reason == "" {
		out.Reason = r.Code.String()
	}
	return out
}

// Budgets reads hospitals' budgets from the ledger: ε spent at req's δ, or
// at each hospital's remaining cap δ when req.Delta is 0.
func Budgets(s *ledger.State, req *nzcpb.BudgetRequest) *nzcpb.BudgetResponse {
	resp := &nzcpb.BudgetResponse{LedgerSize: uint64(s.TreeSize())}
	grid := mechanism.DefaultGrid()
	for _, a := range s.Accounts() {
		if len(req.GetHospitalIds()) > 0 && !slices.Contains(req.GetHospitalIds(), a.Hospital) {
			continue
		}
		b := &nzcpb.HospitalBudget{HospitalId: a.Hospital, EpsilonCap: a.CapEpsilon, DeltaCap: a.CapDelta,
			EpsilonSpent: a.Epsilon, Delta: a.CapDelta - a.DeltaSpent, QueriesAnswered: a.Answers, Charges: a.Charges}
		if d := req.GetDelta(); d > 0 {
			b.Delta = d
			b.EpsilonSpent = math.Inf(1)
			if c, err := grid.CurveOf(a.Curve); err == nil {
				if c.IsZero() {
					b.EpsilonSpent = 0
				} else if conv, err := c.Epsilon(d); err == nil {
					b.EpsilonSpent = conv.Epsilon
				}
			}
		}
		if math.IsInf(b.EpsilonSpent, 0) || math.IsNaN(b.EpsilonSpent) {
			b.EpsilonSpent = math.MaxFloat64 // the wire cannot carry +Inf readably; the cap check refuses it
		}
		if b.Delta < 0 {
			b.Delta = 0
		}
		resp.Budgets = append(resp.Budgets, b)
	}
	return resp
}
