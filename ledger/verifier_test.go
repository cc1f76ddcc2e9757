package ledger

import (
	"bytes"
	"errors"
	"testing"
)

// TestVerifierRemembersOnlyWhatVerified checks that a Verifier that has
// opened a checkpoint still refuses every receipt a fresh check refuses:
// the memo holds only checkpoints that verified, under their exact bytes.
func TestVerifierRemembersOnlyWhatVerified(t *testing.T) {
	f, digest, good, majority, bad := receiptCases(t)
	v, err := NewVerifier(auditorKeys(t, f.st))
	if err != nil {
		t.Fatal(err)
	}
	// Warm the memo with the majority's checkpoint.
	if _, sc, err := v.Receipt(good, digest); err != nil || len(sc.Signers) != 2 {
		t.Fatalf("a majority's receipt: signers %v, err %v", sc.Signers, err)
	}

	// The last line of the note is a3's signature: change one character
	// of it, keeping the text the memo has seen.
	forged := bytes.Clone(majority)
	last := bytes.LastIndex(forged, []byte("\n\u2014 a3 "))
	if last < 0 {
		t.Fatalf("no signature of a3 in\n%s", majority)
	}
	i := last + len("\n\u2014 a3 ") + 20 // inside the ed25519 signature's base64
	if forged[i] == 'A' {
		forged[i] = 'B'
	} else {
		forged[i] = 'A'
	}
	forgedReceipt := good
	forgedReceipt.Checkpoint = forged
	// Each refusal twice: a refused checkpoint is not remembered either.
	cases := append([]badReceipt{{"a cosignature changed under the remembered text", forgedReceipt, digest}}, bad...)
	for _, c := range append(cases, cases...) {
		t.Run(c.name, func(t *testing.T) {
			if _, _, err := v.Receipt(c.r, c.want); !errors.Is(err, ErrReceipt) {
				t.Fatalf("verified: %v", err)
			}
		})
	}

	// What one caller does with the checkpoint it is given does not change
	// what the next caller is given.
	_, sc, err := v.Receipt(good, digest)
	if err != nil {
		t.Fatal(err)
	}
	sc.Signers[0] = "mallory"
	sc.Times["mallory"] = 1
	if _, sc, err := v.Receipt(good, digest); err != nil || sc.Signers[0] == "mallory" || sc.Times["mallory"] != 0 {
		t.Fatalf("the memo changed through a returned checkpoint: %v %v %v", sc.Signers, sc.Times, err)
	}
}

// TestVerifierForgetsTheOldest checks that the memo stays bounded and that
// a checkpoint it forgot is checked again, not refused.
func TestVerifierForgetsTheOldest(t *testing.T) {
	f, digest, index, _ := receiptFixture(t)
	v, err := NewVerifier(auditorKeys(t, f.st))
	if err != nil {
		t.Fatal(err)
	}
	var first Receipt
	// Each signing time makes other bytes for the same checkpoint.
	for i := range verifierMemo + 3 {
		at := int64(1_700_000_000 + i)
		r, err := f.st.Receipt(index, signedAtTimes(t, f.st, map[string]int64{"a1": at, "a2": at}))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = r
		}
		if _, _, err := v.Receipt(r, digest); err != nil {
			t.Fatalf("checkpoint %d: %v", i, err)
		}
	}
	if n := len(v.opened); n != verifierMemo || len(v.order) != verifierMemo {
		t.Fatalf("the memo holds %d checkpoints (order %d), want %d", n, len(v.order), verifierMemo)
	}
	if _, _, err := v.Receipt(first, digest); err != nil {
		t.Fatalf("a forgotten checkpoint: %v", err)
	}
}

func TestNewVerifierChecksTheKeys(t *testing.T) {
	f, _, _, _ := receiptFixture(t)
	keys := auditorKeys(t, f.st)
	for _, c := range []struct {
		name string
		keys []string
	}{
		{"a key that does not parse", append([]string{"a1+00000000+AAAA"}, keys[1:]...)},
		{"two keys of one auditor", append(keys, keys[0])},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := NewVerifier(c.keys); err == nil {
				t.Fatalf("accepted %v", c.keys)
			}
		})
	}
}

// newVerifier is NewVerifier of keys that must parse.
func newVerifier(t testing.TB, keys []string) *Verifier {
	t.Helper()
	v, err := NewVerifier(keys)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
