package ledger

import (
	"bytes"
	"fmt"
	"math/bits"

	"golang.org/x/mod/sumdb/tlog"
)

// edgeTree is a History that keeps only the right edge of its Merkle tree
// (the root of each complete subtree the tree of its size splits into, at
// most 64 hashes) and its last entry: what replay reads (the tree hash of
// the entries so far, the hashes the next entry merges with, the entry
// just appended), in memory that does not grow with the log. It cannot
// give the hashes of a smaller tree, and it cannot truncate.
type edgeTree struct {
	n    int64
	edge [64]tlog.Hash // edge[l] is the subtree of 2^l entries, when bit l of n is set
	last []byte
}

func (t *edgeTree) Len() int64 { return t.n }

// ReadHashes implements tlog.HashReader for the hashes of the right edge.
func (t *edgeTree) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		level, k := tlog.SplitStoredHashIndex(x)
		// The subtree of level l on the right edge starts where n with
		// its bits below l+1 cleared does.
		if level >= 63 || t.n>>level&1 == 0 || k != t.n>>(level+1)<<1 {
			return nil, fmt.Errorf("%w: hash %d (level %d, %d) is not on the right edge of a tree of %d entries", ErrHistory, x, level, k, t.n)
		}
		out[i] = t.edge[level]
	}
	return out, nil
}

// Append implements History: hashes are tlog.StoredHashes(n, entry).
func (t *edgeTree) Append(entry []byte, hashes []tlog.Hash) error {
	if err := t.add(hashes); err != nil {
		return err
	}
	t.last = entry
	return nil
}

// appendLeaf appends the entry whose record hash (tlog.RecordHash) is leaf.
func (t *edgeTree) appendLeaf(leaf tlog.Hash) error {
	hashes, err := tlog.StoredHashesForRecordHash(t.n, leaf, t)
	if err != nil {
		return err
	}
	return t.add(hashes)
}

// add records the stored hashes entry n adds: its record hash, then the
// subtrees it completes, the last of which joins the right edge of n+1 in
// place of those it merged.
func (t *edgeTree) add(hashes []tlog.Hash) error {
	merged := bits.TrailingZeros64(^uint64(t.n)) // the subtrees entry n completes
	if len(hashes) != merged+1 {
		return fmt.Errorf("%w: %d stored hashes for entry %d, want %d", ErrHistory, len(hashes), t.n, merged+1)
	}
	t.edge[merged] = hashes[merged]
	clear(t.edge[:merged])
	t.n++
	return nil
}

// root is the tree hash of the entries so far.
func (t *edgeTree) root() tlog.Hash {
	h, _ := tlog.TreeHash(t.n, t) // reads only the right edge
	return h
}

func (t *edgeTree) Entry(i int64) ([]byte, error) {
	if i != t.n-1 || t.last == nil {
		return nil, fmt.Errorf("%w: entry %d: this history keeps only its last entry", ErrHistory, i)
	}
	return bytes.Clone(t.last), nil
}

func (t *edgeTree) Truncate(n int64) error {
	if n == t.n {
		return nil
	}
	return fmt.Errorf("%w: cannot truncate %d entries to %d: this history keeps only its right edge", ErrHistory, t.n, n)
}
