package ledger

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"sync"

	"golang.org/x/mod/sumdb/note"

	"github.com/nzcfed/nzc/mechanism"
)

// verifierMemo is how many opened checkpoints a Verifier remembers: the
// receipts in flight at one time share a handful of checkpoints (one per
// round of cosigning), so a few suffice.
const verifierMemo = 16

// A Verifier checks receipts and signed checkpoints against the auditors'
// pinned verifier keys (see VerifierKey), and opens each signed checkpoint
// once. The receipts of
// one group commit share their checkpoint; checking its majority of
// signatures again for each receipt would cost that many signature checks
// per receipt for nothing: the same bytes under the same keys give the same
// verdict. Only checkpoints that verified are remembered, by the SHA-256 of
// their bytes, so a checkpoint that differs in any byte is checked anew.
//
// A Verifier also remembers the root of each checkpoint size it verified
// (the latest forkMemo sizes) and refuses, with a *ForkError holding both
// notes, a checkpoint a majority signed with another root for a size it
// has seen: the auditors' logs forked, and a party that checks its
// receipts with one Verifier (the aggregator, each hospital, the student)
// detects it with the second receipt on the other branch.
//
// A Verifier is safe for concurrent use.
type Verifier struct {
	keys []note.Verifier

	mu     sync.Mutex
	opened map[[32]byte]SignedCheckpoint
	order  [][32]byte // opened's keys, oldest first
	roots  map[int64]seenRoot
	sizes  []int64 // roots' keys, oldest first
}

// forkMemo is how many checkpoint sizes a Verifier remembers the root of,
// to detect a fork, with its note as evidence: well under 1 MiB.
const forkMemo = 1024

// seenRoot is a verified checkpoint kept as evidence of its size's root.
type seenRoot struct {
	sc   SignedCheckpoint
	note []byte
}

// NewVerifier returns a Verifier for the given auditor verifier keys, which
// it checks now: a key that does not parse, or two keys of one auditor,
// are an error.
func NewVerifier(auditorKeys []string) (*Verifier, error) {
	vs, err := CheckpointVerifiers(auditorKeys)
	if err != nil {
		return nil, err
	}
	return &Verifier{keys: vs, opened: map[[32]byte]SignedCheckpoint{}, roots: map[int64]seenRoot{}}, nil
}

// Checkpoint is OpenCheckpoint with the Verifier's keys.
func (v *Verifier) Checkpoint(signed []byte) (SignedCheckpoint, error) {
	h := sha256.Sum256(signed)
	v.mu.Lock()
	sc, ok := v.opened[h]
	v.mu.Unlock()
	if ok {
		return sc.clone(), nil
	}
	sc, err := openCheckpoint(signed, v.keys)
	if err != nil {
		return sc, err
	}
	v.mu.Lock()
	if err := v.checkFork(sc, signed); err != nil {
		v.mu.Unlock()
		return sc, err
	}
	if _, ok := v.opened[h]; !ok {
		if len(v.order) == verifierMemo {
			delete(v.opened, v.order[0])
			v.order = append(v.order[:0], v.order[1:]...)
		}
		v.opened[h] = sc
		v.order = append(v.order, h)
	}
	v.mu.Unlock()
	return sc.clone(), nil
}

// checkFork returns a *ForkError when a checkpoint of sc's size with
// another root verified before, and otherwise remembers sc's root; v.mu is
// held.
func (v *Verifier) checkFork(sc SignedCheckpoint, signed []byte) error {
	if prev, ok := v.roots[sc.Size]; ok {
		if prev.sc.Origin != sc.Origin || prev.sc.Root == sc.Root {
			return nil
		}
		var both []string
		for _, s := range sc.Signers {
			if slices.Contains(prev.sc.Signers, s) {
				both = append(both, s)
			}
		}
		return &ForkError{A: prev.sc.Checkpoint, B: sc.Checkpoint, NoteA: prev.note, NoteB: slices.Clone(signed), SignedBoth: both}
	}
	if len(v.sizes) == forkMemo {
		delete(v.roots, v.sizes[0])
		v.sizes = append(v.sizes[:0], v.sizes[1:]...)
	}
	v.roots[sc.Size] = seenRoot{sc: sc.clone(), note: slices.Clone(signed)}
	v.sizes = append(v.sizes, sc.Size)
	return nil
}

// clone returns a copy the caller may change without changing the memo.
func (sc SignedCheckpoint) clone() SignedCheckpoint {
	sc.Signers = slices.Clone(sc.Signers)
	sc.Times = maps.Clone(sc.Times)
	return sc
}

// Receipt checks a receipt: a majority of the auditors signed its
// checkpoint, which includes its entry, and the entry is an accepted
// command whose digest (Command.Digest) is want — a refused or duplicate
// entry, or another command, is not a receipt for it. It returns the entry
// and the checkpoint.
func (v *Verifier) Receipt(r Receipt, want [32]byte) (Entry, SignedCheckpoint, error) {
	en, cmd, sc, err := v.committed(r)
	if err != nil {
		return Entry{}, sc, err
	}
	got, err := cmd.Digest()
	if err != nil || got != want {
		return Entry{}, sc, fmt.Errorf("%w: entry %d holds another command than the one submitted", ErrReceipt, en.Index)
	}
	return en, sc, nil
}

// ChargeReceipt checks a receipt as a student can, knowing its batch
// rather than the signed command: the receipt must prove an accepted charge
// of batch batchID for student that covers exactly the labels it received
// (one per query, −1 for a refused one) and commits to answers whose
// SHA-256 is answersHash. The charge must be of every query of the batch
// (an nzc-svt batch whose session stopped part-way charges the queries it
// ran, and every label after them must be refused), and of as many answers
// as labels released; a charge of nzc-svt must name a session and any other
// none. It returns the charge.
func (v *Verifier) ChargeReceipt(r Receipt, batchID, student string, labels []int32, answersHash [32]byte) (*Charge, Entry, SignedCheckpoint, error) {
	ch, en, sc, err := v.charge(r)
	if err != nil {
		return nil, Entry{}, sc, err
	}
	if err := chargeCovers(ch, batchID, student, labels, answersHash); err != nil {
		return nil, Entry{}, sc, fmt.Errorf("%w: entry %d: %w", ErrReceipt, en.Index, err)
	}
	return ch, en, sc, nil
}

// chargeCovers reports how ch fails to be exactly the charge of batchID's
// labels for student.
func chargeCovers(ch *Charge, batchID, student string, labels []int32, answersHash [32]byte) error {
	svt := mechanism.Kind(ch.Mechanism).Sessions()
	released := uint64(0)
	for _, l := range labels {
		if l >= 0 {
			released++
		}
	}
	switch {
	case ch.BatchID != batchID || ch.Student != student:
		return fmt.Errorf("it charges batch %s of %s, not batch %s of %s", ch.BatchID, ch.Student, batchID, student)
	case ch.AnswersHash != answersHash:
		return fmt.Errorf("it commits to other answers than the %d labels received", len(labels))
	case !svt && ch.Queries != uint64(len(labels)):
		return fmt.Errorf("it charges %d queries, the batch has %d", ch.Queries, len(labels))
	case svt && ch.Queries > uint64(len(labels)):
		return fmt.Errorf("it charges %d queries, the batch has %d", ch.Queries, len(labels))
	case ch.Answers != released:
		return fmt.Errorf("it charges %d answers, %d labels were released", ch.Answers, released)
	case svt != (ch.Session != ""):
		return fmt.Errorf("a charge of %s in session %q: nzc-svt charges name their session, no other does", ch.Mechanism, ch.Session)
	}
	if svt {
		for i := ch.Queries; i < uint64(len(labels)); i++ {
			if labels[i] >= 0 {
				return fmt.Errorf("it charges the first %d queries, and query %d has a label", ch.Queries, i)
			}
		}
	}
	return nil
}

// HospitalReceipt checks a receipt as a hospital can: it must prove an
// accepted charge that names hospital among those it charged. It returns
// the charge, for the hospital to match against its own record of the
// batches it voted on.
func (v *Verifier) HospitalReceipt(r Receipt, hospital string) (*Charge, Entry, SignedCheckpoint, error) {
	ch, en, sc, err := v.charge(r)
	switch {
	case err != nil:
		return nil, Entry{}, sc, err
	case !slices.Contains(ch.Hospitals, hospital):
		return nil, Entry{}, sc, fmt.Errorf("%w: entry %d charges batch %s to %v, not to %s", ErrReceipt, en.Index, ch.BatchID, ch.Hospitals, hospital)
	}
	return ch, en, sc, nil
}

// charge is committed of a receipt whose command must be a charge.
func (v *Verifier) charge(r Receipt) (*Charge, Entry, SignedCheckpoint, error) {
	en, cmd, sc, err := v.committed(r)
	if err != nil {
		return nil, Entry{}, sc, err
	}
	ch, ok := cmd.Body.(*Charge)
	if !ok {
		return nil, Entry{}, sc, fmt.Errorf("%w: entry %d is a %s, not a charge", ErrReceipt, en.Index, cmd.Body.Kind())
	}
	return ch, en, sc, nil
}

// committed checks the checkpoint's quorum, the entry's inclusion and that
// the entry accepted its command, and returns the entry and command.
func (v *Verifier) committed(r Receipt) (Entry, Command, SignedCheckpoint, error) {
	sc, err := v.Checkpoint(r.Checkpoint)
	if err != nil {
		return Entry{}, Command{}, sc, fmt.Errorf("%w: %w", ErrReceipt, err)
	}
	en, err := DecodeEntry(r.Entry)
	if err != nil {
		return Entry{}, Command{}, sc, fmt.Errorf("%w: %w", ErrReceipt, err)
	}
	if err := VerifyInclusion(r.Entry, int64(en.Index), sc.Checkpoint, r.Proof); err != nil {
		return Entry{}, Command{}, sc, fmt.Errorf("%w: %w", ErrReceipt, err)
	}
	if en.Status != StatusAccepted {
		return Entry{}, Command{}, sc, fmt.Errorf("%w: entry %d is %s (%s), not an accepted command", ErrReceipt, en.Index, en.Status, en.Code)
	}
	cmd, err := DecodeCommand(en.Command)
	if err != nil {
		return Entry{}, Command{}, sc, fmt.Errorf("%w: entry %d: %w", ErrReceipt, en.Index, err)
	}
	return en, cmd, sc, nil
}
