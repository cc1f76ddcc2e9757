package raftnode

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/nzcfed/nzc/internal/golden"
)

// TestBatchEncoding pins the packed entry's layout: a change would make
// auditors misread the logs they already hold.
func TestBatchEncoding(t *testing.T) {
	cmds := [][]byte{chainCmd(1, "charge"), {}, chainCmd(2, "reject")}
	got := encodeBatch(cmds)
	want := golden.Check(t, filepath.Join("testdata", "packed-entry.bin"), got)
	back, err := decodeBatch(want)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(cmds) {
		t.Fatalf("decoded %d commands, want %d", len(back), len(cmds))
	}
	for i := range cmds {
		if !bytes.Equal(back[i], cmds[i]) {
			t.Errorf("command %d: %x, want %x", i, back[i], cmds[i])
		}
	}
}

func TestDecodeBatchRefuses(t *testing.T) {
	good := encodeBatch([][]byte{[]byte("abc"), []byte("de")})
	for _, tt := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"no commands", []byte{0}},
		{"count beyond the data", []byte{5, 1, 'a'}},
		{"truncated command", good[:len(good)-1]},
		{"trailing bytes", append(bytes.Clone(good), 0)},
		{"non-minimal varint", []byte{0x81, 0x00, 0}},
		{"overlong varint", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := decodeBatch(tt.b); !errors.Is(err, errBadBatch) {
				t.Fatalf("got %v, want errBadBatch", err)
			}
		})
	}
}

func FuzzDecodeBatch(f *testing.F) {
	f.Add(encodeBatch([][]byte{[]byte("abc"), {}, []byte("x")}))
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		cmds, err := decodeBatch(b)
		if err != nil {
			return
		}
		if again := encodeBatch(cmds); !bytes.Equal(again, b) {
			t.Fatalf("decode→encode changed %x into %x", b, again)
		}
	})
}

// preparingSM records what PrepareBatch is given, and how many commands
// were applied by then.
type preparingSM struct {
	*chainSM
	prepared      [][]byte
	appliedBefore uint64
}

func (p *preparingSM) PrepareBatch(cmds [][]byte) {
	p.prepared = append(p.prepared, cmds...)
	p.appliedBefore, _, _ = p.snapshotCount()
}

// TestFSMAppliesPackedCommands checks that every command of a packed entry
// is applied on its own, in order, with its own result, and that a refusal
// of one does not touch the others; and that a state machine that prepares
// batches is given every command of the logs, in order, before any is
// applied.
func TestFSMAppliesPackedCommands(t *testing.T) {
	sm := newChainSM()
	prep := &preparingSM{chainSM: sm}
	var sizes []int
	f := &fsm{sm: prep, onBatch: func(n int) { sizes = append(sizes, n) }}
	packed := &raft.Log{Index: 7, Type: raft.LogCommand, Extensions: batchExtension,
		Data: encodeBatch([][]byte{chainCmd(1, "a"), chainCmd(2, "reject"), chainCmd(3, "b"), chainCmd(1, "retry")})}
	plain := &raft.Log{Index: 8, Type: raft.LogCommand, Data: chainCmd(4, "c")}
	bad := &raft.Log{Index: 9, Type: raft.LogCommand, Extensions: batchExtension, Data: []byte{3, 1}}
	out := f.ApplyBatch([]*raft.Log{packed, plain, bad})
	rs, ok := out[0].(batchResult)
	if !ok || len(rs) != 4 {
		t.Fatalf("packed entry: %#v, want 4 results", out[0])
	}
	wantSeq := []uint64{1, 0, 2, 1} // the repeated id 1 answers with its first sequence number
	for i, r := range rs {
		if i == 1 {
			if !errors.Is(r.err, errRejectPayload) {
				t.Errorf("command 2: %v, want the refusal", r.err)
			}
			continue
		}
		if r.err != nil || len(r.data) != 8 || r.data[7] != byte(wantSeq[i]) {
			t.Errorf("command %d: %x %v, want sequence %d", i+1, r.data, r.err, wantSeq[i])
		}
	}
	if r, ok := out[1].(applyResult); !ok || r.err != nil || r.data[7] != 3 {
		t.Errorf("plain entry: %#v, want sequence 3", out[1])
	}
	if r, ok := out[2].(applyResult); !ok || !errors.Is(r.err, errBadBatch) {
		t.Errorf("malformed packed entry: %#v, want errBadBatch", out[2])
	}
	count, distinct, reordered := sm.snapshotCount()
	if count != 3 || distinct != 3 || reordered {
		t.Errorf("state machine: %d applied, %d distinct, reordered %v; want 3, 3, false", count, distinct, reordered)
	}
	if len(sizes) != 1 || sizes[0] != 5 {
		t.Errorf("observed batch sizes %v, want [5] commands", sizes)
	}
	wantPrepared := [][]byte{chainCmd(1, "a"), chainCmd(2, "reject"), chainCmd(3, "b"), chainCmd(1, "retry"), chainCmd(4, "c")}
	if !slices.EqualFunc(prep.prepared, wantPrepared, bytes.Equal) || prep.appliedBefore != 0 {
		t.Errorf("prepared %q with %d applied before, want %q with none", prep.prepared, prep.appliedBefore, wantPrepared)
	}
}

// BenchmarkPackedEntry measures packing 64 charge-sized commands into one
// raft entry and unpacking them, the leader's and every follower's extra
// work per entry under group commit.
func BenchmarkPackedEntry(b *testing.B) {
	cmds := make([][]byte, 64)
	for i := range cmds {
		cmds[i] = bytes.Repeat([]byte{byte(i)}, 600) // about a signed three-hospital charge
	}
	b.Run("encode", func(b *testing.B) {
		for b.Loop() {
			_ = encodeBatch(cmds)
		}
	})
	b.Run("decode", func(b *testing.B) {
		packed := encodeBatch(cmds)
		for b.Loop() {
			if _, err := decodeBatch(packed); err != nil {
				b.Fatal(err)
			}
		}
	})
}
