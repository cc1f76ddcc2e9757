package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/mod/sumdb/tlog"
)

// memSource serves entries from a state, at most max at a time, and can
// change one entry on the way (tamper), as a dishonest replica would.
type memSource struct {
	st     *State
	max    int64
	tamper func(i int64, b []byte) []byte
	calls  int
}

func (m *memSource) Entries(_ context.Context, from, to int64) ([][]byte, error) {
	m.calls++
	to = min(to, from+max(m.max, 1), m.st.TreeSize())
	es, err := m.st.Entries(from, to)
	if err != nil {
		return nil, err
	}
	if m.tamper != nil {
		for i := range es {
			es[i] = m.tamper(from+int64(i), es[i])
		}
	}
	return es, nil
}

// copyHistory returns a MemHistory holding the first n entries of st.
func copyHistory(t testing.TB, st *State, n int64) *MemHistory {
	t.Helper()
	h := NewMemHistory()
	es, err := st.Entries(0, n)
	if err != nil {
		t.Fatal(err)
	}
	c := newState(h)
	for _, b := range es {
		if err := c.log.append(b); err != nil {
			t.Fatal(err)
		}
	}
	// And the batches those entries charged, as the history keeps them.
	for k, i := range st.log.h.(*MemHistory).keys {
		if i < n {
			if err := h.PutKey(k, i); err != nil {
				t.Fatal(err)
			}
		}
	}
	return h
}

func TestGoldenStateSnapshot(t *testing.T) {
	f := goldenLog(t)
	f.must(reserveBody("r1", []string{"h1"}, 5), "agg")
	f.must(&Suspend{Hospital: "h2", Version: 1, Suspended: true, Reason: "audit", Timestamp: f.now()}, "admin")
	f.must(&ChangeCap{Hospital: "h3", Version: 1, CapEpsilon: 5, CapDelta: 1e-5, Timestamp: f.now()}, "h3")
	snap, err := f.st.StateSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "snapshot-state.bin", snap)
	head, err := ReadSnapshotHead(snap)
	if err != nil || head.Size != f.st.TreeSize() || head.Root != f.st.RootHash() || head.Entries {
		t.Fatalf("head %+v %v, want size %d root %s", head, err, f.st.TreeSize(), f.st.RootHash())
	}
	// Its size is the state's, not the history's: a thousand more
	// entries, refused ones and accepted charges each of a new batch (the
	// history keeps which entry charged each batch), do not make it
	// larger.
	charged := 0
	for i := range 500 {
		f.apply([]byte(fmt.Sprintf("garbage %d", i)))
		if r := f.apply(f.sign(chargeBody(fmt.Sprintf("more-%d", i), []string{"h1"}, gaussCurve(40, 1), 1), "agg")); r.Status == StatusAccepted {
			charged++
		}
	}
	later, _ := f.st.StateSnapshot()
	if charged < 400 || len(later) > len(snap)+10*32 {
		t.Fatalf("a state snapshot grew from %d to %d bytes with 1,000 entries, %d of them accepted charges", len(snap), len(later), charged)
	}
	// A batch charged before the snapshot is still known after it.
	st := newState(copyHistory(t, f.st, f.st.TreeSize()))
	if err := st.Restore(later); err != nil {
		t.Fatal(err)
	}
	again := f.sign(chargeBody("more-7", []string{"h1"}, gaussCurve(40, 1), 1), "agg")
	if r, _ := st.Apply(again); r.Status != StatusDuplicate {
		t.Fatalf("a charged batch again after the restore: %s/%s, want a duplicate", r.Status, r.Code)
	}
}

func FuzzStateSnapshot(f *testing.F) {
	g := goldenLog(f)
	g.must(reserveBody("r1", []string{"h1"}, 5), "agg")
	snap, _ := g.st.StateSnapshot()
	f.Add(snap)
	f.Add(snap[:50])
	if b, err := os.ReadFile(filepath.Join("testdata", "snapshot-state.bin")); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ss, err := decodeStateSnapshot(b)
		if err != nil {
			return
		}
		// What decodes is canonical: the state re-encodes to the same
		// bytes, and the edge hashes to the root.
		e := &stateEncoder{}
		ss.st.encodeState(e)
		if e.err != nil || !bytes.Equal(e.buf, ss.state) || !bytes.HasSuffix(b, ss.state) {
			t.Fatalf("decoded state re-encodes differently (%v)", e.err)
		}
		// Restoring it over a history that does not hold it changes nothing.
		st := New()
		var missing *HistoryMissingError
		if err := st.Restore(b); ss.size > 0 && !errors.As(err, &missing) || st.TreeSize() != 0 {
			t.Fatalf("restore over an empty history: %v, size %d", err, st.TreeSize())
		}
	})
}

// randomCommand is one command of a random federation's life: charges
// (some repeated, some conflicting), reservations, sessions and their
// charges and closings, cap changes, ensembles, suspensions and garbage.
func randomCommand(f *fed, r *rand.Rand, n int) []byte {
	hs := [][]string{{"h1"}, {"h2"}, {"h3"}, {"h1", "h3"}, {"h1", "h2", "h3"}}
	h := hs[r.IntN(len(hs))]
	one := []string{"h1", "h2", "h3"}[r.IntN(3)]
	batch := fmt.Sprintf("b%d", r.IntN(n/2+1))
	switch k := r.IntN(12); k {
	case 0, 1, 2:
		return f.sign(chargeBody(batch, h, gaussCurve(40+float64(r.IntN(3)), 1+r.IntN(4)), uint64(1+r.IntN(4))), "agg")
	case 3:
		return f.sign(reserveBody(batch, h, 1+r.IntN(8)), "agg")
	case 4:
		return f.sign(openSession(f.t, fmt.Sprintf("svt%d", r.IntN(4)), []string{"s1", "s2"}[r.IntN(2)], h, 3), "agg")
	case 5:
		return f.sign(&CloseSession{SessionID: fmt.Sprintf("svt%d", r.IntN(4)), Queries: 4, Answers: uint64(r.IntN(5))}, "agg")
	case 6:
		c := chargeBody(batch, h[:1], make([]float64, len(gaussCurve(40, 1))), uint64(r.IntN(3)))
		c.Session, c.Mechanism, c.Params = fmt.Sprintf("svt%d", r.IntN(4)), "nzc-svt", svtParams(3).LedgerParams()
		c.Queries = c.Answers + uint64(r.IntN(2))
		return f.sign(c, "agg")
	case 7:
		return f.sign(&ChangeCap{Hospital: one, Version: uint64(1 + r.IntN(3)), CapEpsilon: 1 + float64(r.IntN(9)), CapDelta: 1e-5, Timestamp: f.now()}, one)
	case 8:
		return f.sign(&RegisterEnsemble{Hospital: one, Version: uint64(1 + r.IntN(2)), Teachers: 250, Classes: 10, Timestamp: f.now()}, "admin")
	case 9:
		return f.sign(&Suspend{Hospital: one, Version: uint64(1 + r.IntN(3)), Suspended: r.IntN(2) == 0, Reason: "check", Timestamp: f.now()}, "admin")
	case 10:
		return f.sign(&RegisterStudent{Student: "s1", MaxAnswers: 5, Timestamp: f.now()}, "admin")
	default:
		return []byte(fmt.Sprintf("garbage %d", r.IntN(5)))
	}
}

// A state restored from a state snapshot — adopted over a history that
// holds its entries, or derived again from entries fetched elsewhere —
// decides every following command exactly as the state it was taken
// from: the same results, the same entries, the same tree.
func TestStateSnapshotDecidesAsTheOriginal(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 35))
			f := newFed(t)
			n := 40 + r.IntN(60)
			cmds := make([][]byte, n)
			for i := range cmds {
				cmds[i] = randomCommand(f, r, n)
			}
			cut := r.IntN(n)
			for _, c := range cmds[:cut] {
				f.apply(c)
			}
			snap, err := f.st.StateSnapshot()
			if err != nil {
				t.Fatal(err)
			}
			size := f.st.TreeSize()
			// Adopted: the history holds the entries (and more, cut away).
			adopted := newState(copyHistory(t, f.st, size))
			if err := adopted.Restore(snap); err != nil {
				t.Fatalf("restore over the history: %v", err)
			}
			// Derived again: half the history here, the rest fetched.
			derived := newState(copyHistory(t, f.st, size/2))
			src := &memSource{st: f.st, max: 7}
			var done int64
			if err := derived.RestoreFrom(t.Context(), snap, RestoreOptions{Source: src, Progress: func(d, _ int64) { done = d }}); err != nil {
				t.Fatalf("restore fetching: %v", err)
			}
			if done != size || (size > size/2 && src.calls == 0) {
				t.Fatalf("progress %d of %d, %d fetches", done, size, src.calls)
			}
			for _, st := range []*State{adopted, derived} {
				if again, _ := st.StateSnapshot(); !bytes.Equal(again, snap) {
					t.Fatal("the restored state's snapshot differs")
				}
			}
			for i, c := range cmds[cut:] {
				want := f.apply(c)
				for j, st := range []*State{adopted, derived} {
					got, err := st.Apply(c)
					if err != nil || got != want {
						t.Fatalf("command %d on restored copy %d: %+v (%v), the original %+v", cut+i, j, got, err, want)
					}
					if st.RootHash() != f.st.RootHash() {
						t.Fatalf("command %d on restored copy %d: tree %s, the original's %s", cut+i, j, st.RootHash(), f.st.RootHash())
					}
				}
			}
		})
	}
}

// A replica restoring a state snapshot refuses a fetched history with one
// entry changed, or one the snapshot's state does not follow from, and
// says which; a restore over its own history does not fetch.
func TestRestoreFromRefusesATamperedHistory(t *testing.T) {
	f := goldenLog(t)
	f.must(chargeBody("b9", []string{"h1"}, gaussCurve(40, 2), 2), "agg")
	snap, _ := f.st.StateSnapshot()
	size := f.st.TreeSize()

	tampered := &memSource{st: f.st, max: 3, tamper: func(i int64, b []byte) []byte {
		if i != 6 {
			return b
		}
		out := bytes.Clone(b)
		out[len(out)/2] ^= 1
		return out
	}}
	st := New()
	err := st.RestoreFrom(t.Context(), snap, RestoreOptions{Source: tampered})
	if !errors.Is(err, ErrSnapshotMismatch) || st.TreeSize() != 0 {
		t.Fatalf("a tampered history: %v, %d entries kept; want ErrSnapshotMismatch and nothing", err, st.TreeSize())
	}
	t.Log(err)

	// The history of another log (another charge last) replays, but not
	// to the snapshot's root.
	other := goldenLog(t)
	other.must(chargeBody("b8", []string{"h1"}, gaussCurve(40, 2), 2), "agg")
	st = New()
	if err := st.RestoreFrom(t.Context(), snap, RestoreOptions{Source: &memSource{st: other.st, max: 100}}); !errors.Is(err, ErrSnapshotMismatch) {
		t.Fatalf("a shorter log: %v, want ErrSnapshotMismatch", err)
	}

	// A snapshot whose state was changed (a smaller spend) but whose head
	// is the log's: the history does not justify it.
	ss, err := decodeStateSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	ss.st.accounts["h1"].charges = 0
	e := &stateEncoder{}
	ss.st.encodeState(e)
	forged := append(bytes.Clone(snap[:len(snap)-len(ss.state)]), e.buf...)
	st = New()
	if err := st.RestoreFrom(t.Context(), forged, RestoreOptions{Source: &memSource{st: f.st, max: 100}}); !errors.Is(err, ErrSnapshotMismatch) {
		t.Fatalf("a forged state: %v, want ErrSnapshotMismatch", err)
	}

	// Over a history of its own log: adopted, nothing fetched.
	own := newState(copyHistory(t, f.st, size))
	if err := own.Restore(snap); err != nil || own.RootHash() != f.st.RootHash() {
		t.Fatalf("restore over its own history: %v", err)
	}
	// Restoring it again over the state it restored fetches nothing.
	again := newState(NewMemHistory())
	src := &memSource{st: f.st, max: 100}
	if err := again.RestoreFrom(t.Context(), snap, RestoreOptions{Source: src}); err != nil {
		t.Fatal(err)
	}
	calls := src.calls
	if err := again.RestoreFrom(t.Context(), snap, RestoreOptions{Source: src}); err != nil || src.calls != calls {
		t.Fatalf("the same snapshot again: %v, %d more fetches", err, src.calls-calls)
	}
	// Completed into an entries snapshot, it restores alone, even after
	// the log grew.
	f.apply([]byte("later"))
	full, err := f.st.EntriesSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	alone := New()
	if err := alone.Restore(full); err != nil || alone.TreeSize() != size || alone.RootHash() != ss.root {
		t.Fatalf("the completed snapshot restores to %d entries (%v), want %d", alone.TreeSize(), err, size)
	}
	// Over a history of another log: not adopted.
	var missing *HistoryMissingError
	if err := newState(copyHistory(t, f.st, size-1)).Restore(snap); !errors.As(err, &missing) || missing.Need != size {
		t.Fatalf("restore over a shorter history: %v", err)
	}
}

// A state snapshot's right edge is the tree's: every stored hash appending
// the next entry reads is in it.
func TestStateSnapshotEdgeIsWhatAppendingReads(t *testing.T) {
	for n := int64(0); n < 70; n++ {
		idx, err := edgeIndexes(n)
		if err != nil {
			t.Fatal(err)
		}
		var r edgeRecorder
		if _, err := tlog.StoredHashes(n, []byte("next"), &r); err != nil {
			t.Fatal(err)
		}
		for _, x := range r.idx {
			if !slices.Contains(idx, x) {
				t.Fatalf("appending to %d entries reads hash %d, not on the edge %v", n, x, idx)
			}
		}
	}
}

// A replica restored from either kind of snapshot holds students to the
// genesis's share as the others do. (Before, restoring an entries
// snapshot dropped the share and each student's usage, so the restored
// replica admitted a batch every other replica refused.)
func TestRestoredReplicaKeepsTheStudentShare(t *testing.T) {
	q := shareQueries(t)
	f := shareFed(t, 0.5)
	batch := func(id string) []byte {
		c := chargeBody(id, []string{"h1"}, gaussCurve(40, q), uint64(q))
		c.Timestamp = f.now()
		return f.sign(c, "agg")
	}
	f.must(chargeBody("s2-a", []string{"h1"}, gaussCurve(40, q), uint64(q)), "agg")
	next := batch("s2-b")
	state, err := f.st.StateSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	fromState := newState(copyHistory(t, f.st, f.st.TreeSize()))
	if err := fromState.Restore(state); err != nil {
		t.Fatal(err)
	}
	for name, st := range map[string]*State{"entries": restoredCopy(t, f.st), "state": fromState, "original": f.st} {
		if r, _ := st.Apply(next); r.Code != CodeShareExceeded {
			t.Fatalf("%s: s2's second batch %s/%s, want share-exceeded", name, r.Status, r.Code)
		}
	}
}
