package ledger

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/mod/sumdb/tlog"
)

// ErrProof reports an inclusion or consistency proof that does not verify,
// or a request for a proof the log cannot give.
var ErrProof = errors.New("ledger: proof does not verify")

// hashStore reads and extends the Merkle tree a History keeps.
type hashStore struct {
	h History
}

func (h hashStore) size() int64 { return h.h.Len() }

func (h hashStore) append(record []byte) error {
	n := h.h.Len()
	hs, err := tlog.StoredHashes(n, record, h.h)
	if err != nil {
		return fmt.Errorf("ledger: hashing entry %d: %w", n, err)
	}
	if err := h.h.Append(record, hs); err != nil {
		return fmt.Errorf("ledger: recording entry %d: %w", n, err)
	}
	return nil
}

// treeHash returns the tree hash of the first n records.
func (h hashStore) treeHash(n int64) (tlog.Hash, error) {
	if have := h.size(); n < 0 || n > have {
		return tlog.Hash{}, fmt.Errorf("ledger: no tree of size %d (the log has %d entries)", n, have)
	}
	return tlog.TreeHash(n, h.h)
}

func (h hashStore) proveRecord(index, size int64) (tlog.RecordProof, error) {
	if have := h.size(); index < 0 || index >= size || size > have {
		return nil, fmt.Errorf("%w: no entry %d in a tree of size %d (the log has %d entries)", ErrProof, index, size, have)
	}
	return tlog.ProveRecord(size, index, h.h)
}

func (h hashStore) proveTree(oldSize, newSize int64) (tlog.TreeProof, error) {
	if have := h.size(); oldSize < 1 || oldSize > newSize || newSize > have {
		return nil, fmt.Errorf("%w: no consistency proof from size %d to %d (the log has %d entries)", ErrProof, oldSize, newSize, have)
	}
	return tlog.ProveTree(newSize, oldSize, h.h)
}

// TreeHash returns the RFC 6962 tree hash of the first size entries.
func (s *State) TreeHash(size int64) (tlog.Hash, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.log.treeHash(size)
}

// ProveInclusion returns the proof that entry index is in the tree of the
// first size entries. Check it with VerifyInclusion.
func (s *State) ProveInclusion(index, size int64) (tlog.RecordProof, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.log.proveRecord(index, size)
}

// ProveConsistency returns the proof that the tree of the first oldSize
// entries is a prefix of the tree of the first newSize. Check it with
// VerifyConsistency.
func (s *State) ProveConsistency(oldSize, newSize int64) (tlog.TreeProof, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.log.proveTree(oldSize, newSize)
}

// VerifyInclusion checks that entry (its encoded bytes) is entry index of
// the tree a checkpoint commits to.
func VerifyInclusion(entry []byte, index int64, c Checkpoint, proof tlog.RecordProof) error {
	if index < 0 || index >= c.Size {
		return fmt.Errorf("%w: entry %d is outside a checkpoint of size %d", ErrProof, index, c.Size)
	}
	if err := tlog.CheckRecord(proof, c.Size, c.Root, index, tlog.RecordHash(entry)); err != nil {
		return fmt.Errorf("%w: entry %d is not in the tree of size %d: %v", ErrProof, index, c.Size, err)
	}
	return nil
}

// VerifyConsistency checks that the tree of checkpoint older is a prefix of
// the tree of checkpoint newer: nothing in it was changed or removed.
func VerifyConsistency(older, newer Checkpoint, proof tlog.TreeProof) error {
	if older.Origin != newer.Origin {
		return fmt.Errorf("%w: checkpoints of different logs (%s, %s)", ErrProof, older.Origin, newer.Origin)
	}
	switch {
	case older.Size > newer.Size:
		return fmt.Errorf("%w: the older checkpoint (size %d) is larger than the newer (size %d)", ErrProof, older.Size, newer.Size)
	case older.Size == newer.Size:
		if older.Root != newer.Root {
			return &ForkError{A: older, B: newer}
		}
		return nil
	case older.Size == 0:
		return nil
	}
	if err := tlog.CheckTree(proof, newer.Size, newer.Root, older.Size, older.Root); err != nil {
		return fmt.Errorf("%w: the tree of size %d is not a prefix of the tree of size %d: %v", ErrProof, older.Size, newer.Size, err)
	}
	return nil
}

// ForkError reports two checkpoints of one log with the same size and
// different roots: at least one signer attested to a history that is not
// the log's. When both were signed notes checked against the auditors'
// keys (Verifier), NoteA and NoteB are the notes, the evidence to keep, and
// SignedBoth the auditors whose signatures verified on both: two
// majorities of the same auditors always share one, so a fork of two
// majority-cosigned checkpoints names at least one auditor that signed
// two histories.
type ForkError struct {
	A, B         Checkpoint
	NoteA, NoteB []byte
	SignedBoth   []string
}

func (e *ForkError) Error() string {
	msg := fmt.Sprintf("ledger: fork: two checkpoints of %s at size %d with different roots %s and %s", e.A.Origin, e.A.Size, e.A.Root, e.B.Root)
	if len(e.SignedBoth) > 0 {
		msg += fmt.Sprintf(", both signed by %s: keep both notes as evidence and stop trusting the log until the auditors explain it", strings.Join(e.SignedBoth, ", "))
	}
	return msg
}

// DetectFork returns a *ForkError when two checkpoints of the same log and
// size have different roots, and nil otherwise. Checkpoints of different
// sizes are checked with VerifyConsistency.
func DetectFork(a, b Checkpoint) error {
	if a.Origin == b.Origin && a.Size == b.Size && a.Root != b.Root {
		return &ForkError{A: a, B: b}
	}
	return nil
}
