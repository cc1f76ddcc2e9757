package teacher

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/party/internal/fedtest"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// spendKeys sign the commands and checkpoints of the tests' ledgers, in
// which hospitals h1 and h2 have accounts.
const spendKeys = fedtest.Keys("teacher test key ")

func newSpendLedger(t *testing.T) *fedtest.Ledger { return spendKeys.NewLedger(t, "h1", "h2") }

// chargeReceipt commits a charge of batch for hospitals and returns its
// receipt, cosigned by the auditors signers.
func chargeReceipt(l *fedtest.Ledger, batch []byte, hospitals []string, queries int, signers ...string) *nzcpb.Receipt {
	return l.Receipt(l.Charge(batch, hospitals, queries, sha256.Sum256(batch)), signers...)
}

// A hospital records every batch it voted on and, once ProofLag of them
// lack the proof of a charge naming it, stops voting: an aggregator that
// charges its votes to nobody, to others only, for fewer queries, or on a
// minority's word gets no more votes from it.
func TestHospitalStopsVotingWithoutProofOfItsCharges(t *testing.T) {
	sl := newSpendLedger(t)
	h := newVoteHarness(t)
	n, err := New(Config{ID: "h1", Aggregator: "127.0.0.1:1", Identity: h.id, Voter: unanimous(3), AuditorKeys: sl.AuditorKeys(), ProofLag: 2})
	if err != nil {
		t.Fatal(err)
	}
	batch := spendBatch
	vote := func(i byte, receipts ...*nzcpb.Receipt) error { t.Helper(); return h.vote(n, i, receipts...) }
	stopped := stoppedVoting
	// Two batches voted on, neither proven: the third is refused.
	for i := byte(1); i <= 2; i++ {
		if err := vote(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := vote(3); !stopped(err) {
		t.Fatalf("voting with 2 unproven batches at lag 2: %v, want a refusal", err)
	}
	// Receipts that do not prove a charge of its votes change nothing
	// (each from its own log of the same auditors: a batch id is charged
	// once per log; each log longer than sl and than the others by filler
	// charges, so that no two checkpoints of one size disagree, which
	// would be a fork).
	other := func(fillers int) *fedtest.Ledger {
		l := newSpendLedger(t)
		for i := range fillers {
			l.Charge([]byte(fmt.Sprintf("filler batch %d", i)), []string{"h2"}, 4, sha256.Sum256(nil))
		}
		return l
	}
	for _, tc := range []struct {
		name string
		r    *nzcpb.Receipt
	}{
		{"charged to another hospital only", chargeReceipt(other(1), batch(1), []string{"h2"}, 4, "a1", "a2")},
		{"charged for fewer queries", chargeReceipt(other(2), batch(2), []string{"h1", "h2"}, 3, "a1", "a2")},
		{"cosigned by one auditor", chargeReceipt(other(3), batch(1), []string{"h1", "h2"}, 4, "a3")},
	} {
		if err := vote(3, tc.r); !stopped(err) {
			t.Fatalf("%s: voting resumed (%v)", tc.name, err)
		}
	}
	if s := n.Spending(); s.Rejected != 3 || s.Proven != 0 || s.Unproven != 2 || !s.Stopped || s.Voted != 2 {
		t.Fatalf("spending %+v", s)
	}
	// The proof of batch 1's charge: it votes again, up to the lag.
	if err := vote(3, chargeReceipt(sl, batch(1), []string{"h1", "h2"}, 4, "a1", "a3")); err != nil {
		t.Fatalf("with batch 1 proven: %v", err)
	}
	if err := vote(4); !stopped(err) {
		t.Fatalf("batches 2 and 3 unproven: %v, want a refusal", err)
	}
	if err := vote(3); err != nil {
		t.Fatalf("a retry of a batch already counted is not a new one: %v", err)
	}
	if s := n.Spending(); s.Proven != 1 || s.Unproven != 2 || s.Voted != 3 {
		t.Fatalf("spending %+v", s)
	}
}

// spendBatch is the id of test batch i.
func spendBatch(i byte) []byte { return []byte(strings.Repeat(string('a'+i), 16)) }

// voteHarness asks a hospital to vote on test batches, as the aggregator
// would.
type voteHarness struct {
	t       *testing.T
	id, agg *crypto.Identity
}

func newVoteHarness(t *testing.T) *voteHarness {
	t.Helper()
	id, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	agg, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	return &voteHarness{t: t, id: id, agg: agg}
}

// vote hands n the receipts and asks it to vote on batch i of 4 queries
// for student s1.
func (h *voteHarness) vote(n *Node, i byte, receipts ...*nzcpb.Receipt) error {
	h.t.Helper()
	return h.ask(n, spendBatch(i), []float32{1, 2, 3, 4}, "s1", receipts...)
}

// ask hands n the receipts and asks it to vote on the queries values
// (one value each) under batch id for student.
func (h *voteHarness) ask(n *Node, batch []byte, values []float32, student string, receipts ...*nzcpb.Receipt) error {
	h.t.Helper()
	nq := uint32(len(values))
	plain, err := protocol.Marshal(&nzcpb.Features{NumQueries: nq, FeatureDim: 1, Values: values})
	if err != nil {
		h.t.Fatal(err)
	}
	sealed, err := crypto.Seal(plain, h.id.Recipient())
	if err != nil {
		h.t.Fatal(err)
	}
	q := &nzcpb.QueryBatch{BatchId: batch, NumQueries: nq, FeatureDim: 1, NumClasses: 2, SealedFeatures: sealed, StudentId: student,
		HospitalIds: []string{"h1", "h2"}, DeadlineUnixMs: time.Now().Add(time.Minute).UnixMilli(), ChargeReceipts: receipts}
	n.spend.accept(q.GetChargeReceipts())
	_, err = n.answer(context.Background(), q, h.agg.Recipient())
	return err
}

// stoppedVoting reports whether err is the hospital's refusal to vote for
// want of proofs.
func stoppedVoting(err error) bool {
	var pe *protocol.Error
	return errors.As(err, &pe) && pe.Code == protocol.CodeUnavailable && strings.Contains(pe.Message, "stops voting")
}

// rebound reports whether err is the hospital's refusal of a batch id
// that already stands for other votes.
func rebound(err error) bool {
	var pe *protocol.Error
	return errors.As(err, &pe) && pe.Code == protocol.CodeBadRequest && strings.Contains(pe.Message, ErrBatchRebound.Error())
}

// A batch id stands, until its charge is proven, for the queries, the
// student and the count voted on: a retry of exactly that batch is voted
// on again (it reveals nothing new), anything else under the id is
// refused, stopped or not.
func TestHospitalBindsBatchIDToItsVotes(t *testing.T) {
	sl := newSpendLedger(t)
	h := newVoteHarness(t)
	n, err := New(Config{ID: "h1", Aggregator: "127.0.0.1:1", Identity: h.id, Voter: unanimous(3), AuditorKeys: sl.AuditorKeys(), ProofLag: 2})
	if err != nil {
		t.Fatal(err)
	}
	id, values := spendBatch(1), []float32{1, 2, 3, 4}
	if err := h.ask(n, id, values, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := h.ask(n, id, values, "s1"); err != nil {
		t.Fatalf("a retry of the same batch: %v", err)
	}
	for _, tc := range []struct {
		name    string
		values  []float32
		student string
	}{
		{"other queries", []float32{5, 6, 7, 8}, "s1"},
		{"one query changed", []float32{1, 2, 3, 5}, "s1"},
		{"another student", values, "s2"},
		{"fewer queries", values[:3], "s1"},
		{"more queries", append(slices.Clone(values), 9), "s1"},
	} {
		if err := h.ask(n, id, tc.values, tc.student); !rebound(err) {
			t.Errorf("%s under a known batch id: %v, want ErrBatchRebound", tc.name, err)
		}
	}
	if err := h.vote(n, 2); err != nil {
		t.Fatal(err)
	}
	// Stopped, the hospital still refuses the id's reuse, and counts no
	// new vote for it.
	for i := range 20 {
		if err := h.ask(n, id, []float32{float32(10 + i), 2, 3, 4}, "s1"); !rebound(err) {
			t.Fatalf("fresh queries %d under a known batch id at the lag: %v, want ErrBatchRebound", i, err)
		}
	}
	if s := n.Spending(); s.Voted != 2 || s.Unproven != 2 || !s.Stopped {
		t.Fatalf("spending %+v", s)
	}
}

// One charge proves one use of a batch id, once: an aggregator that
// charges a batch id once and reuses it for fresh queries, handing the same
// receipt over each time, is stopped at proof_lag; so is one whose charge
// names another student.
func TestHospitalConsumesEachProofOnce(t *testing.T) {
	sl := newSpendLedger(t)
	h := newVoteHarness(t)
	const lag = 3
	n, err := New(Config{ID: "h1", Aggregator: "127.0.0.1:1", Identity: h.id, Voter: unanimous(3), AuditorKeys: sl.AuditorKeys(), ProofLag: lag})
	if err != nil {
		t.Fatal(err)
	}
	id := spendBatch(1)
	if err := h.ask(n, id, []float32{1, 2, 3, 4}, "s1"); err != nil {
		t.Fatal(err)
	}
	r := chargeReceipt(sl, id, []string{"h1", "h2"}, 4, "a1", "a2")
	voted := 0
	for i := range 200 {
		err := h.ask(n, id, []float32{float32(10 + i), 2, 3, 4}, "s1", r)
		switch {
		case err == nil:
			voted++
		case !stoppedVoting(err) && !rebound(err):
			t.Fatalf("use %d of the batch id: %v", i, err)
		}
	}
	if voted > lag {
		t.Fatalf("one 4-query charge let the hospital vote on %d more batches under its id, want at most %d (proof_lag)", voted, lag)
	}
	if s := n.Spending(); s.Proven != 1 || s.Rejected == 0 {
		t.Fatalf("spending %+v: want one batch proven and the replays rejected", s)
	}

	// A charge that names another student than the one voted for proves
	// nothing.
	m, err := New(Config{ID: "h1", Aggregator: "127.0.0.1:1", Identity: h.id, Voter: unanimous(3), AuditorKeys: sl.AuditorKeys(), ProofLag: 1})
	if err != nil {
		t.Fatal(err)
	}
	other := spendBatch(9)
	if err := h.ask(m, other, []float32{1, 2, 3, 4}, "s2"); err != nil {
		t.Fatal(err)
	}
	if err := h.vote(m, 3, chargeReceipt(sl, other, []string{"h1"}, 4, "a1", "a2")); !stoppedVoting(err) {
		t.Fatalf("votes for s2 proven by a charge to s1: %v, want the hospital stopped", err)
	}
	if s := m.Spending(); s.Proven != 0 || s.Rejected != 1 {
		t.Fatalf("spending %+v", s)
	}
}

// Receipts of two forked logs — the same auditors' majorities cosigning
// one size with different roots — stop the hospital voting, naming the
// auditor that signed both: its record of charges can no longer be
// trusted to be the one every auditor keeps.
func TestHospitalStopsVotingOnAFork(t *testing.T) {
	h := newVoteHarness(t)
	one, two := newSpendLedger(t), newSpendLedger(t) // one federation, two histories
	n, err := New(Config{ID: "h1", Aggregator: "127.0.0.1:1", Identity: h.id, Voter: unanimous(3), AuditorKeys: one.AuditorKeys(), ProofLag: 8})
	if err != nil {
		t.Fatal(err)
	}
	for i := byte(1); i <= 2; i++ {
		if err := h.vote(n, i); err != nil {
			t.Fatal(err)
		}
	}
	r1 := chargeReceipt(one, spendBatch(1), []string{"h1", "h2"}, 4, "a1", "a2")
	r2 := chargeReceipt(two, spendBatch(2), []string{"h1", "h2"}, 4, "a1", "a3") // the same index on the other branch
	if err := h.vote(n, 3, r1); err != nil {
		t.Fatalf("with batch 1 proven: %v", err)
	}
	if err := h.vote(n, 4, r2); !stoppedVoting(err) || !strings.Contains(err.Error(), "fork") || !strings.Contains(err.Error(), "a1") {
		t.Fatalf("after the other branch's receipt: %v, want a refusal naming the fork and a1", err)
	}
	if s := n.Spending(); !s.Stopped || s.Fork == "" || s.Proven != 1 || s.Rejected != 1 {
		t.Fatalf("spending %+v", s)
	}
	// A receipt of the first branch does not make it vote again.
	if err := h.vote(n, 5, chargeReceipt(one, spendBatch(3), []string{"h1", "h2"}, 4, "a1", "a2")); !stoppedVoting(err) {
		t.Fatalf("voting resumed after a fork: %v", err)
	}
}
