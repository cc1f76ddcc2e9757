package aggregator

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/party/auditor/intake"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// refusedRetries asks for the same confident-gnmax batch of 16 queries 30
// times against hospitals with a cap of ε = 5, which the batch's worst case
// (every query answered: ε ≈ 30) exceeds while the votes, near the
// threshold, let only some queries through. It returns the refusals and how
// often the hospitals were asked to vote.
func refusedRetries(t *testing.T, split bool, seed uint64) ([]*protocol.Error, int) {
	t.Helper()
	f := newFixture(t, 2, 5)
	for _, h := range f.hospitals {
		h.split = split // 20 of 40 votes on the top class, under T = 24
	}
	cfg := f.cfg
	cfg.Rand = rand.NewChaCha8([32]byte{byte(seed)})
	a := f.start(t, cfg)
	req, _ := f.request(t, 9, 16)
	before := f.led.m.State().Accounts()
	var out []*protocol.Error
	for range 30 {
		resp, err := a.Label(t.Context(), "student-1", req)
		if resp != nil {
			t.Fatal("a refused batch released labels")
		}
		var pe *protocol.Error
		if !errors.As(err, &pe) {
			t.Fatalf("got %v, want a typed refusal", err)
		}
		out = append(out, pe)
	}
	if len(f.led.charges(t)) != 0 {
		t.Fatal("a refused batch was charged")
	}
	after := f.led.m.State().Accounts()
	for i := range after {
		if after[i].Epsilon != before[i].Epsilon || after[i].Charges != before[i].Charges {
			t.Fatalf("a refused batch changed %s's account", after[i].Hospital)
		}
	}
	if _, ok, _ := a.outbox.Get("student-1", batchHex(req)); ok {
		t.Fatal("a refused batch's answers were kept")
	}
	calls := 0
	for _, h := range f.hospitals {
		calls += h.calls
	}
	return out, calls
}

// TestRefusalRevealsNothingAboutTheVotes: a batch refused for budget tells
// the student the same thing on every retry and whatever the votes are, and
// asks no hospital to vote: the decision is made before any vote is summed
// or noise drawn, from the batch's worst case. (A refusal computed from the
// realized cost, after the mechanism ran, gave "plus this ε=…", a function of
// how many queries passed the private threshold test, drawn afresh on every
// retry.)
func TestRefusalRevealsNothingAboutTheVotes(t *testing.T) {
	split, splitCalls := refusedRetries(t, true, 1)
	agree, agreeCalls := refusedRetries(t, false, 2)
	for i, pe := range append(split, agree...) {
		if pe.Code != protocol.CodeBudgetExhausted {
			t.Fatalf("refusal %d: %s, want budget-exhausted", i, pe.Code)
		}
		if pe.Message != split[0].Message {
			t.Fatalf("refusal %d says %q, the first said %q", i, pe.Message, split[0].Message)
		}
	}
	if splitCalls != 0 || agreeCalls != 0 {
		t.Fatalf("the hospitals were asked to vote %d and %d times on a batch refused before noise", splitCalls, agreeCalls)
	}
}

// TestComposedBudgetRefusedBeforeVotes: a batch whose worst case and the
// spent budget are each under the cap, together over it, is refused by the
// admission — which composes the account's curve with the worst case as the
// ledger's gate does — before any hospital votes, and again, identically,
// on every retry. (Before the budget read carried the account's curve, the
// votes were summed and the noise drawn once, and the ledger refused.)
func TestComposedBudgetRefusedBeforeVotes(t *testing.T) {
	f := newFixture(t, 2, 5)
	a := f.start(t, f.cfg)
	first, _ := f.request(t, 1, 1)
	label(t, a, first)
	for _, h := range f.hospitals {
		h.calls = 0
	}
	req, _ := f.request(t, 2, 1)
	var msgs []string
	for range 10 {
		_, err := a.Label(t.Context(), "student-1", req)
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != protocol.CodeBudgetExhausted {
			t.Fatalf("got %v, want budget-exhausted", err)
		}
		msgs = append(msgs, pe.Message)
	}
	if !strings.Contains(msgs[0], "is not admitted") || !strings.Contains(msgs[0], "nothing was asked of the hospitals or drawn") {
		t.Fatalf("want the admission's refusal (each batch alone fits the cap, not both), got %q", msgs[0])
	}
	for _, m := range msgs {
		if m != msgs[0] {
			t.Fatalf("refusals differ: %q, %q", msgs[0], m)
		}
	}
	for _, h := range f.hospitals {
		if h.calls != 0 {
			t.Fatalf("hospital %s voted %d times on a refused batch and its retries, want never", h.id, h.calls)
		}
	}
	if len(f.led.charges(t)) != 1 {
		t.Fatal("the refused batch was charged")
	}
}

// laggingLedger answers every budget read with the state an auditor that
// stopped applying at the start shows, and applies commands to the live
// ledger.
type laggingLedger struct {
	*fakeLedger
	stale *nzcpb.BudgetResponse
}

func (l laggingLedger) Budget(context.Context, *nzcpb.BudgetRequest) (*nzcpb.BudgetResponse, error) {
	return l.stale, nil
}

// Budget before votes, live: two batches at once, each of whose worst case
// fits the hospitals' caps alone and not together, against a budget read
// from a lagging auditor that shows neither. The ledger's reservation
// admits one; the other is refused before any hospital is asked for its
// votes and before any noise is drawn, so no refused entry of the log holds
// realized data (answer counts, a hash of labels).
func TestConcurrentBatchesReserveBeforeVotes(t *testing.T) {
	f := newFixture(t, 2, 10)
	cfg := f.cfg
	cfg.Mechanism = mechanism.Params{Mechanism: mechanism.LNMax, Scale: 2} // pure ε 1 per answer
	cfg.Ledger = laggingLedger{fakeLedger: f.led, stale: intake.Budgets(f.led.m.State(), &nzcpb.BudgetRequest{})}
	a := f.start(t, cfg)
	const nq = 6 // worst case ε 6 of a cap of 10: one batch fits, two do not
	refused := labelTwoAtOnce(t, f, a, 20, nq, "two half-cap batches at once")
	if refused.Code != protocol.CodeBudgetExhausted || !strings.Contains(refused.Message, "nothing was asked of the hospitals or drawn") {
		t.Fatalf("the refusal: %v", refused)
	}
	for _, h := range f.hospitals {
		if h.calls != 1 {
			t.Errorf("hospital %s was asked %d times, want once: only for the batch its budget could pay for", h.id, h.calls)
		}
	}
	s := f.led.m.State()
	entries, err := s.Entries(0, s.TreeSize())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range entries {
		en, err := ledger.DecodeEntry(b)
		if err != nil {
			t.Fatal(err)
		}
		if en.Status == ledger.StatusAccepted || len(en.Command) == 0 {
			continue // accepted, or a refusal's fixed-size record
		}
		if c, err := ledger.DecodeCommand(en.Command); err == nil {
			if ch, ok := c.Body.(*ledger.Charge); ok {
				t.Errorf("entry %d: a %s charge of batch %s holds realized data: %d answers, labels hash %x", en.Index, en.Status, ch.BatchID, ch.Answers, ch.AnswersHash)
			}
		}
	}
	if got := len(f.led.charges(t)); got != 1 {
		t.Fatalf("%d batches charged, want 1", got)
	}
}

// A student's quota holds across batches at once: two batches of one
// student, each of whose worst case fits its answer quota alone and not
// together, against a budget read from a lagging auditor that shows
// neither. The ledger's reservation admits one; the other is refused
// before any hospital is asked for its votes (before, both were reserved,
// the hospitals voted on both, and the ledger refused the second charge
// for the quota after its votes were collected and its noise drawn).
func TestConcurrentBatchesHoldTheStudentQuota(t *testing.T) {
	f := newFixtureWith(t, 2, 100, rules{quota: 10})
	cfg := f.cfg
	cfg.Mechanism = mechanism.Params{Mechanism: mechanism.LNMax, Scale: 2} // pure ε 1 per answer: the caps hold both
	cfg.Ledger = laggingLedger{fakeLedger: f.led, stale: intake.Budgets(f.led.m.State(), &nzcpb.BudgetRequest{StudentId: "student-1"})}
	a := f.start(t, cfg)
	const nq = 6 // of a quota of 10 answers: one batch fits, two do not
	refused := labelTwoAtOnce(t, f, a, 30, nq, "two batches of 6 queries at once under a quota of 10")
	if refused.Code != protocol.CodeBudgetExhausted || !strings.Contains(refused.Message, "reservation") || !strings.Contains(refused.Message, "nothing was asked of the hospitals or drawn") {
		t.Fatalf("the refusal: %v, want the ledger's refusal of its reservation", refused)
	}
	for _, h := range f.hospitals {
		if h.calls != 1 {
			t.Errorf("hospital %s was asked %d times, want once: only for the batch the quota admits", h.id, h.calls)
		}
	}
	if got := len(f.led.charges(t)); got != 1 {
		t.Fatalf("%d batches charged, want 1", got)
	}
	if q, _ := f.led.m.State().Student("student-1"); q.Answers > 10 {
		t.Fatalf("student-1 has %d answers, over its quota of 10", q.Answers)
	}
}

// No student takes another's share: under a genesis giving each student
// half of every cap, a student's batch that would take it past half of
// the hospitals' caps is refused by the ledger's reservation for each
// hospital in turn, and so before any hospital is asked; another
// student's batch of the same size is then labelled by every hospital.
func TestStudentShareLeavesTheOthersTheirs(t *testing.T) {
	f := newFixtureWith(t, 2, 10, rules{share: 0.5})
	cfg := f.cfg
	cfg.Mechanism = mechanism.Params{Mechanism: mechanism.LNMax, Scale: 2} // pure ε 1 per answer
	a := f.start(t, cfg)
	a.AddStudent("student-2", f.student.Recipient())
	const nq = 4 // worst case ε 4: one batch fits a share of 5, two do not
	first, _ := f.request(t, 1, nq)
	label(t, a, first)
	for _, h := range f.hospitals {
		h.calls = 0
	}
	second, _ := f.request(t, 2, nq)
	_, err := a.Label(t.Context(), "student-1", second)
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeBudgetExhausted || !strings.Contains(pe.Message, "share") {
		t.Fatalf("student-1's batch past its share: %v, want a budget refusal naming the share", err)
	}
	for _, h := range f.hospitals {
		if h.calls != 0 {
			t.Fatalf("hospital %s was asked %d times for a batch past the student's share", h.id, h.calls)
		}
	}
	other, _ := f.request(t, 3, nq)
	resp, err := a.Label(t.Context(), "student-2", other)
	if err != nil || len(resp.GetLeftOut()) != 0 {
		t.Fatalf("student-2's batch, within its own share: %v (left out %v)", err, resp.GetLeftOut())
	}
	f.wantChargedTo(t, other, "hospital-1", "hospital-2")
}

// A session planned at pure ε equal to the cap is paid for: the ledger's
// gate takes the smaller of the RDP conversion and the pure ε, and so must
// the aggregator's check before it asks anyone (the demo's session: pure
// ε = 2.00, whose conversion at the cap's δ less its own is 2.007).
func TestCannotPayTakesThePureEpsilon(t *testing.T) {
	f := newFixture(t, 1, 2)
	a := f.start(t, f.cfg)
	p, err := mechanism.DefaultSessionKind().PlanSession(2, 1e-5/2, 2, 300, 10)
	if err != nil {
		t.Fatal(err)
	}
	worst, err := p.Charge(mechanism.DefaultGrid(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !(worst.PureEpsilon <= 2) {
		t.Fatalf("the planned session's pure ε is %v, want ≤ 2", worst.PureEpsilon)
	}
	fresh := &nzcpb.HospitalBudget{HospitalId: "hospital-1", EpsilonCap: 2, Delta: 1e-5}
	if why := a.cannotPay(fresh, worst, 0); why != "" {
		t.Fatalf("a fresh account of cap 2 cannot pay for a session of pure ε %v: %s", worst.PureEpsilon, why)
	}
	over := &nzcpb.HospitalBudget{HospitalId: "hospital-1", EpsilonCap: 1.9, Delta: 1e-5}
	if why := a.cannotPay(over, worst, 0); why == "" {
		t.Fatalf("an account of cap 1.9 can pay for a session of pure ε %v", worst.PureEpsilon)
	}
}

// labelTwoAtOnce asks a for two batches of nq queries at once (batch ids
// from id) and requires one labelled and the other refused, which it
// returns; what names the run in a failure.
func labelTwoAtOnce(t *testing.T, f *fixture, a *Aggregator, id byte, nq int, what string) *protocol.Error {
	t.Helper()
	reqs := make([]*nzcpb.LabelRequest, 2)
	for i := range reqs {
		reqs[i], _ = f.request(t, id+byte(i), nq)
	}
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() { _, errs[i] = a.Label(t.Context(), "student-1", req) })
	}
	wg.Wait()
	var refused *protocol.Error
	switch {
	case errs[0] == nil && errors.As(errs[1], &refused), errs[1] == nil && errors.As(errs[0], &refused):
	default:
		t.Fatalf("%s: %v and %v, want one labelled and one refused", what, errs[0], errs[1])
	}
	return refused
}
