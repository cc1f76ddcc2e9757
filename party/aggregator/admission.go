package aggregator

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// maxRemembered bounds the refusals the aggregator remembers by batch id.
const maxRemembered = 4096

// refusals remembers the batches refused for budget or by the ledger, so
// that a retry of the same batch id gets the same refusal without asking
// the hospitals or drawing noise again. Guarded by Aggregator.mu.
type refusals struct {
	byBatch map[string]refused
	order   []string // oldest first, for eviction
}

type refused struct {
	reason string
	err    *protocol.Error
}

func refusalKey(student, batch string) string { return student + "\x00" + batch }

// rememberRefusal records a batch's refusal; the oldest is forgotten when
// maxRemembered are kept (a retry of a forgotten batch is decided again, from
// the same public state).
func (a *Aggregator) rememberRefusal(student, batch, reason string, err *protocol.Error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := refusalKey(student, batch)
	if _, ok := a.refused.byBatch[k]; !ok {
		a.refused.order = append(a.refused.order, k)
	}
	a.refused.byBatch[k] = refused{reason: reason, err: err}
	for len(a.refused.order) > maxRemembered {
		delete(a.refused.byBatch, a.refused.order[0])
		a.refused.order = a.refused.order[1:]
	}
}

func (a *Aggregator) refusedBefore(student, batch string) (refused, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.refused.byBatch[refusalKey(student, batch)]
	return r, ok
}

// admit decides, before any hospital is asked for votes and before any
// noise is drawn, which of the connected hospitals' budgets can take the
// batch at its data-independent worst case: every one of its nq queries
// answered. It first refuses a batch that would pass the student's answer
// quota at that worst case (for every mechanism). It reads each hospital's spent ε and remaining δ from the
// ledger and leaves out a hospital the ledger is certain to refuse: one
// with no account, or whose cap the worst case, composed with what it has
// spent (the account's curve and pure-ε sum, from the budget read), would
// pass, as the ledger's gate composes them. The batch goes on with the
// others while at least the quorum remains, and is refused otherwise. The
// ledger makes the final decision, also at the worst case; so which
// hospitals vote, whether a batch is refused and what the refusal says
// depend only on public state and the batch's size, never on the votes. A
// hospital that lowers its own cap therefore affects only itself. Under a
// mechanism that answers in sessions the hospitals asked are those of the
// student's session (sessionAsks), and unpaid names, with the reason,
// those that cannot pay for a new session's whole cost.
func (a *Aggregator) admit(ctx context.Context, student, batch string, hs []*hospitalEntry, classes, nq int, p mechanism.Params) (keep []*hospitalEntry, left []string, unpaid map[string]string, perr *protocol.Error) {
	ids := make([]string, len(hs))
	for i, h := range hs {
		ids[i] = h.id
	}
	bctx, cancel := context.WithTimeout(ctx, a.cfg.LedgerTimeout)
	resp, err := a.cfg.Ledger.Budget(bctx, &nzcpb.BudgetRequest{HospitalIds: ids, StudentId: student})
	cancel()
	if err != nil {
		return nil, nil, nil, &protocol.Error{Code: protocol.CodeLedgerUnavailable, RetryAfter: time.Second,
			Message: fmt.Sprintf("the ledger did not answer the budget read for batch %s (%v): nothing was asked of the hospitals or drawn; retry the batch", batch, err)}
	}
	if perr := quotaAdmits(resp.GetStudent(), student, batch, nq); perr != nil {
		return nil, nil, nil, perr
	}
	hs, left, reasons := ledgerSuspended(resp, hs)
	a.mu.Lock()
	a.suspendedInLedger = slices.Clone(left)
	a.mu.Unlock()
	lifted, err := a.burns.lift(append(slices.Clone(a.cfg.Suspended), left...))
	if len(lifted) > 0 {
		a.log.Warn("burnt sessions' marks lifted: a hospital of theirs is suspended, and is left out of the next session", "hospitals", lifted, "suspended", append(slices.Clone(a.cfg.Suspended), left...))
	}
	if err != nil {
		return nil, nil, nil, protocol.Errorf(protocol.CodeUnavailable, "batch %s is not admitted: %v; nothing was asked of the hospitals or drawn", batch, err)
	}
	hs, unregistered, why, perr := registeredEnsembles(resp, batch, hs, classes)
	if perr != nil {
		return nil, nil, nil, perr
	}
	left, reasons = append(left, unregistered...), append(reasons, why...)
	budgets := map[string]*nzcpb.HospitalBudget{}
	for _, b := range resp.GetBudgets() {
		budgets[b.GetHospitalId()] = b
	}
	if p.Mechanism.Sessions() {
		if len(hs) < a.cfg.Quorum {
			return nil, nil, nil, a.tooFew(batch, hs, left, nq, reasons)
		}
		p.Teachers, p.Classes = 0, classes
		for _, h := range hs {
			p.Teachers += h.teachers
		}
		whole, err := p.Charge(a.grid, 0, 0)
		if err != nil {
			return nil, nil, nil, protocol.Errorf(protocol.CodeBadRequest, "batch %s: the cost of a session: %v", batch, err)
		}
		for _, h := range hs {
			if why := a.cannotPay(budgets[h.id], whole, 0); why != "" {
				if unpaid == nil {
					unpaid = map[string]string{}
				}
				unpaid[h.id] = why
			}
		}
		keep, out, perr := a.sessionAsks(student, batch, hs, unpaid, classes)
		if perr != nil {
			return nil, nil, nil, perr
		}
		keep, left, _, perr = a.reserve(ctx, student, batch, keep, append(left, out...), reasons, classes, nq, p)
		if perr != nil {
			return nil, nil, nil, perr
		}
		return keep, left, unpaid, nil
	}
	keep = hs
	// The worst case depends on the ensemble, so it is recomputed whenever
	// a hospital is left out, until every remaining one can pay for it.
	for {
		p.Teachers, p.Classes = 0, classes
		for _, h := range keep {
			p.Teachers += h.teachers
		}
		if len(keep) == 0 {
			break
		}
		worst, err := p.Charge(a.grid, nq, 0)
		if err != nil {
			return nil, nil, nil, protocol.Errorf(protocol.CodeBadRequest, "batch %s: the mechanism's worst-case cost: %v", batch, err)
		}
		var next []*hospitalEntry
		for _, h := range keep {
			if why := a.cannotPay(budgets[h.id], worst, nq); why != "" {
				left = append(left, h.id)
				reasons = append(reasons, h.id+" "+why)
				continue
			}
			next = append(next, h)
		}
		if len(next) == len(keep) {
			break
		}
		keep = next
	}
	if len(keep) < a.cfg.Quorum {
		return nil, nil, nil, a.tooFew(batch, keep, left, nq, reasons)
	}
	keep, left, reasons, perr = a.reserve(ctx, student, batch, keep, left, reasons, classes, nq, p)
	if perr != nil {
		return nil, nil, nil, perr
	}
	if len(left) > 0 {
		a.met.leftOut.Add(float64(len(left)))
		a.log.Warn("hospitals left out of a batch: their budgets cannot pay for its worst case, or their ensembles are not the ledger's", "batch", batch, "left_out", reasons)
	}
	return keep, left, nil, nil
}

// reserve holds the batch's worst case in the ledger before any hospital
// is asked (ledger.Reserve): the ledger's gate decides it against every
// hospital's spent budget and every other batch's live reservation, so
// batches running at once cannot together pass a cap or their student's
// answer quota, and the charge after the votes settles within it. A hospital the ledger names as unable to
// pay is left out and the rest reserved again, while the quorum remains.
// The decision depends on the ledger's public state and the batch's size
// only. Under a mechanism that answers in sessions the batch's session
// pays its cost, so its reservation states none and holds only its
// queries against the student's quota.
func (a *Aggregator) reserve(ctx context.Context, student, batch string, keep []*hospitalEntry, left, reasons []string, classes, nq int, mech mechanism.Params) ([]*hospitalEntry, []string, []string, *protocol.Error) {
	for len(keep) >= a.cfg.Quorum {
		p := mech
		p.Teachers, p.Classes = 0, classes
		ids := make([]string, len(keep))
		for i, h := range keep {
			p.Teachers += h.teachers
			ids[i] = h.id
		}
		slices.Sort(ids)
		curve, delta := make([]float64, a.grid.Len()), 0.0
		if !p.Mechanism.Sessions() {
			worst, err := p.Charge(a.grid, nq, 0)
			if err != nil {
				return nil, nil, nil, protocol.Errorf(protocol.CodeBadRequest, "batch %s: the mechanism's worst-case cost: %v", batch, err)
			}
			curve, delta = worst.RDP.Values(), worst.Delta
		}
		cmd, err := ledger.Sign(&ledger.Reserve{BatchID: batch, Student: student, Hospitals: ids, Mechanism: string(p.Mechanism),
			Params: p.LedgerParams(), Queries: uint64(nq), Curve: curve, Delta: delta,
			Timestamp: a.cfg.Now().UnixNano()}, a.cfg.ID, a.cfg.SigningKey)
		if err != nil {
			return nil, nil, nil, protocol.Errorf(protocol.CodeBadRequest, "batch %s: sign its reservation: %v", batch, err)
		}
		sctx, cancel := context.WithTimeout(ctx, a.cfg.LedgerTimeout)
		res, err := a.cfg.Ledger.Submit(sctx, cmd)
		cancel()
		if err != nil {
			return nil, nil, nil, &protocol.Error{Code: protocol.CodeLedgerUnavailable, RetryAfter: time.Second,
				Message: fmt.Sprintf("the ledger did not confirm the reservation of batch %s (%v): nothing was asked of the hospitals or drawn; retry the batch", batch, err)}
		}
		switch res.GetCode() {
		case nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED, nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_DUPLICATE:
			return keep, left, reasons, nil
		case nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_BUDGET_EXHAUSTED:
			i := slices.IndexFunc(keep, func(h *hospitalEntry) bool { return h.id == res.GetSubject() })
			if i < 0 {
				return nil, nil, nil, protocol.Errorf(protocol.CodeBudgetExhausted,
					"batch %s is not admitted: the ledger refused its reservation: %s; nothing was asked of the hospitals or drawn", batch, res.GetReason())
			}
			left, reasons = append(left, keep[i].id), append(reasons, keep[i].id+": "+res.GetReason())
			keep = slices.Delete(slices.Clone(keep), i, i+1)
		default:
			return nil, nil, nil, protocol.Errorf(protocol.CodeBadRequest,
				"batch %s is not admitted: the ledger rejected its reservation: %s; nothing was asked of the hospitals or drawn", batch, res.GetReason())
		}
	}
	return nil, nil, nil, a.tooFew(batch, keep, left, nq, reasons)
}

// tooFew is the refusal of a batch that fewer than the quorum of
// hospitals can take.
func (a *Aggregator) tooFew(batch string, keep []*hospitalEntry, left []string, nq int, reasons []string) *protocol.Error {
	return protocol.Errorf(protocol.CodeBudgetExhausted,
		"batch %s is not admitted: %d of %d hospitals can pay for its worst case (all %d queries answered) and the quorum is %d (%s): nothing was asked of the hospitals or drawn; a smaller batch may fit",
		batch, len(keep), len(keep)+len(left), nq, a.cfg.Quorum, strings.Join(reasons, "; "))
}

// ledgerSuspended leaves out the hospitals the federation's administrator
// suspended in the ledger (its suspend command), which refuses every
// charge naming them, with the reason.
func ledgerSuspended(resp *nzcpb.BudgetResponse, hs []*hospitalEntry) (keep []*hospitalEntry, left, reasons []string) {
	suspended := map[string]string{}
	for _, b := range resp.GetBudgets() {
		if b.GetSuspended() {
			suspended[b.GetHospitalId()] = b.GetSuspendedReason()
		}
	}
	for _, h := range hs {
		if why, ok := suspended[h.id]; ok {
			left, reasons = append(left, h.id), append(reasons, fmt.Sprintf("%s is suspended in the ledger by the federation's administrator (%s)", h.id, why))
			continue
		}
		keep = append(keep, h)
	}
	return keep, left, reasons
}

// registeredEnsembles holds the batch's hospitals to the ensembles the
// ledger registers, when it registers any: a hospital connected at another
// size (or at the configuration's, before its registration was applied)
// or with no registration is left out, since the ledger would refuse a
// charge naming it; the others are marked so that their charges state
// their registered sizes. With no registration in the ledger the
// configuration's sizes stand. A ledger whose class count is not the
// aggregator's refuses the batch plainly.
func registeredEnsembles(resp *nzcpb.BudgetResponse, batch string, hs []*hospitalEntry, classes int) (keep []*hospitalEntry, left, reasons []string, perr *protocol.Error) {
	if resp.GetClasses() == 0 {
		return hs, nil, nil, nil
	}
	if int(resp.GetClasses()) != classes {
		return nil, nil, nil, protocol.Errorf(protocol.CodeUnavailable, "batch %s is not admitted: the ledger registers the federation's ensembles on %d classes, the aggregator is configured for %d: nothing was asked of the hospitals or drawn; the aggregator's operator sets classes to the registered count", batch, resp.GetClasses(), classes)
	}
	size := map[string]int{}
	for _, e := range resp.GetEnsembles() {
		size[e.GetHospitalId()] = int(e.GetTeachers())
	}
	for _, h := range hs {
		n, ok := size[h.id]
		switch {
		case !ok:
			left, reasons = append(left, h.id), append(reasons, h.id+" has no ensemble registered in the ledger")
		case n != h.teachers:
			left, reasons = append(left, h.id), append(reasons, fmt.Sprintf("%s is registered in the ledger with %d teachers but connected with %d", h.id, n, h.teachers))
		default:
			c := *h
			c.ledger = true
			keep = append(keep, &c)
		}
	}
	return keep, left, reasons, nil
}

// quotaAdmits refuses, before any hospital is asked, a batch the ledger is
// certain to refuse for the student's answer quota: its nq queries, all
// answered, would pass it (the ledger admits at that worst case too). A
// ledger that reports no quota (an older intake) leaves it to the ledger.
func quotaAdmits(q *nzcpb.StudentQuota, student, batch string, nq int) *protocol.Error {
	switch {
	case q == nil:
		return nil
	case !q.GetRegistered():
		return protocol.Errorf(protocol.CodeBadRequest, "batch %s is not admitted: student %s is not registered in the ledger: the federation's administrator registers students; nothing was asked of the hospitals or drawn", batch, student)
	case q.GetMaxAnswers() > 0 && (uint64(nq) > q.GetMaxAnswers() || q.GetAnswers() > q.GetMaxAnswers()-uint64(nq)):
		return protocol.Errorf(protocol.CodeBudgetExhausted, "batch %s is not admitted: student %s has %d of its %d answers, and its %d queries, all answered, would pass the quota: nothing was asked of the hospitals or drawn; a smaller batch may fit",
			batch, student, q.GetAnswers(), q.GetMaxAnswers(), nq)
	}
	return nil
}

// cannotPay says why the hospital of budget b cannot pay for a batch of nq
// queries of worst case worst, or "" when it can.
func (a *Aggregator) cannotPay(b *nzcpb.HospitalBudget, worst mechanism.Charge, nq int) string {
	if b == nil {
		return "has no budget account"
	}
	conv := b.GetDelta() - worst.Delta
	if !(conv > 0) {
		return fmt.Sprintf("has δ %.3g left and the worst case's additive δ is %.3g", b.GetDelta(), worst.Delta)
	}
	// The worst case alone, as the ledger's gate takes it: the filter
	// conversion, or its pure ε when that is smaller.
	eps := 0.0
	if !worst.RDP.IsZero() {
		eps = math.Inf(1)
		if c, err := worst.RDP.FilterEpsilon(conv); err == nil {
			eps = c.Epsilon
		}
	}
	eps = min(eps, worst.PureEpsilon)
	total := a.composedEpsilon(b, worst, conv)
	if spent := b.GetEpsilonSpent(); eps > b.GetEpsilonCap() || spent > b.GetEpsilonCap() || total > b.GetEpsilonCap() {
		return fmt.Sprintf("has spent ε=%.6g of its cap ε=%v, and with the worst case (ε=%.6g alone) would reach ε=%.6g at δ=%.3g", spent, b.GetEpsilonCap(), eps, total, conv)
	}
	return ""
}

// composedEpsilon is the ε the ledger's gate would find for the account
// of b with the batch's worst case added: its curve composed with the
// worst case's, converted at conv with the filter conversion, or the sum of
// pure ε when that is smaller. A budget read without the account's curve
// gives 0, leaving the decision to the ledger (which makes the same one).
func (a *Aggregator) composedEpsilon(b *nzcpb.HospitalBudget, worst mechanism.Charge, conv float64) float64 {
	spent, err := a.grid.CurveOf(b.GetCurve())
	if err != nil {
		return 0
	}
	after, err := spent.Compose(worst.RDP)
	if err != nil {
		return 0
	}
	eps := 0.0
	if !after.IsZero() {
		eps = math.Inf(1)
		if c, err := after.FilterEpsilon(conv); err == nil {
			eps = c.Epsilon
		}
	}
	return min(eps, b.GetPureEpsilon()+worst.PureEpsilon)
}

// sessionAsks returns which of the admitted hospitals hs a batch of the
// student asks under a mechanism that answers in sessions, and those it
// leaves out: the hospitals of the student's session when it can run the
// batch (keptSession.fits, with every hospital of hs taken to vote), else
// those that can pay for a new one (not in unpaid). A hospital outside the
// session pays nothing and is not asked, so that no vote is taken without
// a charge naming it. Fewer than the quorum that can pay refuses the batch
// before anything is asked.
func (a *Aggregator) sessionAsks(student, batch string, hs []*hospitalEntry, unpaid map[string]string, classes int) (keep []*hospitalEntry, out []string, perr *protocol.Error) {
	sizes := make(map[string]int, len(hs))
	ids := make([]string, len(hs))
	for i, h := range hs {
		sizes[h.id], ids[i] = h.teachers, h.id
	}
	a.sessionsMu.Lock()
	s := a.sessions[student]
	a.sessionsMu.Unlock()
	in := func(h string) bool { _, no := unpaid[h]; return !no }
	if s != nil && s.fits(classes, a.cfg.Quorum, ids, sizes) {
		in = func(h string) bool { return slices.Contains(s.hospitals, h) }
	}
	for _, h := range hs {
		if in(h.id) {
			keep = append(keep, h)
		} else {
			out = append(out, h.id)
		}
	}
	if len(keep) < a.cfg.Quorum {
		var why []string
		for _, h := range slices.Sorted(maps.Keys(unpaid)) {
			why = append(why, h+" "+unpaid[h])
		}
		return nil, nil, protocol.Errorf(protocol.CodeBudgetExhausted,
			"batch %s is not admitted: %d of %d hospitals can pay for a new session of %s (its whole cost is charged at opening) and the quorum is %d (%s): nothing was asked of the hospitals or drawn",
			batch, len(keep), len(hs), a.cfg.Mechanism.Mechanism, a.cfg.Quorum, strings.Join(why, "; "))
	}
	if len(out) > 0 {
		a.log.Info("hospitals left out of a batch: they are not of the student's session (they joined after it opened, or cannot pay for a new one)", "batch", batch, "left_out", out)
	}
	return keep, out, nil
}
