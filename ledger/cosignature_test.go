package ledger

import (
	"crypto/ed25519"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
)

// signedAtTimes signs the checkpoint of the whole log of st by each auditor
// at its own time.
func signedAtTimes(t testing.TB, st *State, times map[string]int64) []byte {
	t.Helper()
	cp, err := st.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	var signers []note.Signer
	for id, at := range times {
		s, err := NewCheckpointSigner(id, testKey(id), at)
		if err != nil {
			t.Fatal(err)
		}
		signers = append(signers, s)
	}
	b, err := SignCheckpoint(cp, signers...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// plainSigner signs as sumdb/note's plain ed25519 did before checkpoints
// carried a time.
func plainSigner(t testing.TB, id string) note.Signer {
	t.Helper()
	k := testKey(id)
	vkey, err := note.NewEd25519VerifierKey(id, k.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return &plainEd25519{name: id, hash: v.KeyHash(), key: k}
}

type plainEd25519 struct {
	name string
	hash uint32
	key  ed25519.PrivateKey
}

func (s *plainEd25519) Name() string                    { return s.name }
func (s *plainEd25519) KeyHash() uint32                 { return s.hash }
func (s *plainEd25519) Sign(msg []byte) ([]byte, error) { return ed25519.Sign(s.key, msg), nil }

// A frozen export — one fetched long ago, or served by an auditor that
// stopped at some point — carries the cosignatures of then: with a maximum
// age it fails, and the age is reported either way.
func TestVerifyFreshness(t *testing.T) {
	const at = 1_800_000_000
	f := goldenLog(t)
	keys := auditorKeys(t, f.st)
	tests := []struct {
		name    string
		times   map[string]int64
		now     int64
		maxAge  int64
		ok      bool
		wantAge int64
	}{
		{"fresh", map[string]int64{"a1": at, "a2": at - 5, "a3": at - 9}, at + 10, 60, true, 15},
		{"frozen a day ago", map[string]int64{"a1": at, "a2": at, "a3": at}, at + 86400, 3600, false, 86400},
		{"no maximum age", map[string]int64{"a1": at, "a2": at}, at + 86400, 0, true, 86400},
		// One auditor stamping a time of its choosing does not make an
		// old checkpoint fresh: the age is the majority's.
		{"minority stamps the future", map[string]int64{"a1": at + 1_000_000, "a2": at, "a3": at - 7200}, at + 60, 600, true, 60},
		{"minority stamps now, majority old", map[string]int64{"a1": at, "a2": at - 7200, "a3": at - 7300}, at, 3600, false, 7200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := f.st.Export([][]byte{signedAtTimes(t, f.st, tc.times)})
			if err != nil {
				t.Fatal(err)
			}
			r := Verify(b, VerifyOptions{TrustedKeys: keys, Now: tc.now, MaxAge: tc.maxAge, Unpinned: true})
			if r.OK != tc.ok {
				var sb strings.Builder
				r.WriteText(&sb)
				t.Fatalf("OK = %v, want %v:\n%s", r.OK, tc.ok, sb.String())
			}
			if !tc.ok && !failed(r, "freshness") {
				t.Fatalf("failures %v, want freshness", r.Failures())
			}
			if r.Age == nil || *r.Age != tc.wantAge {
				t.Fatalf("age %v, want %d", r.Age, tc.wantAge)
			}
		})
	}
}

// Signatures without a time (plain ed25519 notes) do not count: otherwise
// an auditor could vouch for a checkpoint with no statement of when.
func TestUntimedSignaturesDoNotCount(t *testing.T) {
	f := goldenLog(t)
	cp, err := f.st.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	b, err := SignCheckpoint(cp, plainSigner(t, "a1"), plainSigner(t, "a2"), plainSigner(t, "a3"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenCheckpoint(b, auditorKeys(t, f.st)); err == nil {
		t.Fatal("a checkpoint with untimed signatures opened")
	}
}

func TestCosignatureFormat(t *testing.T) {
	// The C2SP cosignature/v1 signed message and key ID, recomputed here
	// from the specification's definitions.
	k := testKey("a1")
	s, err := NewCheckpointSigner("a1", k, 1679315147)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n")
	sig, err := s.Sign(msg)
	if err != nil {
		t.Fatal(err)
	}
	if len(sig) != 72 || string(sig[:8]) != "\x00\x00\x00\x00\x64\x18\x50\xcb" {
		t.Fatalf("signature %x: want the big-endian time 1679315147 then 64 bytes", sig)
	}
	want := "cosignature/v1\ntime 1679315147\n" + string(msg)
	if !ed25519.Verify(k.Public().(ed25519.PublicKey), []byte(want), sig[8:]) {
		t.Fatal("the signature is not over the cosignature/v1 message")
	}
	vkey, err := VerifierKey("a1", k.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	v, err := CheckpointVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	if v.KeyHash() != s.KeyHash() || !v.Verify(msg, sig) {
		t.Fatal("the verifier derived from the pinned key does not verify the cosignature")
	}
	sig[0] = 0x80 // a time beyond 2^63-1
	if v.Verify(msg, sig) {
		t.Fatal("a time beyond 2^63-1 verified")
	}
	if _, err := NewCheckpointSigner("a1", k, -1); err == nil {
		t.Fatal("a time before the epoch was accepted")
	}
}
