package auditor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

// replayWait bounds how long ApplyGenesis waits for this node to apply the
// log it had on disk when it started.
const replayWait = time.Minute

// GenesisError lists the genesis commands the ledger refused.
type GenesisError struct {
	Refused []error
}

func (e *GenesisError) Error() string {
	return fmt.Sprintf("auditor: the ledger refused %d genesis command(s): %v; check that the genesis file is the one nzc init wrote for this federation", len(e.Refused), errors.Join(e.Refused...))
}

// ApplyGenesis starts an empty ledger with the federation's genesis
// commands (provision.GenesisCommands), submitting them through this auditor
// once the cluster has a leader. It is the one place a genesis is applied.
//
// A ledger that has its genesis is left alone, so restarts change nothing:
// the node first waits until the ledger has applied the commands it had on
// disk when it started (raftnode's Replayed), since after a restart it can
// know a leader, and raft's applied index can pass those commands, before
// the ledger holds them (if they were never committed and a new leader
// drops them, the wait ends after a minute and the ledger's own state
// decides). The tree may hold entries without a genesis: commands
// that reached the ledger before it (a hospital opening its account as soon
// as it connects) are refused and recorded, and do not stop the genesis.
//
// Every auditor of a federation may apply the same genesis at once: a
// command the log already holds accepted is skipped, or, when another
// auditor got there between the look and the submission, refused and
// recorded (harmlessly) and counted as applied. When a leader change leaves a submission's outcome unknown, it
// waits for a leader and looks in the log before proposing the command
// again. Commands the ledger refuses give a *GenesisError after the rest
// have been tried.
func (a *Auditor) ApplyGenesis(ctx context.Context, cmds [][]byte) error {
	if err := a.waitLeader(ctx); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, replayWait)
	_ = poll(rctx, a.node.Replayed)
	cancel()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if a.ledger.State().Origin() != "" {
		return nil
	}
	var refused []error
	for i, c := range cmds {
		if a.holds(c) { // another auditor applied it meanwhile
			continue
		}
		r, err := a.submitOnce(ctx, c)
		if err != nil {
			return fmt.Errorf("auditor: apply genesis command %d: %w", i, err)
		}
		if r.Status == ledger.StatusRefused && !a.holds(c) {
			refused = append(refused, fmt.Errorf("command %d at index %d: %s", i, r.Index, r.Message))
			continue
		}
		a.log.Info("genesis command applied", "command", i, "result", r.Message)
	}
	if len(refused) > 0 {
		return &GenesisError{Refused: refused}
	}
	return nil
}

// submitOnce submits c until its outcome is known. When a leader change
// leaves it unknown, it waits for a leader and for this node to catch up,
// and reports c accepted if the log holds it by then.
func (a *Auditor) submitOnce(ctx context.Context, c []byte) (ledger.Result, error) {
	for {
		b, _, err := a.node.Submit(ctx, c)
		var np *raftnode.NotProposedError
		if errors.As(err, &np) { // refused before it was proposed
			b, err = np.Refusal, nil
		}
		if err == nil {
			return ledger.DecodeResult(b)
		}
		if !errors.Is(err, raftnode.ErrOutcomeUnknown) && !errors.Is(err, raftnode.ErrNoLeader) {
			return ledger.Result{}, err
		}
		a.log.Warn("genesis command outcome unknown; waiting for a leader", "err", err)
		if err := a.waitLeader(ctx); err != nil {
			return ledger.Result{}, err
		}
		if a.holds(c) {
			return ledger.Result{Outcome: ledger.Outcome{Status: ledger.StatusAccepted}, Message: "already in the log"}, nil
		}
	}
}

// holds reports whether the ledger holds c as an accepted entry. It reads
// the history a chunk at a time, so a long log is not brought into memory.
func (a *Auditor) holds(c []byte) bool {
	st := a.ledger.State()
	size := st.TreeSize()
	for from := int64(0); from < size; from += holdsChunk {
		entries, err := st.Entries(from, min(from+holdsChunk, size))
		if err != nil {
			return false
		}
		for _, b := range entries {
			if e, err := ledger.DecodeEntry(b); err == nil && e.Status == ledger.StatusAccepted && bytes.Equal(e.Command, c) {
				return true
			}
		}
	}
	return false
}

// holdsChunk is how many entries holds reads at once.
const holdsChunk = 1024
