package student

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// proofLedger is a small ledger of three auditors in which the aggregator
// charged two batches of student s1.
type proofLedger struct {
	st            *ledger.State
	keys          []string
	majority, one []note.Signer
}

func key(b byte) ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	seed[0] = b
	return ed25519.NewKeyFromSeed(seed)
}

func newProofLedger(t *testing.T) *proofLedger {
	t.Helper()
	pub := func(b byte) ed25519.PublicKey { return key(b).Public().(ed25519.PublicKey) }
	pl := &proofLedger{st: ledger.New()}
	apply := func(b ledger.Body, signer string, k ed25519.PrivateKey) {
		t.Helper()
		cmd, err := ledger.Sign(b, signer, k)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := pl.st.Apply(cmd); err != nil || r.Status != ledger.StatusAccepted {
			t.Fatalf("%s: %+v %v", b.Kind(), r, err)
		}
	}
	apply(&ledger.Genesis{Origin: "test/ledger", Timestamp: 1, Parties: []ledger.Party{
		{ID: "a1", Role: ledger.RoleAuditor, PublicKey: pub(1)},
		{ID: "a2", Role: ledger.RoleAuditor, PublicKey: pub(2)},
		{ID: "a3", Role: ledger.RoleAuditor, PublicKey: pub(3)},
		{ID: "admin", Role: ledger.RoleAdmin, PublicKey: pub(4)},
		{ID: "agg", Role: ledger.RoleAggregator, PublicKey: pub(5)},
		{ID: "h1", Role: ledger.RoleHospital, PublicKey: pub(6)},
		{ID: "s1", Role: ledger.RoleStudent, PublicKey: pub(7)},
	}}, "admin", key(4))
	apply(&ledger.OpenAccount{Hospital: "h1", CapEpsilon: 100, CapDelta: 1e-5, Timestamp: 2}, "h1", key(6))
	apply(&ledger.RegisterStudent{Student: "s1", Timestamp: 3}, "admin", key(4))
	for i := byte(1); i <= 3; i++ {
		s, err := ledger.NewCheckpointSigner("a"+string('0'+rune(i)), key(i), time.Now().Unix())
		if err != nil {
			t.Fatal(err)
		}
		if i <= 2 {
			pl.majority = append(pl.majority, s)
		}
		if i == 3 {
			pl.one = append(pl.one, s)
		}
	}
	var err error
	if pl.keys, err = pl.st.AuditorKeys(pl.st.TreeSize()); err != nil {
		t.Fatal(err)
	}
	return pl
}

// charge commits a gnmax charge of batch id for labels and returns its
// index.
func (pl *proofLedger) charge(t *testing.T, id []byte, plain []byte, queries int) int64 {
	t.Helper()
	p := mechanism.Params{Mechanism: mechanism.GNMax, Sigma: 40, Teachers: 10, Classes: 4}
	cost, err := p.Charge(mechanism.DefaultGrid(), queries, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := ledger.Sign(&ledger.Charge{BatchID: hex.EncodeToString(id), Student: "s1", Hospitals: []string{"h1"},
		Mechanism: string(p.Mechanism), Params: p.LedgerParams(), Queries: uint64(queries), Answers: uint64(queries),
		Curve: cost.RDP.Values(), AnswersHash: sha256.Sum256(plain), Timestamp: 4}, "agg", key(5))
	if err != nil {
		t.Fatal(err)
	}
	r, err := pl.st.Apply(cmd)
	if err != nil || r.Status != ledger.StatusAccepted {
		t.Fatalf("charge: %+v %v", r, err)
	}
	return int64(r.Index)
}

func (pl *proofLedger) receipt(t *testing.T, index int64, signers []note.Signer) *nzcpb.Receipt {
	t.Helper()
	cp, err := pl.st.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	signed, err := ledger.SignCheckpoint(cp, signers...)
	if err != nil {
		t.Fatal(err)
	}
	r, err := pl.st.Receipt(index, signed)
	if err != nil {
		t.Fatal(err)
	}
	return protocol.ReceiptToWire(r)
}

// A student accepts labels only with a majority's receipt of exactly their
// charge. An aggregator that forwards one auditor's word, another batch's
// receipt or none at all gets its labels refused, and a recorded batch's
// receipt verifies again later.
func TestStudentChecksTheReceipt(t *testing.T) {
	pl := newProofLedger(t)
	me, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	receipts, err := ledger.NewVerifier(pl.keys)
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{cfg: Config{ID: "s1", Identity: me, AuditorKeys: pl.keys, StateDir: t.TempDir()}, receipts: receipts}
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
	index := pl.charge(t, id, plain, 3)
	otherIndex := pl.charge(t, other, plain, 3)
	h := sha256.Sum256(plain)
	resp := func(r *nzcpb.Receipt) *nzcpb.LabelResponse {
		return &nzcpb.LabelResponse{BatchId: id, NumQueries: 3, SealedLabels: sealed, AnswersHash: h[:], Receipt: r}
	}

	bt, err := c.open(resp(pl.receipt(t, index, pl.majority)), id, 0, 0, 3)
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
		{"one auditor's signature", pl.receipt(t, index, pl.one)},
		{"another batch's receipt", pl.receipt(t, otherIndex, pl.majority)},
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
	rep, err := VerifyState(c.cfg.StateDir, "s1", pl.keys)
	if err != nil || rep.Verified != 1 {
		t.Fatalf("VerifyState: %+v %v", rep, err)
	}
	if err := c.save(stateHash, 0, &tampered); err != nil {
		t.Fatal(err)
	}
	if rep, err := VerifyState(c.cfg.StateDir, "s1", pl.keys); !errors.Is(err, ErrNoProof) || len(rep.Failed) != 1 {
		t.Fatalf("VerifyState of a changed record: %+v %v", rep, err)
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
