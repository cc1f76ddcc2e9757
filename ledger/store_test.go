package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"golang.org/x/mod/sumdb/tlog"
)

// chargedFed is newFed with n charges to h1 applied.
func chargedFed(t testing.TB, n int) *fed { return chargedFedNamed(t, n, "b") }

func chargedFedNamed(t testing.TB, n int, prefix string) *fed {
	f := newFed(t)
	curve := gaussCurve(40, 1)
	for i := range n {
		f.must(chargeBody(fmt.Sprintf("%s%d", prefix, i), []string{"h1"}, curve, 1), "agg")
	}
	return f
}

// historyOf copies st's log into a new MemHistory.
func historyOf(t testing.TB, st *State) *MemHistory {
	t.Helper()
	entries, err := st.Entries(0, st.TreeSize())
	if err != nil {
		t.Fatal(err)
	}
	h := NewMemHistory()
	tree := hashStore{h: h}
	for _, b := range entries {
		if err := tree.append(b); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// A ledger opened over its history is the ledger that wrote it: the same
// tree, the same accounts, the same next decision.
func TestOpenRebuildsTheState(t *testing.T) {
	f := chargedFed(t, 20)
	h := historyOf(t, f.st)
	st, err := Open(h)
	if err != nil {
		t.Fatal(err)
	}
	if st.TreeSize() != f.st.TreeSize() || st.RootHash() != f.st.RootHash() {
		t.Fatalf("opened: size %d root %s, want %d %s", st.TreeSize(), st.RootHash(), f.st.TreeSize(), f.st.RootHash())
	}
	want, _ := f.st.Account("h1")
	got, _ := st.Account("h1")
	if got.Epsilon != want.Epsilon || got.Charges != want.Charges {
		t.Fatalf("opened account %+v, want %+v", got, want)
	}
	next := f.sign(chargeBody("next", []string{"h1"}, gaussCurve(40, 1), 1), "agg")
	r1, r2 := f.apply(next), (&fed{t: t, st: st}).apply(next)
	if r1 != r2 || st.RootHash() != f.st.RootHash() {
		t.Fatalf("next charge: %+v on the writer, %+v on the opened ledger", r1, r2)
	}
	if h.Len() != st.TreeSize() {
		t.Fatalf("the opened ledger appended to another history: h has %d, the ledger %d", h.Len(), st.TreeSize())
	}
}

// A history whose entry or hashes were changed on disk does not open.
func TestOpenRefusesAChangedHistory(t *testing.T) {
	f := chargedFed(t, 5)
	for _, tc := range []struct {
		name   string
		change func(h *MemHistory)
	}{
		{"entry outcome", func(h *MemHistory) {
			en, _ := DecodeEntry(h.entries[7])
			en.Status, en.Code = StatusRefused, CodeCapExceeded
			h.entries[7], _ = en.Encode()
		}},
		{"entry removed", func(h *MemHistory) { h.entries = slices.Delete(h.entries, 7, 8) }},
		{"stored hash", func(h *MemHistory) { h.hashes[tlog.StoredHashIndex(0, 7)][0] ^= 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := historyOf(t, f.st)
			tc.change(h)
			if _, err := Open(h); err == nil {
				t.Fatal("opened a changed history")
			}
		})
	}
}

// countingHistory counts appends.
type countingHistory struct {
	*MemHistory
	appends int
}

func (c *countingHistory) Append(e []byte, hs []tlog.Hash) error {
	c.appends++
	return c.MemHistory.Append(e, hs)
}

// Restoring a snapshot over a history that already holds the snapshot's
// log (and more, from before a restart) cuts the history to the snapshot
// and writes nothing; over another log's history it replaces it.
func TestRestoreKeepsAMatchingHistory(t *testing.T) {
	f := chargedFed(t, 10)
	snap, err := f.st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	f.must(chargeBody("later", []string{"h1"}, gaussCurve(40, 1), 1), "agg")
	own := &countingHistory{MemHistory: historyOf(t, f.st)}
	st, err := Open(own)
	if err != nil {
		t.Fatal(err)
	}
	own.appends = 0
	if err := st.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if own.appends != 0 || own.Len() != f.st.TreeSize()-1 {
		t.Fatalf("restore over its own history: %d appends, %d entries; want 0 and %d", own.appends, own.Len(), f.st.TreeSize()-1)
	}
	other := chargedFedNamed(t, 20, "c") // longer, and another log from entry 6 on
	oh := &countingHistory{MemHistory: historyOf(t, other.st)}
	st2, err := Open(oh)
	if err != nil {
		t.Fatal(err)
	}
	if err := st2.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if st2.RootHash() != st.RootHash() || oh.Len() != st.TreeSize() {
		t.Fatalf("restore over another log: root %s size %d, want %s %d", st2.RootHash(), oh.Len(), st.RootHash(), st.TreeSize())
	}
}

// failingHistory fails every append after the first ok.
type failingHistory struct {
	*MemHistory
	ok int
}

func (f *failingHistory) Append(e []byte, hs []tlog.Hash) error {
	if f.ok == 0 {
		return errors.New("disk full")
	}
	f.ok--
	return f.MemHistory.Append(e, hs)
}

// A restore whose history write fails leaves an empty ledger, not a state
// its history does not hold.
func TestRestoreWithAFailingHistory(t *testing.T) {
	f := chargedFed(t, 3)
	snap, err := f.st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	st := newState(&failingHistory{MemHistory: NewMemHistory(), ok: 2})
	if err := st.Restore(snap); err == nil {
		t.Fatal("restore succeeded over a failing history")
	}
	if st.TreeSize() != 0 || len(st.Accounts()) != 0 || st.Origin() != "" {
		t.Fatalf("after a failed restore: %d entries, %d accounts, origin %q", st.TreeSize(), len(st.Accounts()), st.Origin())
	}
}

func TestMemHistoryTruncate(t *testing.T) {
	f := chargedFed(t, 3)
	h := historyOf(t, f.st)
	for _, tc := range []struct {
		n    int64
		fail bool
	}{{-1, true}, {h.Len() + 1, true}, {4, false}, {0, false}} {
		err := h.Truncate(tc.n)
		if (err != nil) != tc.fail {
			t.Fatalf("Truncate(%d): %v", tc.n, err)
		}
		if !tc.fail && (h.Len() != tc.n || int64(len(h.hashes)) != tlog.StoredHashIndex(0, tc.n)) {
			t.Fatalf("Truncate(%d): %d entries, %d hashes", tc.n, h.Len(), len(h.hashes))
		}
	}
}

// A replica resumed over its own history and given its commands again
// writes nothing; the first command that differs cuts the history there.
func TestResumeRewritesNothingOfItsOwnLog(t *testing.T) {
	f := chargedFed(t, 8)
	entries, err := f.st.Entries(0, f.st.TreeSize())
	if err != nil {
		t.Fatal(err)
	}
	h := &countingHistory{MemHistory: historyOf(t, f.st)}
	st := Resume(h)
	if st.TreeSize() != 0 {
		t.Fatalf("resumed at size %d, want 0", st.TreeSize())
	}
	for _, b := range entries[:10] {
		en, _ := DecodeEntry(b)
		if _, err := st.Apply(en.Command); err != nil {
			t.Fatal(err)
		}
	}
	if h.appends != 0 || h.Len() != int64(len(entries)) || st.TreeSize() != 10 {
		t.Fatalf("replaying its own commands: %d appends, history %d, size %d", h.appends, h.Len(), st.TreeSize())
	}
	want, _ := f.st.TreeHash(10)
	if st.RootHash() != want {
		t.Fatalf("root %s, want %s", st.RootHash(), want)
	}
	g := &fed{t: t, st: st, ts: f.ts}
	g.must(chargeBody("other", []string{"h2"}, gaussCurve(40, 1), 1), "agg")
	if h.appends != 1 || h.Len() != 11 {
		t.Fatalf("a different command: %d appends, history %d; want 1 and 11", h.appends, h.Len())
	}
	snap, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	h.appends = 0
	again := Resume(h)
	if err := again.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if h.appends != 0 || again.RootHash() != st.RootHash() {
		t.Fatalf("restoring over its own history: %d appends, root %s want %s", h.appends, again.RootHash(), st.RootHash())
	}
}

// WriteExport writes, a chunk of the history at a time, the bytes Export
// encodes, for any prefix of the log; a size past the log or a checkpoint
// over the limit writes nothing.
func TestWriteExport(t *testing.T) {
	f := newFed(t)
	dup := f.sign(chargeBody("b", []string{"h1"}, gaussCurve(40, 1), 1), "agg")
	for range exportChunk + 5 { // the first accepted, the rest duplicates
		f.apply(dup)
	}
	n := f.st.TreeSize()
	cp := signedAt(t, f.st, n, "a1", "a2")
	for _, size := range []int64{0, 1, exportChunk, n} {
		entries, err := f.st.Entries(0, size)
		if err != nil {
			t.Fatal(err)
		}
		keys, err := f.st.AuditorKeys(size)
		if err != nil {
			t.Fatal(err)
		}
		want, err := Export{Entries: entries, Checkpoints: [][]byte{cp}, Keys: keys}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := f.st.WriteExport(&got, size, [][]byte{cp}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("size %d: WriteExport wrote %d bytes that are not the %d Export encodes", size, got.Len(), len(want))
		}
	}
	for name, tc := range map[string]struct {
		size int64
		cps  [][]byte
	}{
		"past the log":       {n + 1, nil},
		"negative":           {-1, nil},
		"checkpoint too big": {n, [][]byte{make([]byte, maxNoteLen+1)}},
	} {
		var got bytes.Buffer
		if err := f.st.WriteExport(&got, tc.size, tc.cps); err == nil || got.Len() != 0 {
			t.Errorf("%s: err %v, %d bytes written", name, err, got.Len())
		}
	}
}

// A history changed on disk — an entry's outcome rewritten, or a stored
// hash — is repaired when the log's commands are applied over it again: the
// first entry or hash that is not what replay produces cuts the history
// there, and the rest is written anew.
func TestResumeRepairsAChangedHistory(t *testing.T) {
	f := chargedFed(t, 6)
	entries, err := f.st.Entries(0, f.st.TreeSize())
	if err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(h *MemHistory){
		"entry": func(h *MemHistory) {
			en, _ := DecodeEntry(h.entries[8])
			en.Status, en.Code = StatusRefused, CodeCapExceeded
			h.entries[8], _ = en.Encode()
		},
		"hash": func(h *MemHistory) { h.hashes[tlog.StoredHashIndex(0, 8)][0] ^= 1 },
	} {
		t.Run(name, func(t *testing.T) {
			h := &countingHistory{MemHistory: historyOf(t, f.st)}
			change(h.MemHistory)
			st := Resume(h)
			for _, b := range entries {
				en, _ := DecodeEntry(b)
				if _, err := st.Apply(en.Command); err != nil {
					t.Fatal(err)
				}
			}
			if h.appends != len(entries)-8 {
				t.Errorf("%d entries written again, want %d (entry 8 on)", h.appends, len(entries)-8)
			}
			if st.RootHash() != f.st.RootHash() {
				t.Fatalf("root %s, want %s", st.RootHash(), f.st.RootHash())
			}
			got, err := st.Entries(0, st.TreeSize())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, entries, bytes.Equal) {
				t.Fatal("the repaired history is not the log")
			}
		})
	}
}
