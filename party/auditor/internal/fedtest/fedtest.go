// Package fedtest holds the ledger fixtures the tests of party/auditor and
// its subpackages share: fixed keys for named parties and checkpoints
// cosigned with them.
package fedtest

import (
	"crypto/ed25519"
	"crypto/sha256"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/nzcfed/nzc/ledger"
)

// Keys derives a fixed ed25519 key for each party name from the seed
// Keys+name, so that a test's keys, and the golden files made with them,
// are the same on every run, and different suites' keys differ.
type Keys string

// Key is the private key of the party name.
func (k Keys) Key(name string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte(string(k) + name))
	return ed25519.NewKeyFromSeed(seed[:])
}

// Public is the public key of the party name.
func (k Keys) Public(name string) ed25519.PublicKey {
	return k.Key(name).Public().(ed25519.PublicKey)
}

// Party is the ledger party id with the given role and its key.
func (k Keys) Party(id string, role ledger.Role) ledger.Party {
	return ledger.Party{ID: id, Role: role, PublicKey: k.Public(id)}
}

// Cosign signs st's latest checkpoint with the keys of the auditors
// signers, as an auditor node gathering its peers' signatures does, and
// checks the note against the auditors st knows: on that check's error it
// returns the note with the error.
func (k Keys) Cosign(st *ledger.State, signers ...string) ([]byte, error) {
	cp, err := st.Checkpoint()
	if err != nil {
		return nil, err
	}
	var ss []note.Signer
	for _, id := range signers {
		s, err := ledger.NewCheckpointSigner(id, k.Key(id), time.Now().Unix())
		if err != nil {
			return nil, err
		}
		ss = append(ss, s)
	}
	signed, err := ledger.SignCheckpoint(cp, ss...)
	if err != nil {
		return nil, err
	}
	keys, _ := st.AuditorKeys(cp.Size)
	_, err = ledger.OpenCheckpoint(signed, keys)
	return signed, err
}
