package ledger

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// signedAt signs the checkpoint of the first size entries of st.
func signedAt(t testing.TB, st *State, size int64, auditors ...string) []byte {
	t.Helper()
	root, err := st.TreeHash(size)
	if err != nil {
		t.Fatal(err)
	}
	var signers []noteSigner
	for _, a := range auditors {
		signers = append(signers, auditorSigner(t, a))
	}
	b, err := SignCheckpoint(Checkpoint{Origin: st.Origin(), Size: size, Root: root}, signers...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func goldenExport(t testing.TB) (*fed, Export) {
	f := goldenLog(t)
	n := f.st.TreeSize()
	b, err := f.st.Export([][]byte{signedAt(t, f.st, 7, "a1", "a2"), signedAt(t, f.st, n, "a1", "a2", "a3")})
	if err != nil {
		t.Fatal(err)
	}
	x, err := DecodeExport(b)
	if err != nil {
		t.Fatal(err)
	}
	return f, x
}

func encodeExport(t testing.TB, x Export) []byte {
	t.Helper()
	b, err := x.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func firstFailure(r *Report) *Check {
	if f := r.Failures(); len(f) > 0 {
		return &f[0]
	}
	return nil
}

func TestVerifyGoodExport(t *testing.T) {
	f, x := goldenExport(t)
	b := encodeExport(t, x)
	golden(t, "export-records.bin", b)
	// An export written before refusal records still verifies.
	old, err := os.ReadFile(filepath.Join("testdata", "export.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if r := Verify(old, VerifyOptions{TrustedKeys: auditorKeys(t, f.st), Unpinned: true}); !r.OK || r.Refused != 2 {
		var sb strings.Builder
		r.WriteText(&sb)
		t.Fatalf("an export with whole refused commands failed:\n%s", sb.String())
	}
	r := Verify(b, VerifyOptions{TrustedKeys: auditorKeys(t, f.st), Unpinned: true})
	if !r.OK {
		var sb strings.Builder
		r.WriteText(&sb)
		t.Fatalf("a good export failed:\n%s", sb.String())
	}
	if !r.KeysPinned || r.Entries != f.st.TreeSize() || r.Root != f.st.RootHash() || r.Origin != testOrigin {
		t.Fatalf("report %+v", r)
	}
	if r.Accepted != 9 || r.Refused != 2 || r.Duplicates != 1 {
		t.Fatalf("counts %d/%d/%d", r.Accepted, r.Refused, r.Duplicates)
	}
	want := f.st.Accounts()
	for i, a := range r.Accounts {
		if a.Epsilon != want[i].Epsilon || a.Hospital != want[i].Hospital {
			t.Fatalf("replayed %s ε %v, ledger %s ε %v", a.Hospital, a.Epsilon, want[i].Hospital, want[i].Epsilon)
		}
	}
	var sb strings.Builder
	if err := r.WriteText(&sb); err != nil || !strings.HasPrefix(sb.String(), "VERIFIED") || !strings.Contains(sb.String(), "hospital h1: ε=") {
		t.Fatalf("text report:\n%s", sb.String())
	}
	if _, err := json.Marshal(r); err != nil {
		t.Fatal(err)
	}
	// A checkpoint kept from an earlier audit, which the log extends.
	if r := Verify(b, VerifyOptions{TrustedKeys: auditorKeys(t, f.st), Earlier: [][]byte{x.Checkpoints[0]}, Unpinned: true}); !r.OK || len(r.Checkpoints) != 3 {
		t.Fatalf("earlier checkpoint: ok=%v %+v", r.OK, r.Failures())
	}
	// Without pinned keys the report says so, and still verifies.
	if r := Verify(b, VerifyOptions{Unpinned: true}); !r.OK || r.KeysPinned {
		t.Fatalf("unpinned: ok=%v pinned=%v", r.OK, r.KeysPinned)
	}
}

func TestVerifyNamesTheBadEntry(t *testing.T) {
	f, x := goldenExport(t)
	keys := auditorKeys(t, f.st)
	n := len(x.Entries)
	rng := rand.New(rand.NewPCG(1, 2))
	for k := range n {
		size := len(x.Entries[k])
		// Every field of the entry: version, index, previous root, command
		// length, command, status, code, subject, original; and a few
		// seeded random bytes.
		offsets := []int{0, 1, 8, 9, 20, 40, 41, 44, 45, size / 2, size - 14, size - 13, size - 12, size - 9, size - 1}
		for range 8 {
			offsets = append(offsets, rng.IntN(size))
		}
		for _, off := range offsets {
			bad := x
			bad.Entries = append([][]byte(nil), x.Entries...)
			bad.Entries[k] = bytes.Clone(x.Entries[k])
			bad.Entries[k][off] ^= 0x01
			r := Verify(encodeExport(t, bad), VerifyOptions{TrustedKeys: keys, Unpinned: true})
			ff := firstFailure(r)
			if r.OK || ff == nil || ff.Entry == nil || *ff.Entry != int64(k) {
				t.Fatalf("byte %d of entry %d changed: first failure %+v", off, k, ff)
			}
		}
	}
}

func TestVerifyRemovedEntry(t *testing.T) {
	f, x := goldenExport(t)
	keys := auditorKeys(t, f.st)
	for k := range len(x.Entries) {
		bad := x
		bad.Entries = append(append([][]byte(nil), x.Entries[:k]...), x.Entries[k+1:]...)
		r := Verify(encodeExport(t, bad), VerifyOptions{TrustedKeys: keys, Unpinned: true})
		ff := firstFailure(r)
		if r.OK || ff == nil || ff.Entry == nil || *ff.Entry != int64(k) {
			t.Fatalf("entry %d removed: first failure %+v", k, ff)
		}
	}
	bad := x
	bad.Entries = append(append([][]byte(nil), x.Entries[:5]...), x.Entries[6:]...)
	r := Verify(encodeExport(t, bad), VerifyOptions{TrustedKeys: keys, Unpinned: true})
	var sb strings.Builder
	r.WriteText(&sb)
	if r.Replayed != 5 || !strings.HasPrefix(sb.String(), "FAILED") || !strings.Contains(sb.String(), "FAIL replay [entry 5]") ||
		!strings.Contains(sb.String(), "after the first 5 entries only") {
		t.Fatalf("text report of a log missing entry 5:\n%s", sb.String())
	}
	// Removing the last entries (and the checkpoint that covers them) is
	// caught by an earlier checkpoint the verifier kept.
	short := x
	short.Entries = x.Entries[:7]
	short.Checkpoints = x.Checkpoints[:1]
	r = Verify(encodeExport(t, short), VerifyOptions{TrustedKeys: keys, Earlier: [][]byte{x.Checkpoints[1]}, Unpinned: true})
	if r.OK || !failed(r, "earlier checkpoint") {
		t.Fatalf("a truncated log verified against a longer earlier checkpoint: %+v", r.Failures())
	}
}

func failed(r *Report, name string) bool {
	for _, c := range r.Failures() {
		if c.Name == name {
			return true
		}
	}
	return false
}

func TestVerifyFork(t *testing.T) {
	f, x := goldenExport(t)
	keys := auditorKeys(t, f.st)
	// Another history of the same federation, signed by two auditors at the
	// size of the export's first checkpoint.
	other := newFed(t)
	other.must(chargeBody("b-other", []string{"h1"}, gaussCurve(40, 1), 1), "agg")
	fork := signedAt(t, other.st, 7, "a2", "a3")
	r := Verify(encodeExport(t, x), VerifyOptions{TrustedKeys: keys, Earlier: [][]byte{fork}, Unpinned: true})
	if r.OK || !failed(r, "fork") || !failed(r, "earlier checkpoint") {
		t.Fatalf("fork not reported: %+v", r.Failures())
	}
	// A fork inside the export itself.
	bad := x
	bad.Checkpoints = append(append([][]byte(nil), x.Checkpoints...), fork)
	if r := Verify(encodeExport(t, bad), VerifyOptions{TrustedKeys: keys, Unpinned: true}); !failed(r, "fork") {
		t.Fatalf("fork in the export not reported: %+v", r.Failures())
	}
}

func TestVerifyCheckpointRules(t *testing.T) {
	f, x := goldenExport(t)
	keys := auditorKeys(t, f.st)
	n := f.st.TreeSize()
	tests := []struct {
		name        string
		checkpoints [][]byte
		trusted     []string
		fail        string
	}{
		{"no checkpoint", nil, keys, "coverage"},
		{"latest does not cover every entry", x.Checkpoints[:1], keys, "coverage"},
		{"one signature of three", [][]byte{signedAt(t, f.st, n, "a1")}, keys, "export checkpoint"},
		{"only one auditor trusted", x.Checkpoints, keys[:1], "export checkpoint"},
		{"trusted key not the log's", x.Checkpoints, []string{mustKey(t, "a1", "mallory"), keys[1], keys[2]}, "trusted key"},
		{"signed beyond the export", [][]byte{signedAt(t, f.st, n, "a1", "a2"), forgedSize(t, f.st, n+1)}, keys, "export checkpoint"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad := x
			bad.Checkpoints = tc.checkpoints
			r := Verify(encodeExport(t, bad), VerifyOptions{TrustedKeys: tc.trusted, Unpinned: true})
			if r.OK || !failed(r, tc.fail) {
				t.Fatalf("want a failed %q check, got %+v", tc.fail, r.Failures())
			}
		})
	}
	if r := Verify([]byte("junk"), VerifyOptions{Unpinned: true}); r.OK || !failed(r, "decode") {
		t.Fatal("junk verified")
	}
}

func mustKey(t testing.TB, id, keyName string) string {
	k, err := VerifierKey(id, testKey(keyName).Public().(edPublicKey))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// forgedSize signs a checkpoint claiming size entries with the current root.
func forgedSize(t testing.TB, st *State, size int64) []byte {
	b, err := SignCheckpoint(Checkpoint{Origin: st.Origin(), Size: size, Root: st.RootHash()}, auditorSigner(t, "a1"), auditorSigner(t, "a2"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func FuzzDecodeExport(f *testing.F) {
	_, x := goldenExport(f)
	b, _ := x.Encode()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		if reencodes(t, b, DecodeExport) {
			Verify(b, VerifyOptions{Unpinned: true}) // must not panic
		}
	})
}
