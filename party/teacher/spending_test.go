package teacher

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"golang.org/x/mod/sumdb/note"
)

// spendLedger is a ledger of three auditors (keys 1-3), an administrator
// (4), the aggregator (5), hospitals h1 and h2 (6, 7) and student s1 (8).
type spendLedger struct {
	st   *ledger.State
	keys []string
}

func newSpendLedger(t *testing.T) *spendLedger {
	t.Helper()
	pub := func(b byte) ed25519.PublicKey { return testKey(b).Public().(ed25519.PublicKey) }
	sl := &spendLedger{st: ledger.New()}
	sl.apply(t, &ledger.Genesis{Origin: "test/spend", Timestamp: 1, Parties: []ledger.Party{
		{ID: "a1", Role: ledger.RoleAuditor, PublicKey: pub(1)}, {ID: "a2", Role: ledger.RoleAuditor, PublicKey: pub(2)},
		{ID: "a3", Role: ledger.RoleAuditor, PublicKey: pub(3)}, {ID: "admin", Role: ledger.RoleAdmin, PublicKey: pub(4)},
		{ID: "agg", Role: ledger.RoleAggregator, PublicKey: pub(5)}, {ID: "h1", Role: ledger.RoleHospital, PublicKey: pub(6)},
		{ID: "h2", Role: ledger.RoleHospital, PublicKey: pub(7)}, {ID: "s1", Role: ledger.RoleStudent, PublicKey: pub(8)},
	}}, "admin", 4)
	sl.apply(t, &ledger.OpenAccount{Hospital: "h1", CapEpsilon: 100, CapDelta: 1e-5, Timestamp: 2}, "h1", 6)
	sl.apply(t, &ledger.OpenAccount{Hospital: "h2", CapEpsilon: 100, CapDelta: 1e-5, Timestamp: 3}, "h2", 7)
	sl.apply(t, &ledger.RegisterStudent{Student: "s1", Timestamp: 4}, "admin", 4)
	var err error
	if sl.keys, err = sl.st.AuditorKeys(sl.st.TreeSize()); err != nil {
		t.Fatal(err)
	}
	return sl
}

func (sl *spendLedger) apply(t *testing.T, b ledger.Body, signer string, key byte) int64 {
	t.Helper()
	r, err := sl.st.Apply(sign(t, b, signer, testKey(key)))
	if err != nil || r.Status != ledger.StatusAccepted {
		t.Fatalf("%s: %+v %v", b.Kind(), r, err)
	}
	return int64(r.Index)
}

// charge commits a GNMax charge of batch for hospitals and returns its
// receipt, cosigned by the auditors signers.
func (sl *spendLedger) charge(t *testing.T, batch []byte, hospitals []string, queries int, signers ...byte) *nzcpb.Receipt {
	t.Helper()
	p := mechanism.Params{Mechanism: mechanism.GNMax, Sigma: 40, Teachers: 6, Classes: 2}
	cost, err := p.Charge(mechanism.DefaultGrid(), queries, 0)
	if err != nil {
		t.Fatal(err)
	}
	i := sl.apply(t, &ledger.Charge{BatchID: hex.EncodeToString(batch), Student: "s1", Hospitals: hospitals,
		Mechanism: string(p.Mechanism), Params: p.LedgerParams(), Queries: uint64(queries), Answers: uint64(queries),
		Curve: cost.RDP.Values(), AnswersHash: sha256.Sum256(batch), Timestamp: 5 + sl.st.TreeSize()}, "agg", 5)
	cp, err := sl.st.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	var ss []note.Signer
	for _, b := range signers {
		s, err := ledger.NewCheckpointSigner("a"+string('0'+rune(b)), testKey(b), time.Now().Unix())
		if err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	signed, err := ledger.SignCheckpoint(cp, ss...)
	if err != nil {
		t.Fatal(err)
	}
	r, err := sl.st.Receipt(i, signed)
	if err != nil {
		t.Fatal(err)
	}
	return protocol.ReceiptToWire(r)
}

// A hospital records every batch it voted on and, once ProofLag of them
// lack the proof of a charge naming it, stops voting: an aggregator that
// charges its votes to nobody, to others only, for fewer queries, or on a
// minority's word gets no more votes from it.
func TestHospitalStopsVotingWithoutProofOfItsCharges(t *testing.T) {
	sl := newSpendLedger(t)
	h := newVoteHarness(t)
	n, err := New(Config{ID: "h1", Aggregator: "127.0.0.1:1", Identity: h.id, Voter: unanimous(3), AuditorKeys: sl.keys, ProofLag: 2})
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
	// once per log).
	other := func() *spendLedger { return newSpendLedger(t) }
	for _, tc := range []struct {
		name string
		r    *nzcpb.Receipt
	}{
		{"charged to another hospital only", other().charge(t, batch(1), []string{"h2"}, 4, 1, 2)},
		{"charged for fewer queries", other().charge(t, batch(2), []string{"h1", "h2"}, 3, 1, 2)},
		{"cosigned by one auditor", other().charge(t, batch(1), []string{"h1", "h2"}, 4, 3)},
	} {
		if err := vote(3, tc.r); !stopped(err) {
			t.Fatalf("%s: voting resumed (%v)", tc.name, err)
		}
	}
	if s := n.Spending(); s.Rejected != 3 || s.Proven != 0 || s.Unproven != 2 || !s.Stopped || s.Voted != 2 {
		t.Fatalf("spending %+v", s)
	}
	// The proof of batch 1's charge: it votes again, up to the lag.
	if err := vote(3, sl.charge(t, batch(1), []string{"h1", "h2"}, 4, 1, 3)); err != nil {
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

// vote hands n the receipts and asks it to vote on batch i of 4 queries.
func (h *voteHarness) vote(n *Node, i byte, receipts ...*nzcpb.Receipt) error {
	h.t.Helper()
	plain, err := protocol.Marshal(&nzcpb.Features{NumQueries: 4, FeatureDim: 1, Values: []float32{1, 2, 3, 4}})
	if err != nil {
		h.t.Fatal(err)
	}
	sealed, err := crypto.Seal(plain, h.id.Recipient())
	if err != nil {
		h.t.Fatal(err)
	}
	q := &nzcpb.QueryBatch{BatchId: spendBatch(i), NumQueries: 4, FeatureDim: 1, NumClasses: 2, SealedFeatures: sealed,
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
