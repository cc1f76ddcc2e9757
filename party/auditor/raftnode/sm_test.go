package raftnode

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
)

// chainSM is the deterministic state machine the tests replicate: an
// append-only hash chain of commands. A command is an 8-byte id followed by
// a payload. A repeated id is recognised and answered with its original
// sequence number without changing the state, as the ledger does with a
// retried batch. The payload "reject" is refused (deterministically).
type chainSM struct {
	mu        sync.Mutex
	count     uint64
	head      [32]byte
	seen      map[uint64]uint64 // id → sequence number
	lastIndex uint64
	atIndex   map[string]bool // the commands applied at lastIndex (one packed entry)
	restores  int
	reordered bool // Apply saw an index not above the last one
	batches   int
}

func newChainSM() *chainSM { return &chainSM{seen: map[uint64]uint64{}} }

var errRejectPayload = errors.New("payload says reject")

func chainCmd(id uint64, payload string) []byte {
	return append(binary.BigEndian.AppendUint64(nil, id), payload...)
}

func (s *chainSM) Apply(index uint64, cmd []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Commands packed into one raft entry share its index; an entry applied
	// twice shows as an index going back or a command repeated at one index.
	if index < s.lastIndex || (index == s.lastIndex && s.atIndex[string(cmd)]) {
		s.reordered = true
	}
	if index != s.lastIndex || s.atIndex == nil {
		s.atIndex = map[string]bool{}
	}
	s.atIndex[string(cmd)] = true
	s.lastIndex = index
	if len(cmd) < 8 {
		return nil, fmt.Errorf("command of %d bytes is shorter than its id", len(cmd))
	}
	if string(cmd[8:]) == "reject" {
		return nil, errRejectPayload
	}
	id := binary.BigEndian.Uint64(cmd)
	if seq, ok := s.seen[id]; ok {
		return binary.BigEndian.AppendUint64(nil, seq), nil
	}
	s.count++
	s.seen[id] = s.count
	s.head = sha256.Sum256(append(s.head[:], cmd...))
	return binary.BigEndian.AppendUint64(nil, s.count), nil
}

func (s *chainSM) AppliedBatch(uint64) {
	s.mu.Lock()
	s.batches++
	s.mu.Unlock()
}

// Snapshot encodes count | head | lastIndex | n | n × (id, seq), ids sorted.
func (s *chainSM) Snapshot() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.encodeLocked(), nil
}

func (s *chainSM) encodeLocked() []byte {
	b := binary.BigEndian.AppendUint64(nil, s.count)
	b = append(b, s.head[:]...)
	b = binary.BigEndian.AppendUint64(b, s.lastIndex)
	ids := make([]uint64, 0, len(s.seen))
	for id := range s.seen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	b = binary.BigEndian.AppendUint64(b, uint64(len(ids)))
	for _, id := range ids {
		b = binary.BigEndian.AppendUint64(b, id)
		b = binary.BigEndian.AppendUint64(b, s.seen[id])
	}
	return b
}

func (s *chainSM) Restore(b []byte) error {
	if len(b) < 56 {
		return errors.New("short snapshot")
	}
	count := binary.BigEndian.Uint64(b)
	var head [32]byte
	copy(head[:], b[8:40])
	last := binary.BigEndian.Uint64(b[40:])
	n := binary.BigEndian.Uint64(b[48:])
	rest := b[56:]
	if uint64(len(rest)) != 16*n {
		return errors.New("snapshot length does not match its entry count")
	}
	seen := make(map[uint64]uint64, n)
	for i := range n {
		seen[binary.BigEndian.Uint64(rest[16*i:])] = binary.BigEndian.Uint64(rest[16*i+8:])
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count, s.head, s.lastIndex, s.seen = count, head, last, seen
	s.atIndex = nil
	s.restores++
	return nil
}

// stateHash digests the whole state.
func (s *chainSM) stateHash() [32]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sha256.Sum256(s.encodeLocked())
}

func (s *chainSM) has(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.seen[id]
	return ok
}

func (s *chainSM) snapshotCount() (count uint64, distinct int, reordered bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count, len(s.seen), s.reordered
}

func TestChainSMSnapshotRoundTrip(t *testing.T) {
	a := newChainSM()
	for i := range uint64(20) {
		if _, err := a.Apply(i+1, chainCmd(i%15, "x")); err != nil {
			t.Fatal(err)
		}
	}
	snap, _ := a.Snapshot()
	b := newChainSM()
	if err := b.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if a.stateHash() != b.stateHash() {
		t.Fatal("restored state differs")
	}
	if err := b.Restore(snap[:len(snap)-1]); err == nil {
		t.Fatal("truncated snapshot accepted")
	}
	if !bytes.Equal(snap, b.encodeLocked()) {
		t.Fatal("re-encoding differs")
	}
	if c, d, _ := a.snapshotCount(); c != 15 || d != 15 {
		t.Fatalf("count %d distinct %d, want 15 15 (ids repeat after 15)", c, d)
	}
}
