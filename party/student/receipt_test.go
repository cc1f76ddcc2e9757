package student

import (
	"crypto/sha256"
	"errors"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/internal/fedtest"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// proofKeys sign the commands and checkpoints of the tests' ledgers.
const proofKeys = fedtest.Keys("student test key ")

// A student accepts labels only with a majority's receipt of exactly their
// charge. An aggregator that forwards one auditor's word, another batch's
// receipt or none at all gets its labels refused, and a recorded batch's
// receipt verifies again later.
func TestStudentChecksTheReceipt(t *testing.T) {
	pl := proofKeys.NewLedger(t, "h1")
	keys := pl.AuditorKeys()
	me, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	receipts, err := ledger.NewVerifier(keys)
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{cfg: Config{ID: "s1", Identity: me, AuditorKeys: keys, StateDir: t.TempDir()}, receipts: receipts}
	labels := &nzcpb.Labels{Labels: []int32{3, -1, 1}, Refused: []bool{false, true, false}}
	plain, err := protocol.Marshal(labels)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := crypto.Seal(plain, me.Recipient())
	if err != nil {
		t.Fatal(err)
	}
	id, other := BatchID("s1", stateHash, 3, 0), BatchID("s1", stateHash, 3, 1)
	h := sha256.Sum256(plain)
	index := pl.ChargeAnswers(id, []string{"h1"}, 3, 2, h)
	otherIndex := pl.ChargeAnswers(other, []string{"h1"}, 3, 2, h)
	// Each from its own log of the same auditors: a batch id is charged
	// once per log.
	short := proofKeys.NewLedger(t, "h1")
	shortIndex := short.ChargeAnswers(id, []string{"h1"}, 1, 1, h)
	unanswered := proofKeys.NewLedger(t, "h1")
	unansweredIndex := unanswered.ChargeAnswers(id, []string{"h1"}, 3, 1, h)
	resp := func(r *nzcpb.Receipt) *nzcpb.LabelResponse {
		return &nzcpb.LabelResponse{BatchId: id, NumQueries: 3, SealedLabels: sealed, AnswersHash: h[:], Receipt: r}
	}

	bt, err := c.open(resp(pl.Receipt(index, "a1", "a2")), id, 0, 0, 3)
	if err != nil {
		t.Fatalf("a majority's receipt: %v", err)
	}
	if err := VerifyBatch(bt, "s1", receipts); err != nil {
		t.Fatalf("the recorded batch does not verify again: %v", err)
	}
	for _, tc := range []struct {
		name string
		r    *nzcpb.Receipt
	}{
		{"no receipt", nil},
		{"one auditor's signature", pl.Receipt(index, "a3")},
		{"another batch's receipt", pl.Receipt(otherIndex, "a1", "a2")},
		{"a charge of 1 query for 3 labels", short.Receipt(shortIndex, "a1", "a2")},
		{"a charge of 1 answer for 2 labels released", unanswered.Receipt(unansweredIndex, "a1", "a2")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := c.open(resp(tc.r), id, 0, 0, 3); !errors.Is(err, ErrNoProof) {
				t.Fatalf("labels accepted: %v", err)
			}
		})
	}
	tampered := *bt
	tampered.Labels = []int32{2, -1, 1}
	if err := VerifyBatch(&tampered, "s1", receipts); !errors.Is(err, ErrNoProof) {
		t.Fatalf("a recorded batch with changed labels verified: %v", err)
	}

	// The state directory re-verifies, and a changed record does not.
	if err := c.save(stateHash, 0, bt); err != nil {
		t.Fatal(err)
	}
	rep, err := VerifyState(c.cfg.StateDir, "s1", keys)
	if err != nil || rep.Verified != 1 {
		t.Fatalf("VerifyState: %+v %v", rep, err)
	}
	if err := c.save(stateHash, 0, &tampered); err != nil {
		t.Fatal(err)
	}
	if rep, err := VerifyState(c.cfg.StateDir, "s1", keys); !errors.Is(err, ErrNoProof) || len(rep.Failed) != 1 {
		t.Fatalf("VerifyState of a changed record: %+v %v", rep, err)
	}
}

// An aggregator that releases 100 labels under the proven charge of one
// query and one answer has the labels refused at once.
func TestStudentRefusesAShortCharge(t *testing.T) {
	pl := proofKeys.NewLedger(t, "h1")
	me, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	receipts, err := ledger.NewVerifier(pl.AuditorKeys())
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{cfg: Config{ID: "s1", Identity: me, AuditorKeys: pl.AuditorKeys(), StateDir: t.TempDir()}, receipts: receipts}
	labels := &nzcpb.Labels{Labels: make([]int32, 100), Refused: make([]bool, 100)}
	plain, err := protocol.Marshal(labels)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := crypto.Seal(plain, me.Recipient())
	if err != nil {
		t.Fatal(err)
	}
	id := BatchID("s1", stateHash, 100, 0)
	h := sha256.Sum256(plain)
	r := pl.Receipt(pl.Charge(id, []string{"h1"}, 1, h), "a1", "a2")
	resp := &nzcpb.LabelResponse{BatchId: id, NumQueries: 100, SealedLabels: sealed, AnswersHash: h[:], Receipt: r}
	if bt, err := c.open(resp, id, 0, 0, 100); !errors.Is(err, ErrNoProof) {
		t.Fatalf("100 labels on a 1-query charge: %+v, %v; want ErrNoProof", bt, err)
	}
}

// TestNewRefusesKeysItCannotCheckWith: a student whose pinned auditor keys
// do not parse could accept no labels; it is refused before it asks.
func TestNewRefusesKeysItCannotCheckWith(t *testing.T) {
	id, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(Config{ID: "s1", Identity: id, Hospitals: []*crypto.Recipient{id.Recipient()}, BatchSize: 2, StateDir: t.TempDir(),
		AuditorKeys: []string{"not-a-key"}, Aggregator: "127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "auditor keys") {
		t.Fatalf("New: %v, want an error naming the auditor keys", err)
	}
}

// Labels whose receipt shows the auditors' logs forked — a checkpoint of
// the size of an earlier receipt's, with another root, also cosigned by a
// majority — are refused, with the fork and the auditor that signed both
// roots named; the labels of the first branch stay accepted.
func TestStudentRefusesAFork(t *testing.T) {
	one, two := proofKeys.NewLedger(t, "h1"), proofKeys.NewLedger(t, "h1") // one federation, two histories
	keys := one.AuditorKeys()
	me, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	receipts, err := ledger.NewVerifier(keys)
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{cfg: Config{ID: "s1", Identity: me, AuditorKeys: keys, StateDir: t.TempDir()}, receipts: receipts}
	// batch is the aggregator's answer to batch i, without its receipt.
	batch := func(i int) (*nzcpb.LabelResponse, []byte) {
		t.Helper()
		plain, err := protocol.Marshal(&nzcpb.Labels{Labels: []int32{int32(i), 1, 2}, Refused: []bool{false, false, false}})
		if err != nil {
			t.Fatal(err)
		}
		sealed, err := crypto.Seal(plain, me.Recipient())
		if err != nil {
			t.Fatal(err)
		}
		id, h := BatchID("s1", stateHash, 3, i), sha256.Sum256(plain)
		return &nzcpb.LabelResponse{BatchId: id, NumQueries: 3, SealedLabels: sealed, AnswersHash: h[:]}, id
	}
	resp1, id1 := batch(0)
	resp1.Receipt = one.Receipt(one.Charge(id1, []string{"h1"}, 3, [32]byte(resp1.AnswersHash)), "a1", "a2")
	resp2, id2 := batch(1)
	resp2.Receipt = two.Receipt(two.Charge(id2, []string{"h1"}, 3, [32]byte(resp2.AnswersHash)), "a1", "a3") // the same index on the other branch
	if _, err := c.open(resp1, id1, 0, 0, 3); err != nil {
		t.Fatalf("the first branch's labels: %v", err)
	}
	_, err = c.open(resp2, id2, 1, 3, 3)
	var fe *ledger.ForkError
	if !errors.Is(err, ErrNoProof) || !errors.As(err, &fe) || !strings.Contains(err.Error(), "both signed by a1") {
		t.Fatalf("the other branch's labels: %v, want a refusal naming the fork and a1", err)
	}
	if _, err := c.open(resp1, id1, 0, 0, 3); err != nil {
		t.Fatalf("the first branch's labels again: %v", err)
	}
}
