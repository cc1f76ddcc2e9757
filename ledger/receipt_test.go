package ledger

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"testing"
)

// receiptFixture charges one batch, refuses another and returns the state,
// the accepted command's digest and index, and the refused entry's index.
func receiptFixture(t *testing.T) (*fed, [32]byte, int64, int64) {
	f := newFed(t)
	cmd := f.sign(chargeBody("b1", []string{"h1"}, gaussCurve(40, 10), 10), "agg")
	r := f.apply(cmd)
	if r.Status != StatusAccepted {
		t.Fatalf("charge: %s %s", r.Status, r.Message)
	}
	c, err := DecodeCommand(cmd)
	if err != nil {
		t.Fatal(err)
	}
	digest, _ := c.Digest()
	refused := f.apply(f.sign(chargeBody("b2", []string{"h2"}, gaussCurve(1, 1000), 1000), "agg"))
	if refused.Status != StatusRefused {
		t.Fatalf("want a refusal, got %s", refused.Status)
	}
	return f, digest, int64(r.Index), int64(refused.Index)
}

// badReceipt is a receipt a verifier must refuse, and the digest it is
// checked against.
type badReceipt struct {
	name string
	r    Receipt
	want [32]byte
}

// receiptCases returns the fixture's federation, the accepted charge's
// digest, its receipt under a checkpoint signed by a majority (a1 and a3)
// and that checkpoint, and each way a single party could try to pass a
// release off as committed.
func receiptCases(t *testing.T) (f *fed, digest [32]byte, good Receipt, majority []byte, bad []badReceipt) {
	f, digest, index, refusedIndex := receiptFixture(t)
	cp, _ := f.st.Checkpoint()
	majority, err := SignCheckpoint(cp, auditorSigner(t, "a1"), auditorSigner(t, "a3"))
	if err != nil {
		t.Fatal(err)
	}
	alone, _ := SignCheckpoint(cp, auditorSigner(t, "a3"))
	if good, err = f.st.Receipt(index, majority); err != nil {
		t.Fatal(err)
	}
	oneAuditor, _ := f.st.Receipt(index, alone)
	ofRefusal, _ := f.st.Receipt(refusedIndex, majority)
	tampered := good
	tampered.Entry = append([]byte(nil), good.Entry...)
	tampered.Entry[len(tampered.Entry)-12] ^= 1
	otherProof, _ := f.st.Receipt(index-1, majority)
	wrongProof := good
	wrongProof.Proof = otherProof.Proof
	return f, digest, good, majority, []badReceipt{
		{"a checkpoint signed by one auditor", oneAuditor, digest},
		{"the entry of a refused charge", ofRefusal, digest},
		{"an entry changed after signing", tampered, digest},
		{"the proof of another entry", wrongProof, digest},
		{"another command than the one submitted", good, [32]byte{1}},
	}
}

func TestReceipt(t *testing.T) {
	f, digest, good, majority, bad := receiptCases(t)
	keys := auditorKeys(t, f.st)
	if en, sc, err := newVerifier(t, keys).Receipt(good, digest); err != nil || len(sc.Signers) != 2 {
		t.Fatalf("a majority's receipt: entry %d, signers %v, err %v", en.Index, sc.Signers, err)
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			if _, _, err := newVerifier(t, keys).Receipt(c.r, c.want); !errors.Is(err, ErrReceipt) {
				t.Fatalf("verified: %v", err)
			}
		})
	}
	// What a student checks: its own batch, size and answers.
	hash := sha256.Sum256([]byte("b1"))
	if _, _, _, err := newVerifier(t, keys).ChargeReceipt(good, "b1", "s2", answered(10), hash); err != nil {
		t.Fatalf("the student's check: %v", err)
	}
	for _, c := range []struct {
		name, batch, student string
		labels               []int32
		hash                 [32]byte
	}{
		{"another batch", "b9", "s2", answered(10), hash},
		{"another student", "b1", "s1", answered(10), hash},
		{"a smaller batch", "b1", "s2", answered(9), hash},
		{"a larger batch", "b1", "s2", answered(11), hash},
		{"fewer labels released than charged", "b1", "s2", append(answered(9), -1), hash},
		{"other answers", "b1", "s2", answered(10), [32]byte{7}},
	} {
		if _, _, _, err := newVerifier(t, keys).ChargeReceipt(good, c.batch, c.student, c.labels, c.hash); !errors.Is(err, ErrReceipt) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	if _, err := f.st.Receipt(f.st.TreeSize(), majority); !errors.Is(err, ErrReceipt) {
		t.Fatalf("a receipt beyond the checkpoint: %v", err)
	}
}

func TestReceiptJSON(t *testing.T) {
	f, digest, index, _ := receiptFixture(t)
	cp, _ := f.st.Checkpoint()
	signed, _ := SignCheckpoint(cp, auditorSigner(t, "a1"), auditorSigner(t, "a2"))
	r, err := f.st.Receipt(index, signed)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Receipt
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if _, _, err := newVerifier(t, auditorKeys(t, f.st)).Receipt(back, digest); err != nil {
		t.Fatalf("a receipt read back from JSON: %v", err)
	}
	for _, bad := range []string{
		`{"entry":"AA==","proof":[],"checkpoint":"","extra":1}`,
		`{"entry":"not base64","proof":[],"checkpoint":""}`,
		`{"entry":"","proof":["AAAA"],"checkpoint":""}`,
	} {
		var r Receipt
		if err := json.Unmarshal([]byte(bad), &r); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

func FuzzReceiptJSON(f *testing.F) {
	f.Add([]byte(`{"entry":"AA==","proof":["AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="],"checkpoint":"x\n1\nAA==\n"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Receipt
		if err := json.Unmarshal(b, &r); err != nil {
			return
		}
		out, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("re-encoding a decoded receipt: %v", err)
		}
		var again Receipt
		if err := json.Unmarshal(out, &again); err != nil {
			t.Fatalf("decoding the re-encoding: %v", err)
		}
		// Verification never panics on what decodes.
		_, _, _ = newVerifier(t, nil).Receipt(again, [32]byte{})
	})
}

// answered is n labels, every one released.
func answered(n int) []int32 { return make([]int32, n) }

// A student takes a charge only for exactly the labels it received: every
// query charged (an nzc-svt batch's stopped tail refused), as many answers
// as labels released, a session exactly for nzc-svt.
func TestChargeCoversExactlyTheLabels(t *testing.T) {
	hash := [32]byte{1}
	charge := func(mech string, queries, answers uint64, session string) *Charge {
		return &Charge{BatchID: "b1", Student: "s1", Mechanism: mech, Queries: queries, Answers: answers, Session: session, AnswersHash: hash}
	}
	refused := func(labels []int32, from int) []int32 {
		for i := from; i < len(labels); i++ {
			labels[i] = -1
		}
		return labels
	}
	for _, tc := range []struct {
		name   string
		ch     *Charge
		labels []int32
		ok     bool
	}{
		{"every query charged and answered", charge("gnmax", 100, 100, ""), answered(100), true},
		{"100 labels on a 1-query charge", charge("gnmax", 1, 1, ""), answered(100), false},
		{"100 labels on a 100-query charge of 1 answer", charge("confident-gnmax", 100, 1, ""), answered(100), false},
		{"1 answer of 100, charged so", charge("confident-gnmax", 100, 1, ""), refused(answered(100), 1), true},
		{"an nzc-svt session stopped after 40 queries", charge("nzc-svt", 40, 30, "s"), refused(answered(100), 30), true},
		{"an nzc-svt charge of 40 queries with a label at query 40", charge("nzc-svt", 40, 30, "s"), append(refused(answered(40), 30), 0), false},
		{"an nzc-svt charge of 1 query for 100 labels", charge("nzc-svt", 1, 1, "s"), answered(100), false},
		{"an nzc-svt charge without a session", charge("nzc-svt", 10, 10, ""), answered(10), false},
		{"a gnmax charge in a session", charge("gnmax", 10, 10, "s"), answered(10), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := chargeCovers(tc.ch, "b1", "s1", tc.labels, hash)
			if (err == nil) != tc.ok {
				t.Fatalf("chargeCovers: %v, want ok %v", err, tc.ok)
			}
		})
	}
}
