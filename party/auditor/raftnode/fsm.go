package raftnode

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// StateMachine is the replicated state an auditor keeps (the ledger).
//
// Apply must be deterministic: the same commands in the same order give the
// same state and results on every auditor — no clock, no randomness, no map
// iteration order. Whoever proposes a command puts ids and timestamps into
// it. An error from Apply is a deterministic refusal (the command is in the
// log, and every auditor refuses it the same way); it is returned to the
// submitter as a *RejectedError.
//
// index is the raft index of the log entry that carried cmd. The leader
// packs concurrent submissions into one entry (see batch.go), so several
// commands, applied one after another in order, may share an index.
//
// Raft calls Apply and Snapshot from one goroutine, never concurrently with
// each other. Snapshot must return a copy of the state that later Applies do
// not change; keep it quick, because Apply waits for it. Restore replaces
// all state with the snapshot's.
type StateMachine interface {
	Apply(index uint64, cmd []byte) ([]byte, error)
	Snapshot() ([]byte, error)
	Restore(snapshot []byte) error
}

// BatchObserver is implemented by a StateMachine that wants to act once
// after each batch of applied commands (the ledger signs a checkpoint).
// lastIndex is the raft index of the last command applied.
type BatchObserver interface {
	AppliedBatch(lastIndex uint64)
}

// BatchPreparer is implemented by a StateMachine that can do part of a
// batch's work before the batch is applied in order, and on several cores
// (the ledger checks the commands' signatures). PrepareBatch must change no
// result: Apply decides every command as if it had not been called.
type BatchPreparer interface {
	PrepareBatch(cmds [][]byte)
}

// RejectedError means the command was committed at Index but the state
// machine refused it (deterministically, on every auditor). Resubmitting it
// unchanged gives the same refusal.
type RejectedError struct {
	Index uint64
	Err   error
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("auditor: command at index %d refused by the state machine: %v", e.Index, e.Err)
}

func (e *RejectedError) Unwrap() error { return e.Err }

// RefusedAt is the log index of the refused command.
func (e *RejectedError) RefusedAt() uint64 { return e.Index }

// applyResult is what the FSM hands back through raft's ApplyFuture.
type applyResult struct {
	data []byte
	err  error
}

// fsm adapts a StateMachine to raft.BatchingFSM.
type fsm struct {
	sm      StateMachine
	onBatch func(n int)   // observes batch sizes; may be nil
	applied atomic.Uint64 // the raft index of the last command applied

	// For a HistoryRestorer: ctx bounds a restore, peers reach the other
	// auditors, startPeers are the voters of the snapshot
	// the node starts from, and ownLeft counts the restores still to come
	// from this node's own snapshot store: at start raft restores the
	// newest snapshot it keeps, or if that fails the next, and no more
	// once one is restored.
	ctx        context.Context
	peers      HistoryPeers
	startPeers []Peer
	ownLeft    atomic.Int64
	// restoring is set while a HistoryRestorer restores, and restoreErr
	// when the last restore failed.
	restoring  atomic.Pointer[restoreStatus]
	restoreErr atomic.Pointer[error]
}

var _ raft.BatchingFSM = (*fsm)(nil)

func (f *fsm) Apply(l *raft.Log) any {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	// Each log's commands: one for a single command, many for a group
	// commit, none for another log type or a batch that does not decode.
	cmds := make([][][]byte, len(logs))
	bp, prepare := f.sm.(BatchPreparer)
	var all [][]byte // every command, for bp
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		if !isBatch(l) {
			cmds[i] = [][]byte{l.Data}
		} else if c, err := decodeBatch(l.Data); err != nil {
			out[i] = applyResult{err: err}
			continue
		} else {
			cmds[i] = c
		}
		if prepare {
			all = append(all, cmds[i]...)
		}
	}
	if len(all) > 0 {
		bp.PrepareBatch(all)
	}
	var last uint64
	n := 0
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		last = l.Index
		if out[i] != nil {
			continue // a batch that does not decode
		}
		if !isBatch(l) {
			data, err := f.sm.Apply(l.Index, l.Data)
			out[i] = applyResult{data: data, err: err}
			n++
			continue
		}
		rs := make(batchResult, len(cmds[i]))
		for j, c := range cmds[i] {
			data, err := f.sm.Apply(l.Index, c)
			rs[j] = applyResult{data: data, err: err}
		}
		out[i] = rs
		n += len(cmds[i])
	}
	if n > 0 {
		if f.onBatch != nil {
			f.onBatch(n)
		}
		if bo, ok := f.sm.(BatchObserver); ok {
			bo.AppliedBatch(last)
		}
	}
	if last > 0 {
		f.applied.Store(last)
	}
	return out
}

// Snapshot copies the state (the StateMachine's job, under its own lock);
// Persist writes the copy while raft goes on applying.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	b, err := f.sm.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("auditor: state machine snapshot: %w", err)
	}
	return fsmSnapshot(b), nil
}

func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	return f.restore(rc)
}

type fsmSnapshot []byte

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s fsmSnapshot) Release() {}
