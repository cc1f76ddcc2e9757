package ledger

import (
	"bytes"
	"reflect"
	"testing"
)

// TestPreverifyChangesNoResult applies one batch of commands, good and bad,
// to two copies of a federation, one after Preverify and one without, and
// requires the same results and the same tree: Preverify only saves work.
func TestPreverifyChangesNoResult(t *testing.T) {
	plain, pre := newFed(t), newFed(t)
	good := plain.sign(chargeBody("b1", []string{"h1"}, gaussCurve(40, 10), 10), "agg")
	flipped := bytes.Clone(plain.sign(chargeBody("b2", []string{"h1"}, gaussCurve(40, 10), 10), "agg"))
	flipped[len(flipped)-1] ^= 1 // the signature is last
	otherKey, err := Sign(chargeBody("b3", []string{"h1"}, gaussCurve(40, 10), 10), "agg", testKey("h1"))
	if err != nil {
		t.Fatal(err)
	}
	unknown, err := Sign(chargeBody("b4", []string{"h1"}, gaussCurve(40, 10), 10), "mallory", testKey("mallory"))
	if err != nil {
		t.Fatal(err)
	}
	later := plain.sign(chargeBody("b5", []string{"h2"}, gaussCurve(40, 10), 10), "agg")
	batch := [][]byte{good, flipped, otherKey, unknown, {1, 2, 3}, good, later}

	pre.st.Preverify(batch, 3)
	verified := 0
	for _, d := range pre.st.pre.memo {
		if d.verifiedWith != nil {
			verified++
		}
	}
	if n, d := verified, len(pre.st.pre.memo); n != 2 || d != 5 {
		t.Fatalf("Preverify remembers %d signatures and %d commands, want the 2 that verify and the 5 distinct ones that decode", n, d)
	}
	wantStatus := []Status{StatusAccepted, StatusRefused, StatusRefused, StatusRefused, StatusRefused, StatusDuplicate, StatusAccepted}
	for i, cmd := range batch {
		want, got := plain.apply(cmd), pre.apply(cmd)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("command %d: %+v after Preverify, %+v without", i, got, want)
		}
		if want.Status != wantStatus[i] {
			t.Errorf("command %d: %s (%s), want %s", i, want.Status, want.Message, wantStatus[i])
		}
	}
	a, _ := plain.st.Checkpoint()
	b, _ := pre.st.Checkpoint()
	if a != b {
		t.Fatalf("the trees differ: %+v after Preverify, %+v without", b, a)
	}
}

// TestVerifyTrustsOnlyTheSameKey: a signature seen to verify under one key
// is not taken as verifying under another.
func TestVerifyTrustsOnlyTheSameKey(t *testing.T) {
	f := newFed(t)
	c, err := DecodeCommand(f.sign(chargeBody("b1", []string{"h1"}, gaussCurve(40, 10), 10), "agg"))
	if err != nil {
		t.Fatal(err)
	}
	agg, h1 := testParty("agg", RoleAggregator).PublicKey, testParty("h1", RoleHospital).PublicKey
	for _, tc := range []struct {
		name              string
		key, verifiedWith []byte
		want              bool
	}{
		{"not preverified, the signer's key", agg, nil, true},
		{"not preverified, another key", h1, nil, false},
		{"preverified under the same key", agg, agg, true},
		{"preverified under another key", h1, agg, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := verify(c, tc.key, tc.verifiedWith); got != tc.want {
				t.Fatalf("verify = %v, want %v", got, tc.want)
			}
		})
	}
}
