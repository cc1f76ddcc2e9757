// Package intake connects the auditors' replicated ledger to the
// federation: Server takes charges from the aggregator over QUIC and answers
// its budget reads, takes each hospital's own open-account and change-cap
// commands directly from that hospital (its certificate, the command's
// signer and the account must agree), and refuses every other party.
// It reads a federation's genesis file (ReadGenesis, GenesisDigest) and
// names its parties as the genesis registers them (Directory);
// federation/provision signs the genesis.
package intake

import (
	"math"
	"slices"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// ToWire turns a ledger result into the LedgerResult message.
func ToWire(r ledger.Result) *nzcpb.LedgerResult {
	out := &nzcpb.LedgerResult{Index: r.Index, Reason: r.Message, Subject: r.Subject}
	switch {
	case r.Status == ledger.StatusAccepted:
		out.Code = nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED
	case r.Status == ledger.StatusDuplicate:
		out.Code = nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_DUPLICATE
		out.Index = r.Original
	case r.Code.Budgetary():
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
			EpsilonSpent: a.Epsilon, Delta: a.CapDelta - a.DeltaSpent, QueriesAnswered: a.Answers, Charges: a.Charges,
			Curve: a.Curve, PureEpsilon: a.PureEpsilon, CapVersion: a.CapVersion,
			Suspended: a.Suspended, SuspendedReason: a.SuspendedReason}
		if d := req.GetDelta(); d > 0 {
			b.Delta = d
			b.EpsilonSpent = math.Inf(1)
			if c, err := grid.CurveOf(a.Curve); err == nil {
				if c.IsZero() {
					b.EpsilonSpent = 0
				} else if conv, err := c.FilterEpsilon(d); err == nil {
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
	for _, e := range s.Ensembles() {
		resp.Classes = e.Classes // every registration names the federation's
		if len(req.GetHospitalIds()) > 0 && !slices.Contains(req.GetHospitalIds(), e.Hospital) {
			continue
		}
		resp.Ensembles = append(resp.Ensembles, &nzcpb.RegisteredEnsemble{HospitalId: e.Hospital, Teachers: e.Teachers, Version: e.Version})
	}
	if id := req.GetStudentId(); id != "" {
		q, ok := s.Student(id)
		resp.Student = &nzcpb.StudentQuota{StudentId: id, Registered: ok, MaxAnswers: q.MaxAnswers, Answers: q.Answers}
	}
	return resp
}
