package raftnode

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// The raft log and the raft stable state live in one bbolt file. bbolt is
// used directly rather than through raft-boltdb: raft-boltdb/v2 imports
// github.com/hashicorp/go-metrics/compat, which go-metrics v0.7.0 (the
// version raft v1.8 requires) no longer has, and raft-boltdb v1 depends on
// the archived github.com/boltdb/bolt and msgpack v0.5. The store below is
// small, encodes entries with a fixed binary layout, and is checked on open.

var (
	bucketLogs   = []byte("logs")
	bucketStable = []byte("stable")
)

// errStableKeyNotFound carries the exact text raft compares against
// ("not found") when it reads a missing stable-store key.
var errStableKeyNotFound = errors.New("not found")

// initialMmapSize reserves address space for the file up front, so a
// growing log does not stall writers while bbolt remaps it.
const initialMmapSize = 256 << 20

// logEncodingVersion is the first byte of every encoded log entry.
const logEncodingVersion = 1

// boltStore implements raft.LogStore and raft.StableStore on one bbolt file.
// Every write is one bbolt transaction, fsynced on commit; raft hands the
// leader's whole batch to StoreLogs, so one fsync covers many commands.
type boltStore struct {
	db   *bolt.DB
	path string
}

var (
	_ raft.LogStore    = (*boltStore)(nil)
	_ raft.StableStore = (*boltStore)(nil)
)

// openBoltStore opens (or creates) the store at path and verifies its pages.
// Any failure to open or verify an existing file is a *CorruptDataError.
func openBoltStore(path string) (*boltStore, error) {
	db, existed, err := openDataFile(path)
	if err != nil {
		return nil, err
	}
	s := &boltStore{db: db, path: path}
	if err := s.verify(existed); err != nil {
		_ = db.Close()
		return nil, &CorruptDataError{Path: path, Err: err}
	}
	return s, nil
}

// openDataFile opens (or creates) the bbolt file at path for one of the
// node's stores and says whether it existed. An empty or unreadable file
// is a *CorruptDataError; a file another process holds is an error that
// says so.
func openDataFile(path string) (db *bolt.DB, existed bool, err error) {
	if fi, err := os.Stat(path); err == nil {
		existed = true
		if fi.Size() == 0 {
			return nil, true, &CorruptDataError{Path: path, Err: errors.New("file is empty")}
		}
	}
	db, err = openBolt(path)
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, existed, fmt.Errorf("open %s: %w: another process holds the lock; stop it or choose another data directory", path, err)
		}
		return nil, existed, &CorruptDataError{Path: path, Err: err}
	}
	return db, existed, nil
}

// openBolt opens the file without persisting bbolt's freelist (it is
// rebuilt by a scan on open), which makes every commit write less, turning a panic inside bbolt (which it may raise
// on some malformed files) or a fault reading the memory-mapped file (a
// truncated file) into an error.
func openBolt(path string) (db *bolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("bbolt: %v", r)
		}
	}()
	return bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bolt.FreelistMapType, InitialMmapSize: initialMmapSize})
}

// verify reads every page the store uses — decoding every log entry — on
// this goroutine, where a fault on the memory-mapped file becomes an error,
// then runs bbolt's own consistency check, and creates (or, for an existing
// file, requires) the two buckets.
func (s *boltStore) verify(existed bool) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("bbolt: %v", r)
		}
	}()
	if err := s.db.View(func(tx *bolt.Tx) error {
		logs, stable := tx.Bucket(bucketLogs), tx.Bucket(bucketStable)
		if !existed {
			return nil
		}
		if logs == nil || stable == nil {
			return errors.New("raft buckets are missing")
		}
		fi, err := os.Stat(s.path)
		if err != nil {
			return err
		}
		if fi.Size() < tx.Size() {
			return fmt.Errorf("file is %d bytes but its pages reach %d bytes: truncated", fi.Size(), tx.Size())
		}
		var l raft.Log
		var prev uint64
		if err := logs.ForEach(func(k, v []byte) error {
			if len(k) != 8 {
				return fmt.Errorf("log key of %d bytes", len(k))
			}
			idx := binary.BigEndian.Uint64(k)
			if err := decodeLog(v, &l); err != nil {
				return fmt.Errorf("log entry %d: %w", idx, err)
			}
			if l.Index != idx || (prev != 0 && idx != prev+1) {
				return fmt.Errorf("log entry %d out of sequence (previous %d, stored index %d)", idx, prev, l.Index)
			}
			prev = idx
			return nil
		}); err != nil {
			return err
		}
		if err := stable.ForEach(func(k, v []byte) error { return nil }); err != nil {
			return err
		}
		if err := checkMetaPages(s.path, s.db.Info().PageSize); err != nil {
			return err
		}
		for cerr := range tx.Check() {
			return fmt.Errorf("consistency check: %w", cerr)
		}
		return nil
	}); err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketLogs); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(bucketStable)
		return err
	})
}

// bbolt's MetaPageFlag: the flags of its two meta pages.
const boltMetaPageFlag = 0x04

// checkMetaPages checks the headers of bbolt's two meta pages. bbolt opens
// a file whose first meta page is damaged from the second, but its Check
// then reads the damaged page on a goroutine of its own, where bbolt's
// assertion panics past any recover and kills the process; so they are
// checked here first. The header is the page id (u64) and flags (u16) in
// the machine's byte order, little-endian on every platform we build for.
func checkMetaPages(path string, pageSize int) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	hdr := make([]byte, 10)
	for id := range 2 {
		if _, err := f.ReadAt(hdr, int64(id*pageSize)); err != nil {
			return fmt.Errorf("meta page %d: %w", id, err)
		}
		if got, flags := binary.LittleEndian.Uint64(hdr[:8]), binary.LittleEndian.Uint16(hdr[8:]); got != uint64(id) || flags != boltMetaPageFlag {
			return fmt.Errorf("meta page %d is damaged (its header names page %d with flags %#x)", id, got, flags)
		}
	}
	return nil
}

func (s *boltStore) Close() error { return s.db.Close() }

func indexKey(i uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], i)
	return k[:]
}

// FirstIndex implements raft.LogStore.
func (s *boltStore) FirstIndex() (uint64, error) { return s.endIndex((*bolt.Cursor).First) }

// LastIndex implements raft.LogStore.
func (s *boltStore) LastIndex() (uint64, error) { return s.endIndex((*bolt.Cursor).Last) }

// endIndex is the index of the log entry that end (First or Last) moves a
// cursor to, or 0 when the log is empty.
func (s *boltStore) endIndex(end func(*bolt.Cursor) ([]byte, []byte)) (uint64, error) {
	var idx uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		if k, _ := end(tx.Bucket(bucketLogs).Cursor()); k != nil {
			idx = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return idx, err
}

// GetLog implements raft.LogStore.
func (s *boltStore) GetLog(index uint64, log *raft.Log) error {
	return s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketLogs).Get(indexKey(index))
		if v == nil {
			return raft.ErrLogNotFound
		}
		if err := decodeLog(v, log); err != nil {
			return &CorruptDataError{Path: s.path, Err: fmt.Errorf("log entry %d: %w", index, err)}
		}
		return nil
	})
}

// StoreLog implements raft.LogStore.
func (s *boltStore) StoreLog(log *raft.Log) error { return s.StoreLogs([]*raft.Log{log}) }

// StoreLogs implements raft.LogStore: all entries in one transaction.
func (s *boltStore) StoreLogs(logs []*raft.Log) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLogs)
		for _, l := range logs {
			if err := b.Put(indexKey(l.Index), encodeLog(l)); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeleteRange implements raft.LogStore; both bounds are inclusive.
func (s *boltStore) DeleteRange(min, max uint64) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketLogs).Cursor()
		for k, _ := c.Seek(indexKey(min)); k != nil; k, _ = c.Next() {
			if binary.BigEndian.Uint64(k) > max {
				break
			}
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
}

// Set implements raft.StableStore.
func (s *boltStore) Set(key, val []byte) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketStable).Put(key, val)
	})
}

// Get implements raft.StableStore.
func (s *boltStore) Get(key []byte) ([]byte, error) {
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketStable).Get(key)
		if v == nil {
			return errStableKeyNotFound
		}
		out = bytes.Clone(v)
		return nil
	})
	return out, err
}

// SetUint64 implements raft.StableStore.
func (s *boltStore) SetUint64(key []byte, val uint64) error { return s.Set(key, indexKey(val)) }

// GetUint64 implements raft.StableStore.
func (s *boltStore) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, &CorruptDataError{Path: s.path, Err: fmt.Errorf("stable key %q holds %d bytes, want 8", key, len(v))}
	}
	return binary.BigEndian.Uint64(v), nil
}

// encodeLog lays out a log entry as
// version | uvarint index | uvarint term | type | varint appendedAt(ns) |
// uvarint len(data) | data | uvarint len(extensions) | extensions.
func encodeLog(l *raft.Log) []byte {
	buf := make([]byte, 0, 1+3*binary.MaxVarintLen64+1+2*binary.MaxVarintLen64+len(l.Data)+len(l.Extensions))
	buf = append(buf, logEncodingVersion)
	buf = binary.AppendUvarint(buf, l.Index)
	buf = binary.AppendUvarint(buf, l.Term)
	buf = append(buf, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	buf = binary.AppendVarint(buf, at)
	buf = binary.AppendUvarint(buf, uint64(len(l.Data)))
	buf = append(buf, l.Data...)
	buf = binary.AppendUvarint(buf, uint64(len(l.Extensions)))
	buf = append(buf, l.Extensions...)
	return buf
}

var errShortLog = errors.New("truncated log entry")

// decodeLog is the inverse of encodeLog. It copies data out of b, which bbolt
// owns only for the life of the transaction.
func decodeLog(b []byte, l *raft.Log) error {
	if len(b) == 0 {
		return errShortLog
	}
	if b[0] != logEncodingVersion {
		return fmt.Errorf("unknown log encoding version %d", b[0])
	}
	b = b[1:]
	uv := func() (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, errShortLog
		}
		b = b[n:]
		return v, nil
	}
	bytesField := func() ([]byte, error) {
		n, err := uv()
		if err != nil {
			return nil, err
		}
		if n > uint64(len(b)) {
			return nil, errShortLog
		}
		var out []byte
		if n > 0 {
			out = bytes.Clone(b[:n])
		}
		b = b[n:]
		return out, nil
	}
	var err error
	if l.Index, err = uv(); err != nil {
		return err
	}
	if l.Term, err = uv(); err != nil {
		return err
	}
	if len(b) == 0 {
		return errShortLog
	}
	l.Type = raft.LogType(b[0])
	b = b[1:]
	at, n := binary.Varint(b)
	if n <= 0 {
		return errShortLog
	}
	b = b[n:]
	l.AppendedAt = time.Time{}
	if at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	if l.Data, err = bytesField(); err != nil {
		return err
	}
	if l.Extensions, err = bytesField(); err != nil {
		return err
	}
	if len(b) != 0 {
		return fmt.Errorf("%d trailing bytes after log entry", len(b))
	}
	return nil
}
