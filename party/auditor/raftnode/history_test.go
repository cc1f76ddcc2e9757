package raftnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/mod/sumdb/tlog"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// appendRecords appends records from..to-1 ("record N") with their hashes.
func appendRecords(t *testing.T, h *History, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		r := fmt.Appendf(nil, "record %d", i)
		hs, err := tlog.StoredHashes(int64(i), r, h)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Append(r, hs); err != nil {
			t.Fatal(err)
		}
	}
}

// treeOf is the tree hash of records 0..n-1 computed in memory.
func treeOf(t *testing.T, n int) tlog.Hash {
	t.Helper()
	var hashes []tlog.Hash
	r := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = hashes[x]
		}
		return out, nil
	})
	for i := range n {
		hs, err := tlog.StoredHashes(int64(i), fmt.Appendf(nil, "record %d", i), r)
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, hs...)
	}
	th, err := tlog.TreeHash(int64(n), r)
	if err != nil {
		t.Fatal(err)
	}
	return th
}

func checkHistory(t *testing.T, h *History, n int) {
	t.Helper()
	if h.Len() != int64(n) {
		t.Fatalf("Len %d, want %d", h.Len(), n)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		if n == 0 {
			break
		}
		r, err := h.Entry(int64(i))
		if err != nil || string(r) != fmt.Sprintf("record %d", i) {
			t.Fatalf("Entry(%d) = %q, %v", i, r, err)
		}
	}
	got, err := tlog.TreeHash(int64(n), h)
	if err != nil {
		t.Fatal(err)
	}
	if want := treeOf(t, n); got != want {
		t.Fatalf("tree of %d records: %s, want %s", n, got, want)
	}
}

// Records and hashes read the same pending, flushed, and after reopening;
// truncation cuts both, on disk and pending.
func TestHistoryAppendFlushReopenTruncate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	h, err := OpenHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	appendRecords(t, h, 0, MaxPending+10) // one automatic flush, 10 pending
	checkHistory(t, h, MaxPending+10)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if h, err = OpenHistory(path); err != nil {
		t.Fatal(err)
	}
	checkHistory(t, h, MaxPending+10)
	appendRecords(t, h, MaxPending+10, MaxPending+20)
	for _, n := range []int{MaxPending + 15, 100, 0} { // pending only, disk, all
		if err := h.Truncate(int64(n)); err != nil {
			t.Fatal(err)
		}
		checkHistory(t, h, n)
	}
	appendRecords(t, h, 0, 7)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if h, err = OpenHistory(path); err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	checkHistory(t, h, 7)
}

func TestHistoryRefusesBadInput(t *testing.T) {
	h, err := OpenHistory(filepath.Join(t.TempDir(), "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	appendRecords(t, h, 0, 3)
	for _, tc := range []struct {
		name string
		do   func() error
	}{
		{"too few hashes", func() error { return h.Append([]byte("x"), nil) }},
		{"entry past the end", func() error { _, err := h.Entry(3); return err }},
		{"negative entry", func() error { _, err := h.Entry(-1); return err }},
		{"hash past the end", func() error { _, err := h.ReadHashes([]int64{tlog.StoredHashIndex(0, 3)}); return err }},
		{"truncate past the end", func() error { return h.Truncate(4) }},
	} {
		if err := tc.do(); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	checkHistory(t, h, 3)
}

// A history file whose hashes do not match its records in number, or an
// empty file, does not open.
func TestHistoryCorruptFile(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var cde *CorruptDataError
	if _, err := OpenHistory(empty); !errors.As(err, &cde) {
		t.Fatalf("empty file: %v, want a CorruptDataError", err)
	}
	path := filepath.Join(dir, "history.db")
	h, err := OpenHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	appendRecords(t, h, 0, 5)
	if err := h.Flush(); err != nil {
		t.Fatal(err)
	}
	// Drop the last record only, as a torn write would.
	if err := h.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketRecords).Delete(indexKey(4)) }); err != nil {
		t.Fatal(err)
	}
	if err := h.db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenHistory(path); !errors.As(err, &cde) {
		t.Fatalf("records and hashes disagree: %v, want a CorruptDataError", err)
	}
}

// A history another process holds is not called damaged: the error says
// the file is locked, as the raft store's does.
func TestHistoryHeldElsewhereIsNotCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	h, err := OpenHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	_, err = OpenHistory(path) // a second open description: bbolt's flock refuses it
	var corrupt *CorruptDataError
	if err == nil || errors.As(err, &corrupt) {
		t.Fatalf("opening a held history: %v, want an error that is not a *CorruptDataError", err)
	}
	if !errors.Is(err, bolterrors.ErrTimeout) {
		t.Fatalf("opening a held history: %v, want bbolt's lock timeout", err)
	}
}

// The keys a history records (ledger.KeyIndex) are read back pending and
// flushed, survive a reopen, and a truncation forgets the keys of the
// records it drops, pending or on disk.
func TestHistoryKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	h, err := OpenHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	appendRecords(t, h, 0, 10)
	for i := range 10 {
		if err := h.PutKey(fmt.Sprintf("batch-%d", i), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.PutKey("beyond", 10); err == nil {
		t.Fatal("a key of a record the history does not hold was recorded")
	}
	want := func(h *History, n int) {
		t.Helper()
		for i := range 10 {
			got, ok, err := h.GetKey(fmt.Sprintf("batch-%d", i))
			if err != nil || ok != (i < n) || ok && got != int64(i) {
				t.Fatalf("key of record %d: %d %v %v, want it only below %d", i, got, ok, err, n)
			}
		}
	}
	want(h, 10)
	if err := h.Truncate(8); err != nil { // pending
		t.Fatal(err)
	}
	want(h, 8)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if h, err = OpenHistory(path); err != nil {
		t.Fatal(err)
	}
	want(h, 8)
	if err := h.Truncate(5); err != nil { // on disk
		t.Fatal(err)
	}
	want(h, 5)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if h, err = OpenHistory(path); err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	want(h, 5)
}
