package ledger

import (
	"errors"
	"fmt"
)

// ErrNotExtended is matched by ExtendsCheckpoint's error when the log does
// not hold the entries a cosigned checkpoint vouches for.
var ErrNotExtended = errors.New("ledger: the log does not extend the checkpoint")

// ExtendsCheckpoint checks that the log holds what a majority of its
// auditors cosigned in signed: the same origin, at least the checkpoint's
// entries, and the same tree root over them. trusted, when not empty,
// restricts whose signatures count to those keys (the federation's
// auditors); the majority is always of every auditor the log had
// registered at that size. A log restored from a file, or read from any
// source no better than one, is only as good as this check: it refuses a
// log cut short (a rollback) or rewritten (a fork).
func (s *State) ExtendsCheckpoint(signed []byte, trusted []string) (SignedCheckpoint, error) {
	c, err := PeekCheckpoint(signed)
	if err != nil {
		return SignedCheckpoint{}, err
	}
	if origin := s.Origin(); c.Origin != origin {
		return SignedCheckpoint{}, fmt.Errorf("%w: the checkpoint is of %q, the log is %q", ErrNotExtended, c.Origin, origin)
	}
	sc, _, err := openQuorum(s, c, signed, trusted)
	if err != nil {
		return sc, err
	}
	if n := s.TreeSize(); c.Size > n {
		return sc, fmt.Errorf("%w: %v cosigned %d entries, the log has %d: it was rolled back", ErrNotExtended, sc.Signers, c.Size, n)
	}
	root, err := s.TreeHash(c.Size)
	if err != nil {
		return sc, err
	}
	if root != c.Root {
		return sc, fmt.Errorf("%w: %v cosigned root %s over %d entries, the log's is %s: it was rewritten", ErrNotExtended, sc.Signers, c.Root, c.Size, root)
	}
	return sc, nil
}
