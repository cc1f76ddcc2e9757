package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/mod/sumdb/tlog"
)

// ErrReplay reports a log whose entries are not what applying their own
// commands in order produces.
var ErrReplay = errors.New("ledger: replay does not reproduce the log")

// snapshotTag distinguishes a snapshot from the other encodings that start
// with the version byte.
const snapshotTag = 'S'

// maxEntrySize bounds one encoded entry: a command of MaxCommandSize plus the
// entry's own fields (at most 1+8+32+4+1+1+4+128+8 bytes).
const maxEntrySize = MaxCommandSize + 256

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
	entries, err := s.readAll()
	if err != nil {
		return nil, err
	}
	return encodeEntries(snapshotTag, entries, nil)
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
		if d.err == nil && l > maxEntrySize {
			d.fail("entry %d is %d bytes", i, l)
		}
		out = append(out, d.take(int(l)))
	}
	return out
}

// Restore replaces the whole state with the one a snapshot describes.
//
// An entries snapshot (Snapshot) is replayed entry by entry, each checked
// to reproduce the snapshot byte for byte. A state snapshot
// (StateSnapshot) is adopted as it is when the history already holds the
// entries it describes, its tree hash the snapshot's root (a replica
// restarting over its own disk): nothing is replayed. A history that does
// not hold them gives a *HistoryMissingError; RestoreFrom fetches them.
// On error the state is unchanged.
func (s *State) Restore(snapshot []byte) error {
	if isStateSnapshot(snapshot) {
		return s.restoreState(context.Background(), snapshot, nil)
	}
	return s.restoreEntries(snapshot)
}

func (s *State) restoreEntries(snapshot []byte) error {
	d := &decoder{buf: snapshot}
	entries := decodeEntries(d, snapshotTag)
	if err := d.end(); err != nil {
		return fmt.Errorf("ledger: snapshot: %w", err)
	}
	// fresh is checked against entries and their tree only: it keeps no
	// copy of the log.
	fresh := newState(&treeOnly{})
	if _, err := fresh.replayEntries(entries, nil); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fresh.mu.Lock()
	defer fresh.mu.Unlock()
	if err := s.adoptHistory(fresh, entries); err != nil {
		// The history no longer holds the old state's log: leave an
		// empty ledger rather than a state its history does not justify.
		s.empty(s.log.h)
		blank := newState(s.log.h)
		s.costs, s.pre = blank.costs, blank.pre
		return fmt.Errorf("ledger: restore: %w; the ledger is empty now", err)
	}
	return s.take(fresh)
}

// adoptHistory makes s's history hold exactly entries, the log of fresh. A
// history that already starts with them (an auditor restarting over its
// own disk) is cut to them and not rewritten.
func (s *State) adoptHistory(fresh *State, entries [][]byte) error {
	n := int64(len(entries))
	if s.log.size() >= n {
		mine, err := s.log.treeHash(n)
		if err != nil {
			return err
		}
		theirs, err := fresh.log.treeHash(n)
		if err != nil {
			return err
		}
		if mine == theirs {
			return s.log.h.Truncate(n)
		}
	}
	if err := s.log.h.Truncate(0); err != nil {
		return err
	}
	for i, b := range entries {
		if err := s.log.append(b); err != nil {
			return fmt.Errorf("entry %d of %d: %w", i, n, err)
		}
	}
	return nil
}

// readAll returns every entry; the caller holds s.mu.
func (s *State) readAll() ([][]byte, error) {
	n := s.log.size()
	out := make([][]byte, 0, n)
	for i := range n {
		b, err := s.log.h.Entry(i)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// ReplayError names the first entry that does not replay.
type ReplayError struct {
	Index  int64
	Reason string

	prevRootOnly bool // the entry replays except for its record of the root before it
}

func (e *ReplayError) Error() string {
	return fmt.Sprintf("ledger: entry %d: %s", e.Index, e.Reason)
}

func (e *ReplayError) Unwrap() error { return ErrReplay }

// Replay applies the commands of the given encoded entries to a new state and
// checks that each produced entry equals the given one byte for byte.
func Replay(entries [][]byte) (*State, error) {
	st := New()
	if _, err := st.replayEntries(entries, nil); err != nil {
		return nil, err
	}
	return st, nil
}

// replayEntries replays entries in order and stops at the first one that
// does not reproduce, returning how many did. roots are tree roots by size
// known from elsewhere (checkpoints), used only to name the changed entry.
func (s *State) replayEntries(entries [][]byte, roots map[int64]tlog.Hash) (int64, error) {
	for i, b := range entries {
		err := s.replayOne(int64(i), b)
		if err == nil {
			continue
		}
		if re, ok := err.(*ReplayError); ok && re.prevRootOnly {
			return int64(i), s.blame(int64(i), entries, roots)
		}
		return int64(i), err
	}
	return int64(len(entries)), nil
}

// blame names the changed entry when entry i replays except for the tree
// root it records for entries [0, i): either that record in entry i was
// changed, or entry i−1 was (replay cannot see a change to an entry whose
// command does not verify, such as a malformed one). The state has just
// appended entry i as replay produced it, with the root the entries before
// it really have; if the next entry's record (or a checkpoint) of the root
// of [0, i+1) agrees with that, the rest of entry i is the log's and only its
// record was changed.
func (s *State) blame(i int64, entries [][]byte, roots map[int64]tlog.Hash) error {
	want, known := roots[i+1]
	if i+1 < int64(len(entries)) {
		if next, err := DecodeEntry(entries[i+1]); err == nil {
			want, known = next.PrevRoot, true
		}
	}
	s.mu.RLock()
	have, err := s.log.treeHash(i + 1)
	s.mu.RUnlock()
	switch {
	case !known || err != nil:
		return &ReplayError{Index: i, Reason: fmt.Sprintf("entry %d records a tree root that entries 0 to %d do not have: entry %d or entry %d was changed", i, i-1, i, i-1)}
	case have == want:
		return &ReplayError{Index: i, Reason: fmt.Sprintf("entry %d was changed: its record of the tree root before it is not the log's, which the entry after it confirms", i)}
	}
	return &ReplayError{Index: i - 1, Reason: fmt.Sprintf("entry %d was changed: entries %d and %d record tree roots that it does not produce", i-1, i, i+1)}
}

func (s *State) replayOne(i int64, b []byte) error {
	en, err := DecodeEntry(b)
	if err != nil {
		return &ReplayError{Index: i, Reason: strings.TrimPrefix(err.Error(), "ledger: ")}
	}
	if en.Index != uint64(i) {
		return &ReplayError{Index: i, Reason: fmt.Sprintf("entry says it is entry %d: an entry is missing, repeated or out of order", en.Index)}
	}
	if en.Record != nil {
		return s.replayRecord(i, en, b)
	}
	r, err := s.apply(en.Command, en.Status == StatusRefused)
	if err != nil {
		return &ReplayError{Index: i, Reason: strings.TrimPrefix(err.Error(), "ledger: ")}
	}
	s.mu.RLock()
	got, err := s.log.h.Entry(s.log.size() - 1)
	s.mu.RUnlock()
	if err != nil {
		return &ReplayError{Index: i, Reason: strings.TrimPrefix(err.Error(), "ledger: ")}
	}
	if !bytes.Equal(got, b) {
		if mine, err := DecodeEntry(got); err == nil && i > 0 {
			mine.PrevRoot = en.PrevRoot
			if same, err := mine.Encode(); err == nil && bytes.Equal(same, b) {
				return &ReplayError{Index: i, prevRootOnly: true, Reason: fmt.Sprintf(
					"entry %d records a tree root for the entries before it that they do not have", i)}
			}
		}
		return &ReplayError{Index: i, Reason: fmt.Sprintf("recorded %s/%s %s, replay gives %s/%s %s (%s)",
			en.Status, en.Code, en.Subject, r.Status, r.Code, r.Subject, r.Message)}
	}
	return nil
}

// replayRecord appends the refusal record en (encoded as b) as entry i. A
// refusal changed nothing, so there is nothing to apply; what can be
// checked is that the record follows the entries before it.
func (s *State) replayRecord(i int64, en Entry, b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, err := s.log.treeHash(i)
	if err != nil {
		return &ReplayError{Index: i, Reason: strings.TrimPrefix(err.Error(), "ledger: ")}
	}
	if prev != en.PrevRoot {
		return &ReplayError{Index: i, prevRootOnly: i > 0, Reason: fmt.Sprintf(
			"entry %d records a tree root for the entries before it that they do not have", i)}
	}
	if err := s.appendEntry(b); err != nil {
		return &ReplayError{Index: i, Reason: strings.TrimPrefix(err.Error(), "ledger: ")}
	}
	return nil
}
