// Package fedtest holds the ledger fixtures the tests of the parties share:
// fixed keys for named parties, checkpoints cosigned with them, and a small
// ledger in memory that charges batches and proves its charges with
// receipts.
package fedtest

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
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
	signed, err := k.sign(cp, signers)
	if err != nil {
		return nil, err
	}
	keys, _ := st.AuditorKeys(cp.Size)
	_, err = ledger.OpenCheckpoint(signed, keys)
	return signed, err
}

// sign signs cp with the keys of the auditors signers, however few.
func (k Keys) sign(cp ledger.Checkpoint, signers []string) ([]byte, error) {
	var ss []note.Signer
	for _, id := range signers {
		s, err := ledger.NewCheckpointSigner(id, k.Key(id), time.Now().Unix())
		if err != nil {
			return nil, err
		}
		ss = append(ss, s)
	}
	return ledger.SignCheckpoint(cp, ss...)
}

// Ledger is a ledger in memory whose parties sign with the keys of Keys:
// three auditors a1, a2 and a3, the administrator admin, the aggregator
// agg, hospitals with an open account each, and the student s1. Its
// methods fail the test on any error or refused command.
type Ledger struct {
	t     testing.TB
	keys  Keys
	State *ledger.State
}

// Genesis is the genesis of a Ledger's parties, of origin at time ts,
// for the administrator to sign.
func (k Keys) Genesis(origin string, ts int64, hospitals ...string) *ledger.Genesis {
	parties := []ledger.Party{k.Party("a1", ledger.RoleAuditor), k.Party("a2", ledger.RoleAuditor), k.Party("a3", ledger.RoleAuditor),
		k.Party("admin", ledger.RoleAdmin), k.Party("agg", ledger.RoleAggregator), k.Party("s1", ledger.RoleStudent)}
	for _, h := range hospitals {
		parties = append(parties, k.Party(h, ledger.RoleHospital))
	}
	slices.SortFunc(parties, func(a, b ledger.Party) int { return strings.Compare(a.ID, b.ID) })
	return &ledger.Genesis{Origin: origin, Timestamp: ts, Parties: parties}
}

// NewLedger is a Ledger whose hospitals each have an account with a cap
// of ε 100 and δ 1e-5, and in which s1 is registered.
func (k Keys) NewLedger(t testing.TB, hospitals ...string) *Ledger {
	t.Helper()
	l := &Ledger{t: t, keys: k, State: ledger.New()}
	l.Apply(k.Genesis("test/ledger", 1, hospitals...), "admin")
	for _, h := range hospitals {
		l.Apply(&ledger.OpenAccount{Hospital: h, CapEpsilon: 100, CapDelta: 1e-5, Timestamp: l.now()}, h)
	}
	l.Apply(&ledger.RegisterStudent{Student: "s1", Timestamp: l.now()}, "admin")
	return l
}

// now is the timestamp of the next command: one more than the log's size.
func (l *Ledger) now() int64 { return l.State.TreeSize() + 1 }

// Apply applies b signed by signer and returns its index.
func (l *Ledger) Apply(b ledger.Body, signer string) int64 {
	l.t.Helper()
	cmd, err := ledger.Sign(b, signer, l.keys.Key(signer))
	if err != nil {
		l.t.Fatal(err)
	}
	r, err := l.State.Apply(cmd)
	if err != nil || r.Status != ledger.StatusAccepted {
		l.t.Fatalf("%s: %+v %v", b.Kind(), r, err)
	}
	return int64(r.Index)
}

// AuditorKeys are the auditors' checkpoint verifier keys, as a party pins
// them.
func (l *Ledger) AuditorKeys() []string {
	l.t.Helper()
	keys, err := l.State.AuditorKeys(l.State.TreeSize())
	if err != nil {
		l.t.Fatal(err)
	}
	return keys
}

// Charge commits the aggregator's GNMax charge of batch for s1 and the
// hospitals, queries answered with answers of that hash, and returns its
// index.
func (l *Ledger) Charge(batch []byte, hospitals []string, queries int, answers [32]byte) int64 {
	l.t.Helper()
	return l.ChargeAnswers(batch, hospitals, queries, queries, answers)
}

// ChargeAnswers is Charge of a batch of which answered queries were
// answered (with Confident-GNMax, whose refusals cost their threshold
// test).
func (l *Ledger) ChargeAnswers(batch []byte, hospitals []string, queries, answered int, answers [32]byte) int64 {
	l.t.Helper()
	p := mechanism.Params{Mechanism: mechanism.GNMax, Sigma: 40, Teachers: 10, Classes: 4}
	if answered != queries {
		p = mechanism.Params{Mechanism: mechanism.ConfidentGNMax, Threshold: 8, Sigma1: 40, Sigma2: 40, Teachers: 10, Classes: 4}
	}
	cost, err := p.Charge(mechanism.DefaultGrid(), answered, queries-answered)
	if err != nil {
		l.t.Fatal(err)
	}
	return l.Apply(&ledger.Charge{BatchID: hex.EncodeToString(batch), Student: "s1", Hospitals: hospitals,
		Mechanism: string(p.Mechanism), Params: p.LedgerParams(), Queries: uint64(queries), Answers: uint64(answered),
		Curve: cost.RDP.Values(), AnswersHash: answers, Timestamp: l.now()}, "agg")
}

// Receipt is the proof of the command at index, as the aggregator forwards
// it, in the latest checkpoint signed by the auditors signers: fewer than
// a majority make a receipt that every party must refuse.
func (l *Ledger) Receipt(index int64, signers ...string) *nzcpb.Receipt {
	l.t.Helper()
	cp, err := l.State.Checkpoint()
	if err != nil {
		l.t.Fatal(err)
	}
	signed, err := l.keys.sign(cp, signers)
	if err != nil {
		l.t.Fatal(err)
	}
	r, err := l.State.Receipt(index, signed)
	if err != nil {
		l.t.Fatal(err)
	}
	return protocol.ReceiptToWire(r)
}
