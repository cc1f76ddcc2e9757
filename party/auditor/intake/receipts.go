package intake

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nzcfed/nzc/ledger"
)

// Receipts makes the receipts that let the aggregator and the student check
// a commit without taking one auditor's word: the committed entry, its
// inclusion proof and a checkpoint cosigned by a majority of the auditors.
// A round of cosigning covers every entry applied before it began, so the
// charges of one group commit share one round, and concurrent callers wait
// on the round in flight instead of starting their own.
type Receipts struct {
	state  *ledger.State
	cosign func(ctx context.Context) ([]byte, error)
	// timeout bounds one round of cosigning.
	timeout time.Duration

	mu     sync.Mutex
	latest []byte // the newest cosigned checkpoint
	size   int64  // its tree size
	round  *round // the round in flight, if any
}

type round struct {
	done   chan struct{}
	signed []byte
	size   int64
	err    error
}

// NewReceipts returns a receipt maker over the auditor's ledger state; cosign
// gathers a majority's signatures on the auditor's latest checkpoint
// (raftnode's CosignCheckpoint). timeout bounds one round (0 means 10 s).
func NewReceipts(state *ledger.State, cosign func(ctx context.Context) ([]byte, error), timeout time.Duration) *Receipts {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	return &Receipts{state: state, cosign: cosign, timeout: timeout}
}

// For returns the receipt of entry index, which must be applied on this
// auditor. It reuses the newest cosigned checkpoint when that covers the
// entry, and otherwise joins or starts a round of cosigning.
func (r *Receipts) For(ctx context.Context, index int64) (ledger.Receipt, error) {
	// On a follower the entry is committed before it is applied here.
	if err := r.applied(ctx, index); err != nil {
		return ledger.Receipt{}, err
	}
	for {
		r.mu.Lock()
		if r.latest != nil && index < r.size {
			cp := r.latest
			r.mu.Unlock()
			return r.state.Receipt(index, cp)
		}
		rd := r.round
		if rd == nil {
			rd = &round{done: make(chan struct{})}
			r.round = rd
			// The round serves every waiter, so it outlives the caller
			// that happened to start it, within the timeout.
			go r.run(context.WithoutCancel(ctx), rd)
		}
		r.mu.Unlock()
		select {
		case <-rd.done:
		case <-ctx.Done():
			return ledger.Receipt{}, ctx.Err()
		}
		if rd.err != nil {
			return ledger.Receipt{}, rd.err
		}
		// Covered now, unless the round began before this entry was
		// applied here: then the next one covers it.
	}
}

// applied waits until entry index is applied on this auditor: at once on
// the leader, which applies before Submit returns; within a heartbeat or
// two on a follower.
func (r *Receipts) applied(ctx context.Context, index int64) error {
	wait := time.Millisecond
	for index >= r.state.TreeSize() {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: entry %d is not yet applied on this auditor (size %d): %w", ledger.ErrReceipt, index, r.state.TreeSize(), ctx.Err())
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
	return nil
}

func (r *Receipts) run(ctx context.Context, rd *round) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	signed, err := r.cosign(ctx)
	var size int64
	if err == nil {
		var c ledger.Checkpoint
		if c, err = ledger.PeekCheckpoint(signed); err == nil {
			size = c.Size
		}
	}
	if err != nil {
		err = fmt.Errorf("a majority of the auditors did not cosign the checkpoint: %w", err)
	}
	r.mu.Lock()
	rd.signed, rd.size, rd.err = signed, size, err
	if err == nil && size > r.size {
		r.latest, r.size = signed, size
	}
	r.round = nil
	r.mu.Unlock()
	close(rd.done)
}
