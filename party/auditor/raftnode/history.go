package raftnode

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"sync"

	"golang.org/x/mod/sumdb/tlog"

	bolt "go.etcd.io/bbolt"
)

// History is an append-only log of records and the RFC 6962 stored hashes
// of their Merkle tree (tlog's layout), in a bbolt file of its own: the
// ledger's history (it implements ledger.History), kept on disk so that an
// auditor holds in memory only what its decisions need. It lives beside
// the raft log store because both are this auditor's bbolt files; it knows
// nothing of what its records mean.
//
// Appends collect in memory and are written, in one fsynced transaction,
// by Flush or once MaxPending records wait. Reads see them at once. Losing
// records not yet flushed (a crash) loses nothing of the ledger: the raft
// log still holds their commands, and they are applied again on restart.
type History struct {
	db   *bolt.DB
	path string

	mu sync.RWMutex
	// stored is the number of records on disk; pending follow them.
	stored        int64
	pending       [][]byte
	pendingHashes []tlog.Hash
	// pendingKeys are the keys (ledger.KeyIndex) recorded since the last
	// flush, by the record that charged them.
	pendingKeys map[string]int64
	// cache holds hashes read from disk: every append and tree hash reads
	// the same few on the tree's right edge. It is emptied when full.
	cache map[int64]tlog.Hash
}

// maxCachedHashes bounds History's cache of hashes read from disk.
const maxCachedHashes = 4096

// MaxPending is the most records a History holds in memory unwritten.
const MaxPending = 1024

var (
	bucketRecords = []byte("records")
	bucketHashes  = []byte("hashes")
	// bucketKeys maps a key to the record that charged it (u64), and
	// bucketKeyAt a record's index and the key (u64 | key) to nothing, so
	// that a truncation finds the keys of the records it drops. A file
	// written before keys were kept has neither until it is opened.
	bucketKeys  = []byte("keys")
	bucketKeyAt = []byte("keyat")
)

// OpenHistory opens (or creates) the history at path and checks that its
// records and hashes agree in number. A file that does not open or check
// is a *CorruptDataError; one another process holds is an error saying so.
func OpenHistory(path string) (*History, error) {
	db, existed, err := openDataFile(path)
	if err != nil {
		return nil, err
	}
	h := &History{db: db, path: path, cache: map[int64]tlog.Hash{}, pendingKeys: map[string]int64{}}
	if err := h.check(existed); err != nil {
		_ = db.Close()
		return nil, &CorruptDataError{Path: path, Err: err}
	}
	return h, nil
}

func (h *History) check(existed bool) error {
	if err := h.db.Update(func(tx *bolt.Tx) error {
		if existed && (tx.Bucket(bucketRecords) == nil || tx.Bucket(bucketHashes) == nil) {
			return errors.New("history buckets are missing")
		}
		for _, b := range [][]byte{bucketRecords, bucketHashes, bucketKeys, bucketKeyAt} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	return h.db.View(func(tx *bolt.Tx) error {
		n, err := lastKey(tx.Bucket(bucketRecords))
		if err != nil {
			return fmt.Errorf("records: %w", err)
		}
		hs, err := lastKey(tx.Bucket(bucketHashes))
		if err != nil {
			return fmt.Errorf("hashes: %w", err)
		}
		if want := tlog.StoredHashIndex(0, n); hs != want {
			return fmt.Errorf("%d records need %d stored hashes, the file has %d", n, want, hs)
		}
		if n > 0 {
			if k, _ := tx.Bucket(bucketRecords).Cursor().First(); binary.BigEndian.Uint64(k) != 0 {
				return errors.New("the first record is missing")
			}
		}
		h.stored = n
		return nil
	})
}

// lastKey returns one past the largest key of a bucket of u64 keys (0 when
// it is empty), checking the key's width.
func lastKey(b *bolt.Bucket) (int64, error) {
	k, _ := b.Cursor().Last()
	if k == nil {
		return 0, nil
	}
	if len(k) != 8 {
		return 0, fmt.Errorf("key of %d bytes", len(k))
	}
	return int64(binary.BigEndian.Uint64(k)) + 1, nil
}

// Close writes what is pending and closes the file.
func (h *History) Close() error {
	err := h.Flush()
	return errors.Join(err, h.db.Close())
}

// Len is the number of records.
func (h *History) Len() int64 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.stored + int64(len(h.pending))
}

// Append adds record number Len() and the stored hashes it adds.
func (h *History) Append(record []byte, hashes []tlog.Hash) error {
	h.mu.Lock()
	n := h.stored + int64(len(h.pending))
	if got, want := tlog.StoredHashIndex(0, n)+int64(len(hashes)), tlog.StoredHashIndex(0, n+1); got != want {
		h.mu.Unlock()
		return fmt.Errorf("auditor: history: record %d comes with %d hashes, want %d", n, len(hashes), want-tlog.StoredHashIndex(0, n))
	}
	h.pending = append(h.pending, bytes.Clone(record))
	h.pendingHashes = append(h.pendingHashes, hashes...)
	full := len(h.pending) >= MaxPending
	h.mu.Unlock()
	if full {
		return h.Flush()
	}
	return nil
}

// Flush writes the pending records in one fsynced transaction. Reads go
// on while it writes: they see the records still pending until the write
// is done. Appends and truncations are the state machine's and come from
// the goroutine that flushes, never during a flush.
func (h *History) Flush() error {
	h.mu.RLock()
	stored, recs, hashes := h.stored, h.pending, h.pendingHashes
	keys := make(map[string]int64, len(h.pendingKeys))
	maps.Copy(keys, h.pendingKeys)
	h.mu.RUnlock()
	if len(recs) == 0 && len(keys) == 0 {
		return nil
	}
	err := h.db.Update(func(tx *bolt.Tx) error {
		rb, hb := tx.Bucket(bucketRecords), tx.Bucket(bucketHashes)
		for i, r := range recs {
			if err := rb.Put(indexKey(uint64(stored)+uint64(i)), r); err != nil {
				return err
			}
		}
		first := tlog.StoredHashIndex(0, stored)
		for i, x := range hashes {
			if err := hb.Put(indexKey(uint64(first)+uint64(i)), x[:]); err != nil {
				return err
			}
		}
		kb, ab := tx.Bucket(bucketKeys), tx.Bucket(bucketKeyAt)
		for k, i := range keys {
			if err := kb.Put([]byte(k), indexKey(uint64(i))); err != nil {
				return err
			}
			if err := ab.Put(append(indexKey(uint64(i)), k...), nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("auditor: history %s: writing %d records: %w", h.path, len(recs), err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stored += int64(len(recs))
	clear(h.pending)
	h.pending, h.pendingHashes = h.pending[:0], h.pendingHashes[:0]
	for k, i := range keys {
		if j, ok := h.pendingKeys[k]; ok && j == i {
			delete(h.pendingKeys, k)
		}
	}
	return nil
}

// PutKey records that record i charged key (ledger.KeyIndex).
func (h *History) PutKey(key string, i int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := h.stored + int64(len(h.pending)); i < 0 || i >= n {
		return fmt.Errorf("auditor: history: no record %d to charge %q (have %d)", i, key, n)
	}
	h.pendingKeys[key] = i
	return nil
}

// GetKey returns the record that charged key (ledger.KeyIndex).
func (h *History) GetKey(key string) (int64, bool, error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if i, ok := h.pendingKeys[key]; ok {
		return i, true, nil
	}
	var i int64
	var ok bool
	err := h.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketKeys).Get([]byte(key))
		if v == nil {
			return nil
		}
		if len(v) != 8 {
			return fmt.Errorf("auditor: history %s: the record of key %q is damaged", h.path, key)
		}
		i, ok = int64(binary.BigEndian.Uint64(v)), true
		return nil
	})
	return i, ok, err
}

// Entry returns a copy of record i.
func (h *History) Entry(i int64) ([]byte, error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if i < 0 || i >= h.stored+int64(len(h.pending)) {
		return nil, fmt.Errorf("auditor: history: no record %d (have %d)", i, h.stored+int64(len(h.pending)))
	}
	if i >= h.stored {
		return bytes.Clone(h.pending[i-h.stored]), nil
	}
	var out []byte
	err := h.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketRecords).Get(indexKey(uint64(i)))
		if v == nil {
			return fmt.Errorf("record %d is missing from %s", i, h.path)
		}
		out = bytes.Clone(v)
		return nil
	})
	return out, err
}

// ReadHashes implements tlog.HashReader.
func (h *History) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]tlog.Hash, len(idx))
	first := tlog.StoredHashIndex(0, h.stored)
	end := first + int64(len(h.pendingHashes))
	var missing []int // positions in idx to read from disk
	for i, x := range idx {
		switch {
		case x < 0 || x >= end:
			return nil, fmt.Errorf("auditor: history: hash %d is not stored (have %d)", x, end)
		case x >= first:
			out[i] = h.pendingHashes[x-first]
		default:
			if v, ok := h.cache[x]; ok {
				out[i] = v
			} else {
				missing = append(missing, i)
			}
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	err := h.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketHashes)
		for _, i := range missing {
			v := b.Get(indexKey(uint64(idx[i])))
			if len(v) != len(tlog.Hash{}) {
				return fmt.Errorf("auditor: history %s: hash %d is missing or damaged", h.path, idx[i])
			}
			copy(out[i][:], v)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(h.cache)+len(missing) > maxCachedHashes {
		clear(h.cache)
	}
	for _, i := range missing {
		h.cache[idx[i]] = out[i]
	}
	return out, nil
}

// Truncate drops every record from n on, and their hashes.
func (h *History) Truncate(n int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	total := h.stored + int64(len(h.pending))
	if n < 0 || n > total {
		return fmt.Errorf("auditor: history: cannot truncate %d records to %d", total, n)
	}
	clear(h.cache)
	for k, i := range h.pendingKeys {
		if i >= n {
			delete(h.pendingKeys, k)
		}
	}
	if n >= h.stored {
		keep := n - h.stored
		clear(h.pending[keep:])
		h.pending = h.pending[:keep]
		h.pendingHashes = h.pendingHashes[:tlog.StoredHashIndex(0, n)-tlog.StoredHashIndex(0, h.stored)]
		return nil
	}
	err := h.db.Update(func(tx *bolt.Tx) error {
		if err := deleteFrom(tx.Bucket(bucketRecords), uint64(n)); err != nil {
			return err
		}
		if err := deleteFrom(tx.Bucket(bucketHashes), uint64(tlog.StoredHashIndex(0, n))); err != nil {
			return err
		}
		// The keys the dropped records charged.
		kb, c := tx.Bucket(bucketKeys), tx.Bucket(bucketKeyAt).Cursor()
		for k, _ := c.Seek(indexKey(uint64(n))); k != nil; k, _ = c.Seek(indexKey(uint64(n))) {
			if len(k) < 8 {
				return fmt.Errorf("a damaged key record")
			}
			if err := kb.Delete(k[8:]); err != nil {
				return err
			}
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("auditor: history %s: truncating to %d records: %w", h.path, n, err)
	}
	h.stored = n
	clear(h.pending)
	h.pending, h.pendingHashes = h.pending[:0], h.pendingHashes[:0]
	return nil
}

// deleteFrom deletes every key ≥ from.
func deleteFrom(b *bolt.Bucket, from uint64) error {
	c := b.Cursor()
	for k, _ := c.Seek(indexKey(from)); k != nil; k, _ = c.Seek(indexKey(from)) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}
