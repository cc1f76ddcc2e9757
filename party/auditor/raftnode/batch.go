package raftnode

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// Group commit. Submissions that reach the leader while earlier ones are
// still being replicated are packed into one raft entry, so one append, one
// fsync on each auditor and one round trip carry many commands. The state
// machine still applies every command of an entry on its own, in order, and
// answers each one separately: packing changes how commands travel through
// raft, never what is applied or recorded (the ledger's entries and Merkle
// log are the same whichever way the commands were packed).
//
// A packed entry is a raft command log whose Extensions are batchExtension
// and whose Data is
//
//	uvarint count | count × (uvarint length | command)
//
// Entries without the extension hold one command, as before packing existed.

// batchExtension marks a raft log entry that holds packed commands.
var batchExtension = []byte("nzc-batch/1")

const (
	// maxBatchCommands (unless Config.MaxPacked says fewer) and
	// maxBatchBytes bound one packed entry.
	maxBatchCommands = 1024
	maxBatchBytes    = 4 << 20
	// maxInflight is how many packed entries the leader has in raft at
	// once. Submissions arriving while all are in flight wait and go into
	// the next entry together: the busier the ledger, the larger the
	// entries. One: every charge costs each auditor far more CPU (its
	// signature check and accounting) than an entry's append and round
	// trip, so fewer, larger entries commit more charges per second on a
	// busy ledger (nzc bench, docs/history/2026-11-27-performance.md), and
	// a lone charge finds nothing in flight.
	maxInflight = 1
)

// errBadBatch is a packed entry that does not decode. The leader never
// writes one; it would be refused deterministically by every auditor.
var errBadBatch = errors.New("auditor: malformed packed raft entry")

// encodeBatch packs commands into one entry's data.
func encodeBatch(cmds [][]byte) []byte {
	size := binary.MaxVarintLen64
	for _, c := range cmds {
		size += binary.MaxVarintLen64 + len(c)
	}
	b := make([]byte, 0, size)
	b = binary.AppendUvarint(b, uint64(len(cmds)))
	for _, c := range cmds {
		b = binary.AppendUvarint(b, uint64(len(c)))
		b = append(b, c...)
	}
	return b
}

// decodeBatch is the inverse of encodeBatch. The commands alias b.
func decodeBatch(b []byte) ([][]byte, error) {
	n, k := uvarint(b)
	// Every command takes at least one byte (its length), which bounds the
	// count before anything is allocated.
	if k <= 0 || n == 0 || n > uint64(len(b)-k) {
		return nil, fmt.Errorf("%w: bad command count", errBadBatch)
	}
	b = b[k:]
	cmds := make([][]byte, 0, n)
	for i := range n {
		l, k := uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return nil, fmt.Errorf("%w: command %d of %d is truncated", errBadBatch, i+1, n)
		}
		cmds = append(cmds, b[k:k+int(l):k+int(l)])
		b = b[k+int(l):]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last command", errBadBatch, len(b))
	}
	return cmds, nil
}

// uvarint reads a minimally encoded uvarint (so that an entry has exactly
// one encoding); k <= 0 means there is none.
func uvarint(b []byte) (v uint64, k int) {
	v, k = binary.Uvarint(b)
	if k > 1 && b[k-1] == 0 {
		return 0, -1
	}
	return v, k
}

func (n *Node) maxPacked() int {
	if n.cfg.MaxPacked == 0 {
		return maxBatchCommands
	}
	return min(n.cfg.MaxPacked, maxBatchCommands)
}

func isBatch(l *raft.Log) bool { return bytes.Equal(l.Extensions, batchExtension) }

// batchResult is the FSM's response to a packed entry: one result per
// command, in order.
type batchResult []applyResult

// proposal is one submission waiting for the leader's proposer.
type proposal struct {
	cmd  []byte
	done chan proposed // buffered: the proposer never blocks on it
}

// proposed is what became of a proposal: the raft error for its whole entry,
// or its own result.
type proposed struct {
	index uint64
	res   applyResult
	err   error
}

// propose runs on every node for its lifetime and turns queued submissions
// into packed raft entries (raft refuses them on a follower with
// raft.ErrNotLeader, which the submitter handles).
func (n *Node) propose() {
	defer n.wg.Done()
	slots := make(chan struct{}, maxInflight)
	for {
		var first *proposal
		select {
		case first = <-n.proposals:
		case <-n.lifetime.Done():
			return
		}
		select {
		case slots <- struct{}{}:
		case <-n.lifetime.Done():
			first.done <- proposed{err: raft.ErrRaftShutdown}
			return
		}
		batch := []*proposal{first}
		size := len(first.cmd)
	drain:
		for len(batch) < n.maxPacked() && size < maxBatchBytes {
			select {
			case p := <-n.proposals:
				batch = append(batch, p)
				size += len(p.cmd)
			default:
				break drain
			}
		}
		cmds := make([][]byte, len(batch))
		for i, p := range batch {
			cmds[i] = p.cmd
		}
		f := n.raft.ApplyLog(raft.Log{Data: encodeBatch(cmds), Extensions: batchExtension}, n.cfg.applyTimeout())
		go func() {
			err := f.Error()
			<-slots
			var rs batchResult
			if err == nil {
				var ok bool
				if rs, ok = f.Response().(batchResult); !ok || len(rs) != len(batch) {
					err = fmt.Errorf("auditor: packed entry at index %d of %d commands returned %T", f.Index(), len(batch), f.Response())
				}
			}
			for i, p := range batch {
				out := proposed{index: f.Index(), err: err}
				if err == nil {
					out.res = rs[i]
				}
				p.done <- out
			}
		}()
	}
}

// applyUnpacked applies cmd as its own raft entry (packing turned off).
func (n *Node) applyUnpacked(ctx context.Context, cmd []byte, timeout time.Duration) (proposed, error) {
	f := n.raft.Apply(cmd, timeout)
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	// raft's timeout bounds only the enqueueing, and a command still queued
	// when raft shuts down is never answered: bound the wait here too.
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	err, werr := awaitOutcome(ctx, n, timer, done)
	if werr != nil {
		return proposed{}, werr
	}
	if err != nil {
		return proposed{err: err}, nil
	}
	r, ok := f.Response().(applyResult)
	if !ok {
		return proposed{}, fmt.Errorf("auditor: apply at index %d returned %T", f.Index(), f.Response())
	}
	return proposed{index: f.Index(), res: r}, nil
}

// enqueue hands cmd to the proposer and waits for its outcome, for at most
// timeout or until ctx or the node ends.
func (n *Node) enqueue(ctx context.Context, cmd []byte, timeout time.Duration) (proposed, error) {
	p := &proposal{cmd: cmd, done: make(chan proposed, 1)}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case n.proposals <- p:
	case <-ctx.Done():
		return proposed{}, fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
	case <-timer.C:
		return proposed{}, ErrTimeout
	case <-n.lifetime.Done():
		return proposed{}, ErrShutdown
	}
	return awaitOutcome(ctx, n, timer, p.done)
}

// awaitOutcome waits for the outcome of a command already handed to raft: a
// deadline (ctx's or timer's) gives ErrTimeout, and the node stopping first
// leaves the outcome unknown.
func awaitOutcome[T any](ctx context.Context, n *Node, timer *time.Timer, outcome <-chan T) (T, error) {
	var zero T
	select {
	case out := <-outcome:
		return out, nil
	case <-ctx.Done():
		return zero, fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
	case <-timer.C:
		return zero, ErrTimeout
	case <-n.lifetime.Done():
		return zero, fmt.Errorf("%w: %w", ErrOutcomeUnknown, ErrShutdown)
	}
}
