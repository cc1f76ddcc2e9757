package ledger

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// Any two majorities of the same n auditors share at least 2·Quorum(n)−n
// of them (at least one): so two checkpoints of one size with different
// roots can both carry a majority only if some auditor signed both — one
// auditor's signature never makes a checkpoint on its own, and a fork needs
// the auditors of another branch. Checked over every pair of signer sets
// for 1 to 7 auditors.
func TestTwoMajoritiesShareAnAuditor(t *testing.T) {
	for n := 1; n <= 7; n++ {
		q := Quorum(n)
		for a := range 1 << n {
			if popcount(a) < q {
				continue
			}
			for b := range 1 << n {
				if popcount(b) < q {
					continue
				}
				if both := popcount(a & b); both < 2*q-n || both < 1 {
					t.Fatalf("%d auditors: majorities %b and %b share %d, want at least %d", n, a, b, both, max(2*q-n, 1))
				}
			}
		}
	}
}

func popcount(x int) int {
	c := 0
	for ; x > 0; x &= x - 1 {
		c++
	}
	return c
}

// forkedLogs are two histories of one federation that agree up to the
// accounts and then record a different charge at the same index: what a
// raft leader feeding each follower different entries would make.
func forkedLogs(t *testing.T) (a, b *fed) {
	t.Helper()
	a, b = newFed(t), newFed(t)
	a.must(chargeBody("b-one", []string{"h1"}, gaussCurve(40, 1), 1), "agg")
	b.must(chargeBody("b-two", []string{"h1"}, gaussCurve(40, 1), 1), "agg")
	if a.st.TreeSize() != b.st.TreeSize() {
		t.Fatalf("sizes %d and %d", a.st.TreeSize(), b.st.TreeSize())
	}
	return a, b
}

// A fork of two majority-cosigned checkpoints of one size: the second
// branch's checkpoint signed by one auditor alone is no checkpoint (a
// QuorumError, refused by every check); signed by a majority, it shares a
// signer with the first, and whoever holds both — a hospital's or the
// student's receipt check (a Verifier), or verify given both — reports the
// fork and names the auditor that signed both roots.
func TestForkOfMajoritiesNamesWhoSignedBoth(t *testing.T) {
	a, b := forkedLogs(t)
	size := a.st.TreeSize()
	keys := auditorKeys(t, a.st)
	cpA := signedAt(t, a.st, size, "a1", "a2")
	lone := signedAt(t, b.st, size, "a1")
	cpB := signedAt(t, b.st, size, "a1", "a3")

	var qe *QuorumError
	if _, err := OpenCheckpoint(lone, keys); !errors.As(err, &qe) {
		t.Fatalf("one auditor's signature on the other branch: %v, want a QuorumError", err)
	}

	// Receipts of the last entry on each branch, as the aggregator hands
	// them to the hospital and the student.
	rA, err := a.st.Receipt(size-1, cpA)
	if err != nil {
		t.Fatal(err)
	}
	rB, err := b.st.Receipt(size-1, cpB)
	if err != nil {
		t.Fatal(err)
	}
	rLone, err := b.st.Receipt(size-1, lone)
	if err != nil {
		t.Fatal(err)
	}
	for _, check := range []struct {
		name string
		fn   func(v *Verifier, r Receipt) error
	}{
		{"hospital", func(v *Verifier, r Receipt) error { _, _, _, err := v.HospitalReceipt(r, "h1"); return err }},
		{"student", func(v *Verifier, r Receipt) error {
			en, err := DecodeEntry(r.Entry)
			if err != nil {
				return err
			}
			cmd, err := DecodeCommand(en.Command)
			if err != nil {
				return err
			}
			ch := cmd.Body.(*Charge)
			_, _, _, err = v.ChargeReceipt(r, ch.BatchID, ch.Student, make([]int32, ch.Answers), ch.AnswersHash) // every query answered
			return err
		}},
	} {
		t.Run(check.name, func(t *testing.T) {
			v := newVerifier(t, keys)
			if err := check.fn(v, rA); err != nil {
				t.Fatalf("the first branch's receipt: %v", err)
			}
			if err := check.fn(v, rLone); !errors.Is(err, ErrReceipt) || !errors.As(err, &qe) {
				t.Fatalf("the other branch on one auditor's word: %v, want a refusal for want of a majority", err)
			}
			err := check.fn(v, rB)
			var fe *ForkError
			if !errors.As(err, &fe) || fe.A.Root == fe.B.Root || fe.A.Size != size || !slices.Equal(fe.SignedBoth, []string{"a1"}) {
				t.Fatalf("the other branch's majority receipt: %v, want a ForkError naming a1", err)
			}
			if _, err := OpenCheckpoint(fe.NoteA, keys); err != nil {
				t.Fatalf("the evidence's first note: %v", err)
			}
			if _, err := OpenCheckpoint(fe.NoteB, keys); err != nil {
				t.Fatalf("the evidence's second note: %v", err)
			}
			// The first branch still checks: the Verifier refuses the
			// second, it does not forget the first.
			if err := check.fn(v, rA); err != nil {
				t.Fatalf("the first branch again: %v", err)
			}
		})
	}

	// verify, given the export of one branch and the other's checkpoint.
	export, err := a.st.Export([][]byte{cpA})
	if err != nil {
		t.Fatal(err)
	}
	r := Verify(export, VerifyOptions{TrustedKeys: keys, Earlier: [][]byte{cpB}, Unpinned: true})
	if r.OK || !failed(r, "fork") {
		t.Fatalf("verify holding both: %+v", r.Failures())
	}
	for _, c := range r.Failures() {
		if c.Name == "fork" && !(strings.Contains(c.Detail, "[a1 a2]") && strings.Contains(c.Detail, "[a1 a3]")) {
			t.Fatalf("the fork check does not name both signer sets: %s", c.Detail)
		}
	}
}
