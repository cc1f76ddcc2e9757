package ledger

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"testing"
)

// A hospital's account commands are paced by the times they carry, the
// same on every replica: AccountBurst at once, then one every
// AccountEvery; a stamp before the last gains nothing, and a proposer's
// CheckAt refuses stamps more than StampWindow from its clock.
func TestAccountCommandsArePaced(t *testing.T) {
	f := newFed(t)
	// Long enough after h1 opened its account (in newFed) for a full bucket.
	start := f.now() + AccountBurst*AccountEvery
	version := uint64(0)
	change := func(at int64) []byte {
		version++
		return f.sign(&ChangeCap{Hospital: "h1", Version: version, CapEpsilon: 8, CapDelta: 1e-5, Timestamp: at}, "h1")
	}
	apply := func(cmd []byte) Result {
		t.Helper()
		r, err := f.st.Apply(cmd)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != StatusAccepted {
			version-- // the next command is signed at the same version again
		}
		return r
	}
	for i := range AccountBurst {
		if r := apply(change(start)); r.Status != StatusAccepted {
			t.Fatalf("change %d at once: %s %s", i, r.Code, r.Message)
		}
	}
	tests := []struct {
		name string
		at   int64
		want Code
	}{
		{"one more at once", start, CodeRateLimited},
		{"stamped an hour back", start - 3600e9, CodeRateLimited},
		{"almost one interval later", start + AccountEvery - 1, CodeRateLimited},
		{"one interval later", start + AccountEvery, CodeOK},
		{"again at that time", start + AccountEvery, CodeRateLimited},
		{"three intervals later", start + 3*AccountEvery, CodeOK},
		{"and the one saved", start + 3*AccountEvery, CodeOK},
		{"but not two", start + 3*AccountEvery, CodeRateLimited},
	}
	for _, tc := range tests {
		if r := apply(change(tc.at)); r.Code != tc.want {
			t.Fatalf("%s: %s %s, want %s", tc.name, r.Code, r.Message, tc.want)
		}
	}
	// Another hospital's pace is its own.
	if r := f.st.Check(f.sign(&ChangeCap{Hospital: "h2", Version: 1, CapEpsilon: 2, CapDelta: 1e-6, Timestamp: start}, "h2")); r.Status != StatusAccepted {
		t.Fatalf("h2: %s %s", r.Code, r.Message)
	}

	// A restored replica paces the same.
	snap, err := f.st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	restored := New()
	if err := restored.Restore(snap); err != nil {
		t.Fatal(err)
	}
	next := change(start + 3*AccountEvery)
	version--
	if a, b := f.st.Check(next), restored.Check(next); a.Code != CodeRateLimited || b.Code != a.Code {
		t.Fatalf("after restore: %s, before %s; want both rate-limited", b.Code, a.Code)
	}

	// A proposer refuses stamps far from its clock; Check does not look.
	later := start + 10*AccountEvery
	for _, tc := range []struct {
		name string
		now  int64
		want Code
	}{
		{"its clock", later, CodeOK},
		{"a minute behind it", later - StampWindow, CodeOK},
		{"more than a minute behind it", later - StampWindow - 1, CodeRateLimited},
		{"more than a minute ahead of it", later + StampWindow + 1, CodeRateLimited},
	} {
		cmd := change(later)
		version--
		if r := f.st.CheckAt(cmd, tc.now); r.Code != tc.want {
			t.Errorf("stamp at a proposer's clock %s: %s %s, want %s", tc.name, r.Code, r.Message, tc.want)
		}
		if r := f.st.Check(cmd); r.Code != CodeOK {
			t.Errorf("Check of the same: %s", r.Code)
		}
	}
}

// A signature Check saw verify is not verified again when the same bytes
// are applied, and the memory of it is bounded; a command changed after
// signing is still refused, whatever Check saw before.
func TestCheckedSignaturesChangeNoResult(t *testing.T) {
	f := newFed(t)
	good := f.sign(&ChangeCap{Hospital: "h1", Version: 1, CapEpsilon: 4, CapDelta: 1e-5, Timestamp: f.now()}, "h1")
	if r := f.st.Check(good); r.Status != StatusAccepted {
		t.Fatalf("check: %s %s", r.Code, r.Message)
	}
	key := f.st.parties["h1"].PublicKey
	if !f.st.checks.has(sha256.Sum256(good), key) {
		t.Fatal("the verified signature was not remembered")
	}
	forged := bytes.Clone(good)
	forged[len(forged)-1] ^= 1 // the signature's last byte
	if r := f.st.Check(forged); r.Code != CodeBadSignature {
		t.Fatalf("a changed signature after a good one: %s", r.Code)
	}
	if r := f.apply(good); r.Status != StatusAccepted {
		t.Fatalf("apply: %s %s", r.Code, r.Message)
	}
	c := &checkedSigs{keys: map[[32]byte]ed25519.PublicKey{}}
	digest := func(i int) [32]byte { return sha256.Sum256([]byte{byte(i), byte(i >> 8)}) }
	for i := range maxCheckedSigs + 10 {
		c.add(digest(i), key)
	}
	if len(c.keys) != maxCheckedSigs || c.has(digest(0), key) || !c.has(digest(maxCheckedSigs+9), key) {
		t.Fatalf("%d remembered; want the last %d", len(c.keys), maxCheckedSigs)
	}
}
