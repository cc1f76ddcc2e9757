package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"

	"golang.org/x/mod/sumdb/tlog"
)

// History is where a State keeps its log: the encoded entries and the
// RFC 6962 stored hashes of their Merkle tree, in tlog's layout (every
// record hash and every complete subtree hash, in write order). The State
// owns the decisions; a History only keeps what was decided, so it may live
// in memory (NewMemHistory, for tests and tools) or on disk (the auditor's).
//
// The State calls Append, Truncate and Reset only while it holds its write
// lock, and the read methods while it holds at least its read lock; an
// implementation need not lock for the State's sake.
type History interface {
	// ReadHashes returns the stored hashes at the given indexes
	// (tlog.StoredHashIndex); an index not stored is an error.
	tlog.HashReader
	// Len is the number of entries.
	Len() int64
	// Append records entry number Len() and the stored hashes it adds
	// (tlog.StoredHashes), both or neither.
	Append(entry []byte, hashes []tlog.Hash) error
	// Entry returns a copy of entry i, 0 ≤ i < Len().
	Entry(i int64) ([]byte, error)
	// Truncate drops every entry from n on, and their hashes.
	Truncate(n int64) error
}

// ErrHistory reports a History that cannot give or keep what the State
// asks of it: a missing entry or hash, or a failed write.
var ErrHistory = errors.New("ledger: history")

// KeyIndex is implemented by a History that also keeps which entry charged
// each batch, so that the State need not keep every batch id it has seen
// in memory nor in its snapshots. Truncate(n) of such a history also
// forgets the keys of the entries it drops.
type KeyIndex interface {
	// PutKey records that entry i, which the history holds, charged key.
	PutKey(key string, i int64) error
	// GetKey returns the entry that charged key, and false when none of
	// the history's entries did.
	GetKey(key string) (int64, bool, error)
}

// MemHistory is a History in memory.
type MemHistory struct {
	mu      sync.RWMutex
	entries [][]byte
	hashes  []tlog.Hash
	keys    map[string]int64
}

var _ KeyIndex = (*MemHistory)(nil)

// PutKey implements KeyIndex.
func (m *MemHistory) PutKey(key string, i int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i < 0 || i >= int64(len(m.entries)) {
		return fmt.Errorf("%w: no entry %d to charge %q (have %d)", ErrHistory, i, key, len(m.entries))
	}
	if m.keys == nil {
		m.keys = map[string]int64{}
	}
	m.keys[key] = i
	return nil
}

// GetKey implements KeyIndex.
func (m *MemHistory) GetKey(key string) (int64, bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	i, ok := m.keys[key]
	return i, ok, nil
}

var _ History = (*MemHistory)(nil)

// NewMemHistory returns an empty history in memory.
func NewMemHistory() *MemHistory { return &MemHistory{} }

// Len implements History.
func (m *MemHistory) Len() int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return int64(len(m.entries))
}

// ReadHashes implements tlog.HashReader.
func (m *MemHistory) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		if x < 0 || x >= int64(len(m.hashes)) {
			return nil, fmt.Errorf("%w: hash %d is not stored (have %d)", ErrHistory, x, len(m.hashes))
		}
		out[i] = m.hashes[x]
	}
	return out, nil
}

// Append implements History. It keeps entry itself, not a copy: the
// caller must not change it afterwards (a State never does).
func (m *MemHistory) Append(entry []byte, hashes []tlog.Hash) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if want := tlog.StoredHashIndex(0, int64(len(m.entries))); want != int64(len(m.hashes)) {
		return fmt.Errorf("%w: %d stored hashes for %d entries", ErrHistory, len(m.hashes), len(m.entries))
	}
	m.entries = append(m.entries, entry)
	m.hashes = append(m.hashes, hashes...)
	return nil
}

// Entry implements History.
func (m *MemHistory) Entry(i int64) ([]byte, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if i < 0 || i >= int64(len(m.entries)) {
		return nil, fmt.Errorf("%w: no entry %d (have %d)", ErrHistory, i, len(m.entries))
	}
	return bytes.Clone(m.entries[i]), nil
}

// Truncate implements History.
func (m *MemHistory) Truncate(n int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n < 0 || n > int64(len(m.entries)) {
		return fmt.Errorf("%w: cannot truncate %d entries to %d", ErrHistory, len(m.entries), n)
	}
	clear(m.entries[n:])
	m.entries = m.entries[:n]
	m.hashes = m.hashes[:tlog.StoredHashIndex(0, n)]
	for k, i := range m.keys {
		if i >= n {
			delete(m.keys, k)
		}
	}
	return nil
}

// Open returns the ledger whose log h holds (an empty h gives an empty
// ledger). It replays every entry to rebuild the state and checks that each
// reproduces byte for byte and that the stored hashes are the entries' — a
// *ReplayError names the first entry that does not — and then appends to h.
// It is for tools that read a kept history; an auditor, whose raft log
// replays the commands itself, uses Resume.
func Open(h History) (*State, error) {
	v := &historyView{under: h, strict: true}
	st := newState(v)
	for i := range h.Len() {
		b, err := h.Entry(i)
		if err != nil {
			return nil, fmt.Errorf("ledger: open: %w", err)
		}
		if err := st.replayOne(i, b); err != nil {
			return nil, err
		}
	}
	st.log = hashStore{h: h}
	return st, nil
}

// Resume returns an empty ledger over a history h kept from before a
// restart, for a replica whose own log of commands will be applied again
// (a snapshot restored, then raft's log replayed). Each entry that
// reproduces the one h holds at its index is not written again; the first
// that differs cuts h there and the log goes on from it. So a restart
// rewrites nothing of a history that was the log's, and a history that was
// not is replaced.
func Resume(h History) *State { return newState(&historyView{under: h}) }

// historyView is the first n entries of a history. Append of the entry the
// history already holds at n only checks it (and, strict, anything else is
// an error, not a change); Truncate only moves n, and the history beyond
// n is cut when an Append differs from it.
type historyView struct {
	under  History
	strict bool
	n      int64
	last   []byte // strict: the entry replay appended last
}

func (v *historyView) Len() int64 { return v.n }

func (v *historyView) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	limit := tlog.StoredHashIndex(0, v.n)
	for _, x := range idx {
		if x >= limit {
			return nil, fmt.Errorf("%w: hash %d is not stored (have %d)", ErrHistory, x, limit)
		}
	}
	return v.under.ReadHashes(idx)
}

func (v *historyView) Append(entry []byte, hashes []tlog.Hash) error {
	if v.n >= v.under.Len() {
		if v.strict {
			return fmt.Errorf("%w: replay appends entry %d to a history of %d", ErrHistory, v.n, v.under.Len())
		}
		if err := v.under.Append(entry, hashes); err != nil {
			return err
		}
		v.n++
		return nil
	}
	same, err := v.holds(entry, hashes)
	if err != nil {
		return err
	}
	switch {
	case v.strict && !same.hashes:
		return fmt.Errorf("%w: the stored hashes of entry %d are not its own", ErrHistory, v.n)
	case v.strict:
		// replayOne compares the entry itself and names the change.
		v.last = bytes.Clone(entry)
	case !same.entry || !same.hashes:
		if err := v.under.Truncate(v.n); err != nil {
			return err
		}
		if err := v.under.Append(entry, hashes); err != nil {
			return err
		}
	}
	v.n++
	return nil
}

type sameness struct{ entry, hashes bool }

// holds says whether the history holds entry and hashes at n.
func (v *historyView) holds(entry []byte, hashes []tlog.Hash) (sameness, error) {
	start := tlog.StoredHashIndex(0, v.n)
	idx := make([]int64, len(hashes))
	for i := range idx {
		idx[i] = start + int64(i)
	}
	stored, err := v.under.ReadHashes(idx)
	if err != nil {
		return sameness{}, err
	}
	old, err := v.under.Entry(v.n)
	if err != nil {
		return sameness{}, err
	}
	return sameness{entry: bytes.Equal(old, entry), hashes: slices.Equal(stored, hashes)}, nil
}

func (v *historyView) Entry(i int64) ([]byte, error) {
	if i < 0 || i >= v.n {
		return nil, fmt.Errorf("%w: no entry %d (have %d)", ErrHistory, i, v.n)
	}
	if v.strict && i == v.n-1 {
		return bytes.Clone(v.last), nil
	}
	return v.under.Entry(i)
}

// viewKeys is the KeyIndex of a view over a history that keeps one: the
// keys of the view's first n entries.
type viewKeys struct {
	v     *historyView
	under KeyIndex
}

func (k viewKeys) PutKey(key string, i int64) error {
	if i >= k.v.n {
		return fmt.Errorf("%w: no entry %d to charge %q (have %d)", ErrHistory, i, key, k.v.n)
	}
	return k.under.PutKey(key, i)
}

func (k viewKeys) GetKey(key string) (int64, bool, error) {
	i, ok, err := k.under.GetKey(key)
	if err != nil || !ok || i >= k.v.n {
		return 0, false, err
	}
	return i, true, nil
}

// keyIndex returns the KeyIndex of the state's history, or nil when it
// keeps none (the State then keeps its batches in memory). A strict view
// (Open, which must not write) keeps none either.
func (s *State) keyIndex() KeyIndex {
	switch h := s.log.h.(type) {
	case *historyView:
		if ki, ok := h.under.(KeyIndex); ok && !h.strict {
			return viewKeys{v: h, under: ki}
		}
		return nil
	case KeyIndex:
		return h
	}
	return nil
}

func (v *historyView) Truncate(n int64) error {
	if v.strict {
		return fmt.Errorf("%w: cannot truncate a history while it is replayed", ErrHistory)
	}
	if n < 0 || n > v.n {
		return fmt.Errorf("%w: cannot truncate %d entries to %d", ErrHistory, v.n, n)
	}
	v.n = n
	return nil
}

// treeOnly is a History that keeps only the tree's hashes and the last
// entry: for a replay whose entries are read again only as replay checks
// the last one (Verify's, Restore's), and for the tree over an export's
// bytes, which Verify checks checkpoints against.
type treeOnly struct {
	n      int64
	hashes []tlog.Hash
	last   []byte
}

func (t *treeOnly) Len() int64 { return t.n }

func (t *treeOnly) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		if x < 0 || x >= int64(len(t.hashes)) {
			return nil, fmt.Errorf("%w: hash %d is not stored (have %d)", ErrHistory, x, len(t.hashes))
		}
		out[i] = t.hashes[x]
	}
	return out, nil
}

func (t *treeOnly) Append(entry []byte, hashes []tlog.Hash) error {
	t.hashes = append(t.hashes, hashes...)
	t.last = entry
	t.n++
	return nil
}

func (t *treeOnly) Entry(i int64) ([]byte, error) {
	if i != t.n-1 || t.last == nil {
		return nil, fmt.Errorf("%w: entry %d: this history keeps only its last entry", ErrHistory, i)
	}
	return bytes.Clone(t.last), nil
}

func (t *treeOnly) Truncate(n int64) error {
	if n < 0 || n > t.n {
		return fmt.Errorf("%w: cannot truncate %d entries to %d", ErrHistory, t.n, n)
	}
	if n < t.n {
		t.last = nil
	}
	t.n, t.hashes = n, t.hashes[:tlog.StoredHashIndex(0, n)]
	return nil
}
