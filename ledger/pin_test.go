package ledger

import (
	"crypto/ed25519"
	"slices"
	"strings"
	"testing"
)

// A log that names a made-up administrator and hospital, signed by a
// majority of the real auditors, is not verified against the auditors' keys
// alone: the report says the federation is unpinned and fails, unless an
// unpinned check is accepted explicitly; pinned to the federation directory
// it fails, naming the genesis signer and the foreign party. The genesis
// can also be pinned by its hash.
func TestVerifyPinsTheFederation(t *testing.T) {
	_, x := goldenExport(t)
	dir := genesisBody().Parties
	keys := func(st *State) []string { k, _ := st.AuditorKeys(st.TreeSize()); return k }

	good := encodeExport(t, x)
	first, _ := DecodeEntry(x.Entries[0])
	firstCmd, _ := DecodeCommand(first.Command)
	genesisHash, _ := firstCmd.Digest()
	r := Verify(good, VerifyOptions{TrustedKeys: keys(goldenLog(t).st), Directory: dir, GenesisHash: genesisHash[:]})
	if !r.OK || !r.FederationPinned {
		t.Fatalf("the real log fails pinned verification: %+v", r.Failures())
	}
	if r := Verify(good, VerifyOptions{TrustedKeys: keys(goldenLog(t).st), GenesisHash: []byte("another genesis hash")}); !failed(r, "genesis") {
		t.Fatal("a wrong genesis hash passed")
	}

	// The fabrication: the real auditors, a made-up administrator key and
	// hospital.
	mallory := testKey("mallory")
	fake := genesisBody()
	for i, p := range fake.Parties {
		if p.ID == "admin" {
			fake.Parties[i].PublicKey = mallory.Public().(ed25519.PublicKey)
		}
	}
	fake.Parties = append(fake.Parties, testParty("h9", RoleHospital))
	slices.SortFunc(fake.Parties, func(a, b Party) int { return strings.Compare(a.ID, b.ID) })
	f := &fed{t: t, st: New()}
	g, err := Sign(fake, "admin", mallory)
	if err != nil {
		t.Fatal(err)
	}
	if r := f.apply(g); r.Status != StatusAccepted {
		t.Fatalf("fabricated genesis: %s", r.Message)
	}
	b, err := f.st.Export([][]byte{signedAt(t, f.st, f.st.TreeSize(), "a1", "a2")})
	if err != nil {
		t.Fatal(err)
	}
	trusted := keys(f.st)
	// With the auditor keys alone the federation is unpinned: the check
	// fails on that alone and says so, rather than passing the fabrication.
	r = Verify(b, VerifyOptions{TrustedKeys: trusted})
	if r.OK || !r.OnlyUnpinned() || r.FederationPinned {
		t.Fatalf("the fabricated log checked with its auditor keys alone must fail as unpinned, and on nothing else: ok=%v %+v", r.OK, r.Failures())
	}
	var text strings.Builder
	if err := r.WriteText(&text); err != nil || strings.Contains(text.String(), "VERIFIED:") || !strings.Contains(text.String(), "UNPINNED") {
		t.Fatalf("the report of an unpinned check must not read VERIFIED and must say UNPINNED: %v\n%s", err, text.String())
	}
	// Accepted explicitly, it passes, and still says it is unpinned.
	r = Verify(b, VerifyOptions{TrustedKeys: trusted, Unpinned: true})
	text.Reset()
	if err := r.WriteText(&text); err != nil || !r.OK || r.FederationPinned || !strings.Contains(text.String(), "federation UNPINNED, accepted") {
		t.Fatalf("an accepted unpinned check of the fabricated log: ok=%v %+v\n%s", r.OK, r.Failures(), text.String())
	}
	r = Verify(b, VerifyOptions{TrustedKeys: trusted, Directory: dir})
	if r.OK || !failed(r, "genesis signer") || !failed(r, "party") {
		t.Fatalf("pinned to the directory, the fabricated log must fail on its signer and its parties: %+v", r.Failures())
	}
}

// The state knows its genesis's digest, also after a restore from a
// snapshot: what an auditor pins.
func TestGenesisHash(t *testing.T) {
	f := newFed(t)
	first, _ := f.st.Entries(0, 1)
	en, _ := DecodeEntry(first[0])
	cmd, _ := DecodeCommand(en.Command)
	want, _ := cmd.Digest()
	if got, ok := f.st.GenesisHash(); !ok || got != want {
		t.Fatalf("GenesisHash = %x %v, want %x", got, ok, want)
	}
	restored := restoredCopy(t, f.st)
	if got, ok := restored.GenesisHash(); !ok || got != want {
		t.Fatalf("after a restore: %x %v", got, ok)
	}
	if _, ok := New().GenesisHash(); ok {
		t.Fatal("a new ledger has a genesis")
	}
}
