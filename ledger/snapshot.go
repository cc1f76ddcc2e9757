package ledger

import (
	"bytes"
	"errors"
	"fmt"
)

// ErrReplay reports a log whose entries are not what applying their own
// commands in order produces.
var ErrReplay = errors.New("ledger: replay does not reproduce the log")

// snapshotTag distinguishes a snapshot from the other encodings that start
// with the version byte.
const snapshotTag = 'S'

// maxEntries bounds the number of entries a snapshot or export may claim.
const maxEntries = 1 << 40

// Snapshot returns the whole state as deterministic bytes:
//
//	version u8 | 'S' | count u64 | count × entry (u32 length, bytes)
//
// The entries are the state: Restore rebuilds everything else by replaying
// them, so a snapshot cannot carry a balance its log does not justify.
func (s *State) Snapshot() ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return encodeEntries(snapshotTag, s.entries, nil)
}

func encodeEntries(tag byte, entries [][]byte, tail func(*encoder)) ([]byte, error) {
	size := 10
	for _, b := range entries {
		size += 4 + len(b)
	}
	e := &encoder{buf: make([]byte, 0, size)}
	e.u8(Version)
	e.u8(tag)
	e.u64(uint64(len(entries)))
	for _, b := range entries {
		e.u32(uint32(len(b)))
		e.buf = append(e.buf, b...)
	}
	if tail != nil {
		tail(e)
	}
	return e.buf, e.err
}

func decodeEntries(d *decoder, tag byte) [][]byte {
	if v := d.u8(); d.err == nil && v != Version {
		d.fail("version %d, this ledger reads version %d", v, Version)
	}
	if t := d.u8(); d.err == nil && t != tag {
		d.fail("tag %q, want %q", t, tag)
	}
	n := d.u64()
	if d.err != nil {
		return nil
	}
	// Every entry takes at least 4 bytes of length.
	if n > maxEntries || n > uint64(len(d.buf)-d.off)/4 {
		d.fail("claims %d entries in %d bytes", n, len(d.buf)-d.off)
		return nil
	}
	out := make([][]byte, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		l := d.u32()
		if d.err == nil && l > MaxCommandSize+64 {
			d.fail("entry %d is %d bytes", i, l)
		}
		out = append(out, d.take(int(l)))
	}
	return out
}

// Restore replaces the whole state with the one a snapshot describes, after
// replaying every entry and checking it reproduces the snapshot byte for
// byte. On error the state is unchanged.
func (s *State) Restore(snapshot []byte) error {
	d := &decoder{buf: snapshot}
	entries := decodeEntries(d, snapshotTag)
	if err := d.end(); err != nil {
		return fmt.Errorf("ledger: snapshot: %w", err)
	}
	fresh, err := Replay(entries)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fresh.mu.Lock()
	defer fresh.mu.Unlock()
	s.grid, s.genesis, s.origin = fresh.grid, fresh.genesis, fresh.origin
	s.parties, s.joined, s.accounts, s.students = fresh.parties, fresh.joined, fresh.accounts, fresh.students
	s.batches, s.sessions, s.opened = fresh.batches, fresh.sessions, fresh.opened
	s.entries, s.log = fresh.entries, fresh.log
	return nil
}

// ReplayError names the first entry that does not replay.
type ReplayError struct {
	Index  int64
	Reason string
}

func (e *ReplayError) Error() string {
	return fmt.Sprintf("ledger: entry %d: %s", e.Index, e.Reason)
}

func (e *ReplayError) Unwrap() error { return ErrReplay }

// Replay applies the commands of the given encoded entries to a new state and
// checks that each produced entry equals the given one byte for byte.
func Replay(entries [][]byte) (*State, error) {
	st := New()
	for i, b := range entries {
		if err := st.replayOne(int64(i), b); err != nil {
			return nil, err
		}
	}
	return st, nil
}

func (s *State) replayOne(i int64, b []byte) error {
	en, err := DecodeEntry(b)
	if err != nil {
		return &ReplayError{Index: i, Reason: err.Error()}
	}
	if en.Index != uint64(i) {
		return &ReplayError{Index: i, Reason: fmt.Sprintf("entry says it is entry %d: an entry is missing, repeated or out of order", en.Index)}
	}
	r, err := s.Apply(en.Command)
	if err != nil {
		return &ReplayError{Index: i, Reason: err.Error()}
	}
	s.mu.RLock()
	got := s.entries[len(s.entries)-1]
	s.mu.RUnlock()
	if !bytes.Equal(got, b) {
		return &ReplayError{Index: i, Reason: fmt.Sprintf("recorded %s/%s %s, replay gives %s/%s %s (%s)",
			en.Status, en.Code, en.Subject, r.Status, r.Code, r.Subject, r.Message)}
	}
	return nil
}
