package ledger

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/nzcfed/nzc/mechanism"
)

// stateTag distinguishes a state snapshot from an entries snapshot ('S').
const stateTag = 'T'

// A state snapshot holds what the State decides with and the head of its
// tree, not the entries:
//
//	version u8 | 'T' | size u64 | root [32] | edge count u32 | edge × [32] | state
//
// The edge is the tree's right edge: the stored hashes of the complete
// subtrees whose roots make up the tree of size entries, in the order
// tlog.TreeHash reads them. They hash to root, and they are every stored
// hash appending entry number size reads. state is every map and figure of
// the State in a fixed order, maps sorted by key (stateFields); decoding
// re-encodes and refuses bytes that are not the canonical encoding.
//
// A state snapshot does not carry its history: restoring one needs the
// entries it describes, from the local history or, fetched, from another
// replica (RestoreFrom), and checks them against the head and the state.

// SnapshotHead is what a snapshot says of the log it describes.
type SnapshotHead struct {
	Size int64
	Root tlog.Hash
	// Entries is set for a snapshot that holds its entries (the format
	// before state snapshots); a state snapshot holds only the head.
	Entries bool
}

// ReadSnapshotHead decodes a snapshot of either format and returns the
// head of the log it describes. It checks what the snapshot alone can
// show: an entries snapshot's entries replay, and a state snapshot's
// right edge hashes to its root and its state is canonical.
func ReadSnapshotHead(b []byte) (SnapshotHead, error) {
	if len(b) > 1 && b[1] == snapshotTag {
		st := New()
		if err := st.Restore(b); err != nil {
			return SnapshotHead{}, err
		}
		return SnapshotHead{Size: st.TreeSize(), Root: st.RootHash(), Entries: true}, nil
	}
	ss, err := decodeStateSnapshot(b)
	if err != nil {
		return SnapshotHead{}, err
	}
	return SnapshotHead{Size: ss.size, Root: ss.root}, nil
}

// stateSnapshot is a decoded state snapshot.
type stateSnapshot struct {
	size  int64
	root  tlog.Hash
	edge  []tlog.Hash
	state []byte // the encoded state, as in the snapshot
	st    *State // the decoded state, over no history
}

// edgeIndexes returns the stored-hash indexes tlog.TreeHash(n) reads: the
// tree's right edge.
func edgeIndexes(n int64) ([]int64, error) {
	var r edgeRecorder
	if _, err := tlog.TreeHash(n, &r); err != nil {
		return nil, err
	}
	return r.idx, nil
}

type edgeRecorder struct{ idx []int64 }

func (r *edgeRecorder) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	r.idx = append(r.idx, idx...)
	return make([]tlog.Hash, len(idx)), nil
}

// edgeReader serves the right edge of a tree of n entries.
type edgeReader map[int64]tlog.Hash

func (e edgeReader) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		h, ok := e[x]
		if !ok {
			return nil, fmt.Errorf("%w: hash %d is not on the right edge", ErrHistory, x)
		}
		out[i] = h
	}
	return out, nil
}

// stateSnapshotLocked encodes s as a state snapshot; the caller holds s.mu.
func (s *State) stateSnapshotLocked() ([]byte, error) {
	n := s.log.size()
	root, err := s.log.treeHash(n)
	if err != nil {
		return nil, err
	}
	idx, err := edgeIndexes(n)
	if err != nil {
		return nil, err
	}
	edge, err := s.log.h.ReadHashes(idx)
	if err != nil {
		return nil, fmt.Errorf("ledger: snapshot: the tree's right edge: %w", err)
	}
	e := &stateEncoder{}
	e.u8(Version)
	e.u8(stateTag)
	e.u64(uint64(n))
	e.buf = append(e.buf, root[:]...)
	e.u32(uint32(len(edge)))
	for _, h := range edge {
		e.buf = append(e.buf, h[:]...)
	}
	s.encodeState(e)
	return e.buf, e.err
}

func decodeStateSnapshot(b []byte) (*stateSnapshot, error) {
	d := &stateDecoder{decoder: decoder{buf: b}}
	if v := d.u8(); d.err == nil && v != Version {
		d.fail("version %d, this ledger reads version %d", v, Version)
	}
	if t := d.u8(); d.err == nil && t != stateTag {
		d.fail("tag %q, want %q or %q", t, stateTag, snapshotTag)
	}
	ss := &stateSnapshot{size: int64(d.u64())}
	copy(ss.root[:], d.take(hashSize))
	ne := d.u32()
	if d.err != nil {
		return nil, fmt.Errorf("ledger: snapshot: %w", d.err)
	}
	if ss.size < 0 || ss.size > maxEntries {
		return nil, fmt.Errorf("ledger: snapshot: %w: claims %d entries", ErrMalformed, ss.size)
	}
	idx, err := edgeIndexes(ss.size)
	if err != nil {
		return nil, fmt.Errorf("ledger: snapshot: %w", err)
	}
	if int(ne) != len(idx) {
		return nil, fmt.Errorf("ledger: snapshot: %w: %d right-edge hashes for a tree of %d entries, want %d", ErrMalformed, ne, ss.size, len(idx))
	}
	edge := edgeReader{}
	for _, x := range idx {
		var h tlog.Hash
		copy(h[:], d.take(hashSize))
		edge[x] = h
		ss.edge = append(ss.edge, h)
	}
	start := d.off
	st := newState(NewMemHistory())
	st.decodeState(d)
	if err := d.end(); err != nil {
		return nil, fmt.Errorf("ledger: snapshot: %w", err)
	}
	ss.state, ss.st = b[start:], st
	// The canonical form: sorted keys, no key twice, every figure as its
	// own encoding gives it.
	e := &stateEncoder{}
	st.encodeState(e)
	if e.err != nil || !bytes.Equal(e.buf, ss.state) {
		return nil, fmt.Errorf("ledger: snapshot: %w: the state is not in canonical form", ErrMalformed)
	}
	if got, err := tlog.TreeHash(ss.size, edge); err != nil || got != ss.root {
		return nil, fmt.Errorf("ledger: snapshot: %w: its right edge does not hash to its root %s", ErrMalformed, ss.root)
	}
	return ss, nil
}

// stateEncoder writes the state's fields. Unlike encoder it takes any
// string (map keys join identifiers with NUL) and keeps every float's bits.
type stateEncoder struct {
	buf []byte
	err error
}

func (e *stateEncoder) u8(v uint8)   { e.buf = append(e.buf, v) }
func (e *stateEncoder) u32(v uint32) { e.buf = binary.BigEndian.AppendUint32(e.buf, v) }
func (e *stateEncoder) u64(v uint64) { e.buf = binary.BigEndian.AppendUint64(e.buf, v) }
func (e *stateEncoder) i64(v int64)  { e.u64(uint64(v)) }
func (e *stateEncoder) b(v bool) {
	if v {
		e.u8(1)
	} else {
		e.u8(0)
	}
}

func (e *stateEncoder) f64(v float64) {
	if math.IsNaN(v) && e.err == nil {
		e.err = fmt.Errorf("%w: a NaN in the state", ErrMalformed)
	}
	e.u64(math.Float64bits(v))
}

func (e *stateEncoder) str(s string) {
	if len(s) > maxBlobLen && e.err == nil {
		e.err = fmt.Errorf("%w: a string of %d bytes in the state", ErrMalformed, len(s))
	}
	e.u32(uint32(len(s)))
	e.buf = append(e.buf, s...)
}

func (e *stateEncoder) digest(d [32]byte) { e.buf = append(e.buf, d[:]...) }

func (e *stateEncoder) strs(ss []string) {
	e.u32(uint32(len(ss)))
	for _, s := range ss {
		e.str(s)
	}
}

func (e *stateEncoder) curve(c mechanism.Curve) {
	v := c.Values()
	e.u32(uint32(len(v)))
	for _, x := range v {
		e.f64(x)
	}
}

type stateDecoder struct{ decoder }

func (d *stateDecoder) b() bool {
	switch v := d.u8(); v {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail("boolean %d", v)
		return false
	}
}

func (d *stateDecoder) f64() float64 {
	v := math.Float64frombits(d.u64())
	if d.err == nil && math.IsNaN(v) {
		d.fail("a NaN in the state")
	}
	return v
}

func (d *stateDecoder) str() string {
	n := d.u32()
	if d.err == nil && n > maxBlobLen {
		d.fail("a string of %d bytes", n)
		return ""
	}
	return string(d.take(int(n)))
}

func (d *stateDecoder) digest() (out [32]byte) {
	copy(out[:], d.take(hashSize))
	return out
}

// n reads a count of items each at least min bytes long, bounded by the
// bytes left.
func (d *stateDecoder) n(min int) int {
	v := d.u64()
	if d.err != nil {
		return 0
	}
	if v > uint64(len(d.buf)-d.off)/uint64(min) {
		d.fail("claims %d items in %d bytes", v, len(d.buf)-d.off)
		return 0
	}
	return int(v)
}

func (d *stateDecoder) strs() []string {
	n := d.u32()
	if d.err != nil || uint64(n) > uint64(len(d.buf)-d.off)/4 {
		d.fail("claims %d strings", n)
		return nil
	}
	var out []string
	for range n {
		out = append(out, d.str())
	}
	return out
}

func (d *stateDecoder) curve(g mechanism.Grid) mechanism.Curve {
	n := d.u32()
	if d.err != nil || int(n) != g.Len() {
		d.fail("a curve of %d values, the grid has %d orders", n, g.Len())
		return mechanism.Curve{}
	}
	v := make([]float64, n)
	for i := range v {
		v[i] = d.f64()
	}
	if d.err != nil {
		return mechanism.Curve{}
	}
	c, err := g.CurveOf(v)
	if err != nil {
		d.fail("%v", err)
	}
	return c
}

// mapOf writes m's entries in key order.
func mapOf[V any](e *stateEncoder, m map[string]V, each func(V)) {
	e.u64(uint64(len(m)))
	for _, k := range sortedKeys(m) {
		e.str(k)
		each(m[k])
	}
}

// readMap reads what mapOf wrote into m (items at least min bytes each).
func readMap[V any](d *stateDecoder, m map[string]V, min int, each func() V) {
	n := d.n(min)
	for range n {
		k := d.str()
		v := each()
		if d.err != nil {
			return
		}
		m[k] = v
	}
}

// encodeState writes every field Apply decides with; the caller holds s.mu.
// The grid is the default grid and the caches change no result, so
// neither is written.
func (s *State) encodeState(e *stateEncoder) {
	e.b(s.genesis)
	e.str(s.origin)
	e.digest(s.genesisHash)
	e.f64(s.epsBound)
	e.f64(s.deltaBound)
	e.f64(s.share)
	e.u64(s.classes)
	mapOf(e, s.parties, func(p Party) {
		e.str(p.ID)
		e.u8(uint8(p.Role))
		e.str(string(p.PublicKey))
	})
	mapOf(e, s.joined, e.u64)
	mapOf(e, s.accounts, func(a *account) {
		e.f64(a.capEps)
		e.f64(a.capDelta)
		e.u64(a.capVersion)
		e.u32(uint32(len(a.capChanges)))
		for _, c := range a.capChanges {
			e.u64(c.Entry)
			e.i64(c.Timestamp)
			e.u64(c.Version)
			e.str(c.Signer)
			e.f64(c.FromEpsilon)
			e.f64(c.FromDelta)
			e.f64(c.ToEpsilon)
			e.f64(c.ToDelta)
			e.b(c.Raise)
		}
		e.curve(a.curve)
		e.f64(a.deltaSpent)
		e.f64(a.pure)
		e.u64(a.charges)
		e.u64(a.answers)
		e.u64(a.opened)
	})
	mapOf(e, s.used, func(u *usage) {
		e.curve(u.curve)
		e.f64(u.deltaSpent)
		e.f64(u.pure)
	})
	mapOf(e, s.students, func(st *studentAcct) {
		e.u64(st.maxAnswers)
		e.u64(st.answers)
	})
	appliedOf := func(a applied) {
		e.digest(a.digest)
		e.u64(a.index)
	}
	mapOf(e, s.batches, appliedOf)
	mapOf(e, s.sessions, func(ss *session) {
		e.str(ss.aggregator)
		e.str(ss.student)
		e.strs(ss.hospitals)
		e.u64(ss.maxRefusals)
		e.str(ss.mechanism)
		e.u32(uint32(len(ss.params)))
		for _, p := range ss.params {
			e.str(p.Key)
			e.str(p.Value)
		}
		e.u64(ss.queries)
		e.u64(ss.answers)
		e.b(ss.closed)
		e.digest(ss.closeDigest)
		e.u64(ss.closeIndex)
		e.str(ss.supersededBy)
	})
	mapOf(e, s.opened, appliedOf)
	mapOf(e, s.latest, e.str)
	mapOf(e, s.ensembles, func(en Ensemble) {
		e.str(en.Hospital)
		e.u64(en.Teachers)
		e.u64(en.Classes)
		e.u64(en.Version)
		e.u64(en.Entry)
	})
	mapOf(e, s.reservations, func(r *reservation) {
		e.digest(r.digest)
		e.u64(r.index)
		e.str(r.student)
		e.strs(r.hospitals)
		e.str(r.mechanism)
		e.u64(r.queries)
		e.curve(r.cost.admit)
		e.curve(r.cost.charge)
		e.f64(r.cost.admitDelta)
		e.f64(r.cost.chargeDelta)
		e.f64(r.cost.admitPure)
		e.f64(r.cost.chargePure)
	})
	e.u64(uint64(len(s.reserveQueue)))
	for _, q := range s.reserveQueue {
		e.str(q.key)
		e.u64(q.index)
	}
	mapOf(e, s.paced, e.i64)
	mapOf(e, s.suspensions, func(sp Suspension) {
		e.str(sp.Hospital)
		e.b(sp.Suspended)
		e.str(sp.Reason)
		e.u64(sp.Version)
		e.str(sp.Signer)
		e.u64(sp.Entry)
	})
}

// decodeState reads what encodeState wrote into the empty state s.
func (s *State) decodeState(d *stateDecoder) {
	g := s.grid
	s.genesis = d.b()
	s.origin = d.str()
	s.genesisHash = d.digest()
	s.epsBound, s.deltaBound, s.share = d.f64(), d.f64(), d.f64()
	s.classes = d.u64()
	readMap(d, s.parties, 9, func() Party {
		p := Party{ID: d.str(), Role: Role(d.u8())}
		if k := d.str(); d.err == nil {
			if len(k) != ed25519.PublicKeySize {
				d.fail("a public key of %d bytes", len(k))
			}
			p.PublicKey = ed25519.PublicKey(k)
		}
		return p
	})
	readMap(d, s.joined, 12, d.u64)
	readMap(d, s.accounts, 60, func() *account {
		a := &account{capEps: d.f64(), capDelta: d.f64(), capVersion: d.u64()}
		nc := d.u32()
		if d.err == nil && uint64(nc) > uint64(len(d.buf)-d.off)/61 {
			d.fail("claims %d cap changes", nc)
			return nil
		}
		for range nc {
			a.capChanges = append(a.capChanges, CapChange{Entry: d.u64(), Timestamp: d.i64(), Version: d.u64(), Signer: d.str(),
				FromEpsilon: d.f64(), FromDelta: d.f64(), ToEpsilon: d.f64(), ToDelta: d.f64(), Raise: d.b()})
		}
		a.curve = d.curve(g)
		a.deltaSpent, a.pure = d.f64(), d.f64()
		a.charges, a.answers, a.opened = d.u64(), d.u64(), d.u64()
		return a
	})
	readMap(d, s.used, 20, func() *usage {
		return &usage{curve: d.curve(g), deltaSpent: d.f64(), pure: d.f64()}
	})
	readMap(d, s.students, 20, func() *studentAcct {
		return &studentAcct{maxAnswers: d.u64(), answers: d.u64()}
	})
	readApplied := func() applied { return applied{digest: d.digest(), index: d.u64()} }
	readMap(d, s.batches, 44, readApplied)
	readMap(d, s.sessions, 80, func() *session {
		ss := &session{aggregator: d.str(), student: d.str(), hospitals: d.strs(), maxRefusals: d.u64(), mechanism: d.str()}
		np := d.u32()
		if d.err == nil && uint64(np) > uint64(len(d.buf)-d.off)/8 {
			d.fail("claims %d parameters", np)
			return nil
		}
		for range np {
			ss.params = append(ss.params, Param{Key: d.str(), Value: d.str()})
		}
		ss.queries, ss.answers, ss.closed = d.u64(), d.u64(), d.b()
		ss.closeDigest, ss.closeIndex, ss.supersededBy = d.digest(), d.u64(), d.str()
		return ss
	})
	readMap(d, s.opened, 44, readApplied)
	readMap(d, s.latest, 8, d.str)
	readMap(d, s.ensembles, 40, func() Ensemble {
		return Ensemble{Hospital: d.str(), Teachers: d.u64(), Classes: d.u64(), Version: d.u64(), Entry: d.u64()}
	})
	readMap(d, s.reservations, 80, func() *reservation {
		r := &reservation{digest: d.digest(), index: d.u64(), student: d.str(), hospitals: d.strs(), mechanism: d.str(), queries: d.u64()}
		r.cost.admit, r.cost.charge = d.curve(g), d.curve(g)
		r.cost.admitDelta, r.cost.chargeDelta, r.cost.admitPure, r.cost.chargePure = d.f64(), d.f64(), d.f64(), d.f64()
		return r
	})
	nq := d.n(12)
	for range nq {
		q := queued{key: d.str(), index: d.u64()}
		if d.err != nil {
			return
		}
		s.reserveQueue = append(s.reserveQueue, q)
	}
	readMap(d, s.paced, 12, d.i64)
	readMap(d, s.suspensions, 40, func() Suspension {
		return Suspension{Hospital: d.str(), Suspended: d.b(), Reason: d.str(), Version: d.u64(), Signer: d.str(), Entry: d.u64()}
	})
	// Sessions superseded name sessions that exist; the others are
	// checked by the canonical re-encoding (keys sorted, none twice).
	for id, ss := range s.sessions {
		if ss == nil || ss.supersededBy != "" && s.sessions[ss.supersededBy] == nil {
			d.fail("session %q is superseded by a session the state does not hold", id)
			return
		}
	}
	if slices.ContainsFunc(sortedKeys(s.accounts), func(k string) bool { return s.accounts[k] == nil }) {
		d.fail("an account that does not decode")
	}
}

// StateSnapshot returns the state as a state snapshot: the decision state
// and the head and right edge of its tree, not the entries, so that its
// size follows the state and not the history.
func (s *State) StateSnapshot() ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.stateSnapshotLocked()
}

func isStateSnapshot(b []byte) bool { return len(b) > 1 && b[1] == stateTag }

// EntrySource gives the entries of a log from elsewhere: another replica
// that holds the history a state snapshot describes.
type EntrySource interface {
	// Entries returns entries from, from+1, …: at least one and at most
	// to−from of them.
	Entries(ctx context.Context, from, to int64) ([][]byte, error)
}

// HistoryMissingError reports a state snapshot restored over a history
// that does not hold the entries it describes.
type HistoryMissingError struct {
	Have, Need int64
}

func (e *HistoryMissingError) Error() string {
	return fmt.Sprintf("ledger: the snapshot describes a log of %d entries and the history here holds %d of them: fetch the others from another replica (RestoreFrom)", e.Need, e.Have)
}

// ErrSnapshotMismatch reports a state snapshot that the history it
// describes does not justify: the entries do not hash to its root, or
// replaying them gives another state.
var ErrSnapshotMismatch = errors.New("ledger: the history does not justify the snapshot")

// RestoreOptions say where RestoreFrom gets the entries a state snapshot
// describes and who must vouch for them.
type RestoreOptions struct {
	// Source gives the entries the history here lacks. Required.
	Source EntrySource
	// Progress, when set, is told how many of how many entries have
	// replayed.
	Progress func(done, total int64)
	// Vouch, when set, is asked about the log once it has replayed and
	// before it is restored: its checkpoint and the state it replays to
	// (whose registered auditors are the keys to check signatures with).
	// An error refuses the log.
	Vouch func(ctx context.Context, cp Checkpoint, st *State) error
}

// RestoreFrom restores a snapshot as Restore does, except that a state
// snapshot is never taken on its word: its state is derived again by
// replaying the entries it describes — the history's own where they
// replay, the others fetched from o.Source — each entry checked as Replay
// checks it, and restored only if they hash to the snapshot's root,
// replay to exactly its state, and o.Vouch accepts them. The fetched
// entries are appended to the history as they replay; memory holds the
// state, not the entries.
//
// On error the ledger is left empty (its history may have been cut where
// it did not agree) and the error says so.
func (s *State) RestoreFrom(ctx context.Context, snapshot []byte, o RestoreOptions) error {
	return s.restoreState(ctx, snapshot, &o)
}

func (s *State) restoreState(ctx context.Context, snapshot []byte, o *RestoreOptions) error {
	if !isStateSnapshot(snapshot) {
		return s.restoreEntries(snapshot)
	}
	ss, err := decodeStateSnapshot(snapshot)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	under, view := s.log.h, (*historyView)(nil)
	if v, ok := s.log.h.(*historyView); ok {
		under, view = v.under, v
	}
	if o == nil {
		// Restore: adopt when the history holds the snapshot's tree.
		have := min(under.Len(), ss.size)
		if under.Len() >= ss.size {
			if root, err := tlog.TreeHash(ss.size, under); err == nil && root == ss.root {
				if err := s.cutTo(view, ss.size); err != nil {
					return err
				}
				return s.take(ss.st)
			}
			have = 0
		}
		return &HistoryMissingError{Have: have, Need: ss.size}
	}
	if o.Source == nil {
		return errors.New("ledger: restore: no source of entries given")
	}
	if s.holds(ss) {
		// Already this state (a snapshot sent again, after the sender
		// gave up waiting for the restore that made it so).
		return nil
	}
	fresh, err := rederive(ctx, ss, under, o.Source, o.Progress)
	if err == nil && o.Vouch != nil {
		err = o.Vouch(ctx, Checkpoint{Origin: fresh.Origin(), Size: ss.size, Root: ss.root}, fresh)
	}
	if err != nil {
		s.empty(under)
		return fmt.Errorf("ledger: restore: %w; the ledger is empty now", err)
	}
	if err := s.cutTo(view, ss.size); err != nil {
		s.empty(under)
		return fmt.Errorf("ledger: restore: %w; the ledger is empty now", err)
	}
	return s.take(fresh)
}

// holds reports whether s is already the state ss describes; the caller
// holds s.mu.
func (s *State) holds(ss *stateSnapshot) bool {
	if s.log.size() != ss.size {
		return false
	}
	if root, err := s.log.treeHash(ss.size); err != nil || root != ss.root {
		return false
	}
	e := &stateEncoder{}
	s.encodeState(e)
	return e.err == nil && bytes.Equal(e.buf, ss.state)
}

// cutTo makes the log the first n entries of the history; the caller
// holds s.mu and knows the history holds them.
func (s *State) cutTo(view *historyView, n int64) error {
	if view != nil {
		view.n = n
		return nil
	}
	return s.log.h.Truncate(n)
}

// restoreChunk is how many of the history's own entries are read at once.
const restoreChunk = 256

// rederive replays the log of ss: the entries under holds, while they
// replay, then those src gives. A history whose own entries do not lead
// to the snapshot's root is replayed again from src alone.
func rederive(ctx context.Context, ss *stateSnapshot, under History, src EntrySource, progress func(done, total int64)) (*State, error) {
	var firstErr error
	for _, useLocal := range []bool{true, false} {
		fresh, usedLocal, err := replayFrom(ctx, ss, under, src, useLocal, progress)
		if err == nil {
			return fresh, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if !usedLocal || ctx.Err() != nil {
			break
		}
	}
	return nil, firstErr
}

func replayFrom(ctx context.Context, ss *stateSnapshot, under History, src EntrySource, useLocal bool, progress func(done, total int64)) (*State, bool, error) {
	fresh := newState(&historyView{under: under})
	local := int64(0)
	if useLocal {
		local = min(under.Len(), ss.size)
	}
	usedLocal := false
	for i := int64(0); i < ss.size; {
		if err := ctx.Err(); err != nil {
			return nil, usedLocal, err
		}
		var batch [][]byte
		fetched := i >= local
		if !fetched {
			usedLocal = true
			for j := i; j < min(i+restoreChunk, local); j++ {
				b, err := under.Entry(j)
				if err != nil {
					return nil, usedLocal, fmt.Errorf("entry %d of the history here: %w", j, err)
				}
				batch = append(batch, b)
			}
		} else {
			var err error
			if batch, err = src.Entries(ctx, i, ss.size); err != nil {
				return nil, usedLocal, fmt.Errorf("fetching entries from %d of %d: %w", i, ss.size, err)
			}
			if len(batch) == 0 || int64(len(batch)) > ss.size-i {
				return nil, usedLocal, fmt.Errorf("fetching entries from %d of %d: %d entries given", i, ss.size, len(batch))
			}
		}
		for _, b := range batch {
			if err := fresh.replayOne(i, b); err != nil {
				where := "of the history here"
				if fetched {
					where = "fetched"
				}
				return nil, usedLocal, fmt.Errorf("%w: entry %d %s does not replay: %w", ErrSnapshotMismatch, i, where, err)
			}
			i++
		}
		if progress != nil {
			progress(i, ss.size)
		}
	}
	fresh.mu.Lock()
	defer fresh.mu.Unlock()
	root, err := fresh.log.treeHash(ss.size)
	if err != nil {
		return nil, usedLocal, err
	}
	if root != ss.root {
		return nil, usedLocal, fmt.Errorf("%w: its %d entries hash to %s, the snapshot's root is %s", ErrSnapshotMismatch, ss.size, root, ss.root)
	}
	e := &stateEncoder{}
	fresh.encodeState(e)
	if e.err != nil || !bytes.Equal(e.buf, ss.state) {
		return nil, usedLocal, fmt.Errorf("%w: replaying its %d entries gives another state than the snapshot's", ErrSnapshotMismatch, ss.size)
	}
	return fresh, usedLocal, nil
}

// take makes o's decision state s's; the caller holds s.mu, and o is not
// used afterwards. s keeps its log and its caches (which change no result).
// Batches o keeps in memory go to s's history when it keeps a KeyIndex
// (a log restored by replaying an entries snapshot, written before
// histories kept one).
func (s *State) take(o *State) error {
	if ki := s.keyIndex(); ki != nil && len(o.batches) > 0 {
		for _, k := range sortedKeys(o.batches) {
			if err := ki.PutKey(k, int64(o.batches[k].index)); err != nil {
				return fmt.Errorf("ledger: recording batch %q in the history: %w", k, err)
			}
		}
		o.batches = map[string]applied{}
	}
	s.grid, s.genesis, s.origin, s.genesisHash = o.grid, o.genesis, o.origin, o.genesisHash
	s.epsBound, s.deltaBound, s.share, s.used = o.epsBound, o.deltaBound, o.share, o.used
	s.parties, s.joined, s.accounts, s.students = o.parties, o.joined, o.accounts, o.students
	s.batches, s.sessions, s.opened = o.batches, o.sessions, o.opened
	s.latest, s.ensembles, s.classes = o.latest, o.ensembles, o.classes
	s.reservations, s.reserveQueue = o.reservations, o.reserveQueue
	s.paced, s.suspensions = o.paced, o.suspensions
	return nil
}

// empty leaves s an empty ledger over h cut to nothing; the caller holds
// s.mu.
func (s *State) empty(h History) {
	_ = h.Truncate(0)
	e := newState(h)
	_ = s.take(e) // no batch to record
	s.log = e.log
}

// EntriesSnapshot returns, for a state snapshot of this ledger (one
// StateSnapshot gave, perhaps some entries ago), the entries snapshot of
// the same log: the first entries its head names, read from the history,
// which restores on its own (a backup). An entries snapshot is returned
// as it is.
func (s *State) EntriesSnapshot(snapshot []byte) ([]byte, error) {
	if !isStateSnapshot(snapshot) {
		return snapshot, nil
	}
	ss, err := decodeStateSnapshot(snapshot)
	if err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if n := s.log.size(); n < ss.size {
		return nil, &HistoryMissingError{Have: n, Need: ss.size}
	}
	if root, err := s.log.treeHash(ss.size); err != nil || root != ss.root {
		return nil, fmt.Errorf("%w: this ledger's first %d entries are not the snapshot's log", ErrSnapshotMismatch, ss.size)
	}
	entries := make([][]byte, 0, ss.size)
	for i := range ss.size {
		b, err := s.log.h.Entry(i)
		if err != nil {
			return nil, err
		}
		entries = append(entries, b)
	}
	return encodeEntries(snapshotTag, entries, nil)
}
