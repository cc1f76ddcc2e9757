package ledger

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
)

func auditorSigner(t testing.TB, id string) note.Signer {
	t.Helper()
	s, err := NewCheckpointSigner(id, testKey(id), testCosignTime)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func auditorKeys(t testing.TB, st *State) []string {
	t.Helper()
	keys, err := st.AuditorKeys(st.TreeSize())
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func TestInclusionAndConsistencyProofs(t *testing.T) {
	f := goldenLog(t)
	st := f.st
	n := st.TreeSize()
	entries, _ := st.Entries(0, n)
	var cps []Checkpoint
	for size := int64(1); size <= n; size++ {
		root, err := st.TreeHash(size)
		if err != nil {
			t.Fatal(err)
		}
		cps = append(cps, Checkpoint{Origin: testOrigin, Size: size, Root: root})
	}
	for _, c := range cps {
		for i := int64(0); i < c.Size; i++ {
			p, err := st.ProveInclusion(i, c.Size)
			if err != nil {
				t.Fatal(err)
			}
			if err := VerifyInclusion(entries[i], i, c, p); err != nil {
				t.Fatalf("entry %d in size %d: %v", i, c.Size, err)
			}
			bad := bytes.Clone(entries[i])
			bad[len(bad)-1] ^= 1
			if err := VerifyInclusion(bad, i, c, p); !errors.Is(err, ErrProof) {
				t.Fatalf("a changed entry %d verified in size %d: %v", i, c.Size, err)
			}
		}
	}
	for _, older := range cps {
		for _, newer := range cps[older.Size-1:] {
			p, err := st.ProveConsistency(older.Size, newer.Size)
			if err != nil {
				t.Fatal(err)
			}
			if err := VerifyConsistency(older, newer, p); err != nil {
				t.Fatalf("%d → %d: %v", older.Size, newer.Size, err)
			}
			if older.Size == newer.Size {
				continue
			}
			rewritten := older
			rewritten.Root[0] ^= 1
			if err := VerifyConsistency(rewritten, newer, p); !errors.Is(err, ErrProof) {
				t.Fatalf("a rewritten tree of size %d was consistent with size %d", older.Size, newer.Size)
			}
		}
	}
	if _, err := st.ProveInclusion(n, n); err == nil {
		t.Fatal("proved an entry past the end")
	}
}

func TestCheckpointQuorum(t *testing.T) {
	f := goldenLog(t)
	c, err := f.st.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	keys := auditorKeys(t, f.st)
	if len(keys) != 3 {
		t.Fatalf("%d auditor keys", len(keys))
	}
	one, err := SignCheckpoint(c, auditorSigner(t, "a1"))
	if err != nil {
		t.Fatal(err)
	}
	var qe *QuorumError
	if _, err := OpenCheckpoint(one, keys); !errors.As(err, &qe) || len(qe.Signers) != 1 {
		t.Fatalf("one of three signatures: %v", err)
	}
	two, err := AddSignatures(one, auditorSigner(t, "a3"))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := OpenCheckpoint(two, keys)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Checkpoint != c || strings.Join(sc.Signers, ",") != "a1,a3" || sc.Quorum != 2 {
		t.Fatalf("opened %+v", sc)
	}
	// The same auditor twice is one signature.
	twice, _ := AddSignatures(one, auditorSigner(t, "a1"))
	if _, err := OpenCheckpoint(twice, keys); !errors.As(err, &qe) {
		t.Fatalf("a1 twice counted as a quorum: %v", err)
	}
	// A key under an auditor's name that is not the auditor's key does not count.
	forged, _ := NewCheckpointSigner("a2", testKey("mallory"), testCosignTime)
	withForged, _ := AddSignatures(one, forged)
	if _, err := OpenCheckpoint(withForged, keys); !errors.As(err, &qe) {
		t.Fatalf("a forged a2 signature counted: %v", err)
	}
	// Changing the text breaks every signature.
	changed := bytes.Replace(two, []byte("\n"+c.Root.String()), []byte("\n"+Checkpoint{}.Root.String()), 1)
	if bytes.Equal(changed, two) {
		t.Fatal("test did not change the root")
	}
	if _, err := OpenCheckpoint(changed, keys); err == nil {
		t.Fatal("a checkpoint with a changed root verified")
	}
}

func TestDetectFork(t *testing.T) {
	f := goldenLog(t)
	c, _ := f.st.Checkpoint()
	other := newFed(t)
	other.must(chargeBody("b1", []string{"h1"}, gaussCurve(40, 1), 1), "agg")
	for other.st.TreeSize() < c.Size {
		other.must(chargeBody(strings.Repeat("x", int(other.st.TreeSize())), []string{"h1"}, gaussCurve(40, 1), 1), "agg")
	}
	d, _ := other.st.Checkpoint()
	var fe *ForkError
	if err := DetectFork(c, d); !errors.As(err, &fe) || fe.A.Size != c.Size {
		t.Fatalf("no fork found between %v and %v: %v", c, d, err)
	}
	if err := DetectFork(c, c); err != nil {
		t.Fatal(err)
	}
	if err := VerifyConsistency(c, d, nil); !errors.As(err, &fe) {
		t.Fatalf("consistency of a fork: %v", err)
	}
}

func TestParseCheckpoint(t *testing.T) {
	good := Checkpoint{Origin: testOrigin, Size: 12, Root: [32]byte{1, 2, 3}}
	if c, err := ParseCheckpoint(good.Text()); err != nil || c != good {
		t.Fatalf("round trip: %v %v", c, err)
	}
	root := good.Text()[len(testOrigin)+4:]
	for name, text := range map[string]string{
		"leading zero":   testOrigin + "\n012\n" + string(root),
		"negative":       testOrigin + "\n-1\n" + string(root),
		"plus":           testOrigin + "\n+12\n" + string(root),
		"extension line": string(good.Text()) + "extra\n",
		"no newline":     strings.TrimSuffix(string(good.Text()), "\n"),
		"short root":     testOrigin + "\n12\nAQID\n",
		"space origin":   "a b\n12\n" + string(root),
		"empty":          "",
	} {
		if _, err := ParseCheckpoint([]byte(text)); !errors.Is(err, ErrCheckpoint) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func FuzzParseCheckpoint(f *testing.F) {
	f.Add(Checkpoint{Origin: testOrigin, Size: 12, Root: [32]byte{1, 2, 3}}.Text())
	f.Add([]byte("o\n0\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseCheckpoint(b)
		if err != nil {
			return
		}
		if !bytes.Equal(c.Text(), b) {
			t.Fatalf("parse→text changed %q to %q", b, c.Text())
		}
	})
}

func FuzzOpenCheckpoint(f *testing.F) {
	g := goldenLog(f)
	c, _ := g.st.Checkpoint()
	keys, _ := g.st.AuditorKeys(g.st.TreeSize())
	signed, _ := SignCheckpoint(c, auditorSigner(f, "a1"), auditorSigner(f, "a2"))
	f.Add(signed)
	f.Fuzz(func(t *testing.T, b []byte) {
		sc, err := OpenCheckpoint(b, keys)
		if err != nil {
			return
		}
		if len(sc.Signers) < 2 {
			t.Fatalf("opened with %d signers", len(sc.Signers))
		}
		if _, err := ParseCheckpoint(sc.Text()); err != nil {
			t.Fatal(err)
		}
	})
}
