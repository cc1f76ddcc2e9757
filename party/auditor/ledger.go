package auditor

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/nzcfed/nzc/internal/backoff"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

// Ledger is the auditor's raftnode.StateMachine: the privacy ledger (ledger.State)
// plus this auditor's checkpoint signing. Each checkpoint it serves is
// signed on request, as a cosignature stamped with a time at which it was
// the largest tree this auditor had (C2SP cosignature/v1): now for the
// whole log; for a past size, the time the log grew past it. So a
// cosignature on an old prefix carries an old time, and a verifier with a
// maximum age tells a fresh checkpoint from a frozen or rolled-back one.
type Ledger struct {
	state *ledger.State
	id    string
	key   ed25519.PrivateKey
	now   func() time.Time

	// flush writes the history's pending entries to disk after each batch
	// (nil: the history is in memory).
	flush func() error
	// snapshot encodes the state for raft: state.StateSnapshot.
	snapshot func() ([]byte, error)

	mu       sync.Mutex
	growth   []grown       // the log's sizes after recent batches, ascending
	next     chan struct{} // closed (and replaced) when the log grows
	flushErr error         // the history could not be written: apply nothing more
	// restoreErr is set when a snapshot did not restore: the ledger is
	// empty, so apply nothing more.
	restoreErr error
}

// grown says the log reached size at time at (Unix seconds).
type grown struct {
	size, at int64
}

// maxGrowth bounds the sizes a Ledger remembers: a past size older than
// these is cosigned with time 0, no claim of freshness.
const maxGrowth = 4096

var (
	_ raftnode.StateMachine       = (*Ledger)(nil)
	_ raftnode.BatchObserver      = (*Ledger)(nil)
	_ raftnode.CheckpointProvider = (*Ledger)(nil)
	_ raftnode.CheckpointWaiter   = (*Ledger)(nil)
	_ raftnode.HistoryProvider    = (*Ledger)(nil)
	_ raftnode.HistoryRestorer    = (*Ledger)(nil)
	_ raftnode.SnapshotCompleter  = (*Ledger)(nil)
)

// NewLedger wraps state for replication. auditorID is this auditor's party
// ID in the ledger, key its ed25519 checkpoint key and now its clock for
// the cosignatures' time (time.Now when nil).
func NewLedger(state *ledger.State, auditorID string, key ed25519.PrivateKey, now func() time.Time) (*Ledger, error) {
	if state == nil {
		return nil, errors.New("auditor: NewLedger needs a ledger state")
	}
	if now == nil {
		now = time.Now
	}
	if _, err := ledger.NewCheckpointSigner(auditorID, key, 0); err != nil {
		return nil, err
	}
	return &Ledger{state: state, id: auditorID, key: key, now: now, next: make(chan struct{}), snapshot: state.StateSnapshot}, nil
}

// State is the replicated ledger, for reads (accounts, entries, proofs).
func (l *Ledger) State() *ledger.State { return l.state }

// Apply applies one encoded ledger command; the result is ledger.EncodeResult of
// the ledger's Result. A refusal by the ledger rules is a result, recorded in
// the log like an acceptance, not an error.
func (l *Ledger) Apply(_ uint64, cmd []byte) ([]byte, error) {
	l.mu.Lock()
	ferr := cmp.Or(l.flushErr, l.restoreErr)
	l.mu.Unlock()
	if ferr != nil {
		return nil, ferr
	}
	r, err := l.state.Apply(cmd)
	if err != nil {
		return nil, err
	}
	return ledger.EncodeResult(r), nil
}

// PrepareBatch checks the batch's signatures on every core before the
// batch is applied in order.
func (l *Ledger) PrepareBatch(cmds [][]byte) { l.state.Preverify(cmds, runtime.GOMAXPROCS(0)) }

// AppliedBatch writes the batch's entries to the history on disk and notes
// when the log reached its new size.
func (l *Ledger) AppliedBatch(uint64) {
	l.flushHistory()
	l.grew()
}

func (l *Ledger) flushHistory() {
	if l.flush == nil {
		return
	}
	if err := l.flush(); err != nil {
		l.mu.Lock()
		if l.flushErr == nil {
			l.flushErr = fmt.Errorf("auditor: the ledger's history cannot be written, so this auditor applies nothing more; free the disk and restart it: %w", err)
		}
		l.mu.Unlock()
	}
}

// Snapshot implements raftnode.StateMachine: a state snapshot
// (ledger.State.StateSnapshot), the decision state and the tree's head,
// whose size does not grow with the history.
func (l *Ledger) Snapshot() ([]byte, error) { return l.snapshot() }

// Restore implements raftnode.StateMachine: it restores a snapshot over
// the history this auditor holds (ledger.State.Restore).
func (l *Ledger) Restore(b []byte) error {
	if err := l.state.Restore(b); err != nil {
		return err
	}
	l.restored()
	return nil
}

// CompleteSnapshot implements raftnode.SnapshotCompleter: a backup holds
// every entry (ledger.State.EntriesSnapshot), so that it restores alone.
func (l *Ledger) CompleteSnapshot(b []byte) ([]byte, error) { return l.state.EntriesSnapshot(b) }

// Entries implements raftnode.HistoryProvider.
func (l *Ledger) Entries(from, to int64) ([][]byte, error) { return l.state.Entries(from, to) }

// RestoreHistory implements raftnode.HistoryRestorer. A snapshot of this
// auditor's own store is adopted as it is when the history on its disk
// holds the snapshot's tree (a restart: nothing is replayed). Any other —
// one the leader sent, or one whose history this auditor lacks — is
// derived again: the history's own entries and those fetched from other
// auditors are replayed, each command's signature and outcome checked;
// they must hash to the snapshot's root and replay to exactly its state
// (ledger.State.RestoreFrom), and a majority of the log's auditors other
// than this one must have signed that root (vouch). So no one auditor —
// the leader that sent the snapshot, or the one that served the history —
// can have it adopt a log that forges a charge (replay checks every
// signature) or hides one (the others sign only their own tree). If the
// log is refused, the ledger is empty and applies nothing more.
func (l *Ledger) RestoreHistory(ctx context.Context, b []byte, own bool, peers raftnode.HistoryPeers) error {
	var err error
	var missing *ledger.HistoryMissingError
	if own {
		err = l.state.Restore(b)
	}
	if !own || errors.As(err, &missing) {
		err = l.state.RestoreFrom(ctx, b, ledger.RestoreOptions{Source: peers, Vouch: func(ctx context.Context, cp ledger.Checkpoint, st *ledger.State) error {
			return l.vouched(ctx, cp, st, peers)
		}})
	}
	l.mu.Lock()
	l.restoreErr = nil
	if err != nil {
		l.restoreErr = fmt.Errorf("auditor: the snapshot did not restore, so this auditor applies nothing; restart it to fetch the history again: %w", err)
	}
	l.mu.Unlock()
	if err != nil {
		return err
	}
	l.restored()
	return nil
}

// ErrUnvouched reports a log fetched to restore a snapshot whose tree a
// majority of the other auditors did not sign.
var ErrUnvouched = errors.New("auditor: a majority of the other auditors did not sign the snapshot's tree")

// vouched checks that a majority of the auditors the log st registers by
// cp.Size, this one not counted, signed cp (the tree of a log replayed to
// restore a snapshot): their checkpoints of that size, gathered from
// peers, checked with their keys from st.
func (l *Ledger) vouched(ctx context.Context, cp ledger.Checkpoint, st *ledger.State, peers raftnode.HistoryPeers) error {
	if cp.Size == 0 {
		return nil
	}
	keys, err := st.AuditorKeys(cp.Size)
	if err != nil {
		return err
	}
	need := ledger.Quorum(len(keys))
	signed := map[string]bool{}
	var other []string
	for _, note := range peers.Checkpoints(ctx, uint64(cp.Size)) {
		sc, err := ledger.OpenCheckpoint(note, keys)
		var qe *ledger.QuorumError
		signers := sc.Signers
		switch {
		case errors.As(err, &qe):
			sc.Checkpoint, signers = qe.Checkpoint, qe.Signers
		case err != nil:
			continue
		}
		if sc.Checkpoint != cp {
			other = append(other, fmt.Sprintf("%s at %s", strings.Join(signers, ", "), sc.Root))
			continue
		}
		for _, id := range signers {
			if id != l.id {
				signed[id] = true
			}
		}
	}
	if len(signed) >= need {
		return nil
	}
	msg := fmt.Sprintf("%d of the %d needed signed the tree of %d entries %s", len(signed), need, cp.Size, cp.Root)
	if len(other) > 0 {
		msg += "; signed other trees of that size: " + strings.Join(other, "; ")
	}
	return fmt.Errorf("%w: %s (start the other auditors, or check the one that sent the snapshot)", ErrUnvouched, msg)
}

func (l *Ledger) restored() {
	l.flushHistory()
	l.mu.Lock()
	l.growth = nil // the sizes before are another log's
	l.mu.Unlock()
	l.grew()
}

func (l *Ledger) grew() {
	g := grown{size: l.state.TreeSize(), at: l.now().Unix()}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.growth); n > 0 && l.growth[n-1].size >= g.size {
		return
	}
	close(l.next)
	l.next = make(chan struct{})
	if len(l.growth) == maxGrowth {
		l.growth = append(l.growth[:0], l.growth[1:]...)
	}
	l.growth = append(l.growth, g)
}

// largestAt returns a time at which size was at least the largest tree
// this auditor had: now for the current size; for a past size, when the
// log grew past it; 0 when that is older than it remembers.
func (l *Ledger) largestAt(size int64) int64 {
	now := max(l.now().Unix(), 0)
	if size >= l.state.TreeSize() {
		return now
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	i, _ := slices.BinarySearchFunc(l.growth, size+1, func(g grown, s int64) int { return cmp.Compare(g.size, s) })
	if i == 0 || i == len(l.growth) {
		// Grown past it before the oldest size remembered (or, i ==
		// len, not recorded yet: a batch being applied).
		if i == len(l.growth) {
			return now
		}
		return 0
	}
	return max(l.growth[i].at, 0)
}

// sign returns cp signed by this auditor, stamped with largestAt.
func (l *Ledger) sign(cp ledger.Checkpoint) ([]byte, error) {
	s, err := ledger.NewCheckpointSigner(l.id, l.key, l.largestAt(cp.Size))
	if err != nil {
		return nil, err
	}
	return ledger.SignCheckpoint(cp, s)
}

// ErrNoCheckpoint means this auditor has no checkpoint for the size asked:
// the log has no genesis yet, or it has not applied that many entries (ask
// again shortly).
var ErrNoCheckpoint = errors.New("auditor: no checkpoint of that size here yet")

// Checkpoint returns this auditor's signed checkpoint of the first treeSize
// entries, or of the whole log when treeSize is 0. A past size is signed on
// request: the tree at a size never changes.
func (l *Ledger) Checkpoint(treeSize uint64) ([]byte, error) {
	if treeSize == 0 {
		cp, err := l.state.Checkpoint()
		if err != nil {
			return nil, fmt.Errorf("%w: the ledger has no genesis", ErrNoCheckpoint)
		}
		return l.sign(cp)
	}
	if treeSize > math.MaxInt64 || int64(treeSize) > l.state.TreeSize() {
		return nil, fmt.Errorf("%w: asked for size %d, applied %d", ErrNoCheckpoint, treeSize, l.state.TreeSize())
	}
	if l.state.Origin() == "" {
		return nil, fmt.Errorf("%w: the ledger has no genesis", ErrNoCheckpoint)
	}
	root, err := l.state.TreeHash(int64(treeSize))
	if err != nil {
		return nil, err
	}
	return l.sign(ledger.Checkpoint{Origin: l.state.Origin(), Size: int64(treeSize), Root: root})
}

// WaitCheckpoint is Checkpoint, except that for a size this auditor has
// not applied yet it waits, until ctx ends, for the log to reach it: a
// follower asked to cosign the leader's newest checkpoint answers as soon
// as it has applied the entries, rather than after the leader's next poll.
func (l *Ledger) WaitCheckpoint(ctx context.Context, treeSize uint64) ([]byte, error) {
	for {
		l.mu.Lock()
		next := l.next
		l.mu.Unlock()
		cp, err := l.Checkpoint(treeSize)
		if !errors.Is(err, ErrNoCheckpoint) {
			return cp, err
		}
		select {
		case <-next:
		case <-ctx.Done():
			return nil, err
		}
	}
}

// peerAskTimeout bounds one request for a peer's cosignature; the peer
// waits for the size it is asked for at most until then.
const peerAskTimeout = 250 * time.Millisecond

// ForkError means another auditor signed a different root for the same tree
// size: the auditors' logs have diverged. This must never happen; stop and
// investigate before releasing anything.
type ForkError struct {
	Size   int64
	Peer   string
	Ours   string
	Theirs string
}

func (e *ForkError) Error() string {
	return fmt.Sprintf("auditor: FORK: auditor at %s signed a different checkpoint for size %d (ours %q, theirs %q); stop releasing and investigate", e.Peer, e.Size, e.Ours, e.Theirs)
}

// readStraggle is how long a round of cosigning for readers waits, once
// a majority signed, for the other auditors' signatures: an auditor that
// answers within it is named a cosigner, one that cannot be reached at all
// is not waited for.
const readStraggle = time.Second

// cosignWait says when a round of cosigning ends. Its zero value is a
// receipt's round: it needs a majority and waits for one. A reader's
// round (readWait) gets the checkpoint a majority signed, with every other
// signature that comes within readStraggle, and is told at once when no
// majority can be reached.
type cosignWait struct {
	// straggle is how long to wait, once a majority signed, for the
	// others that may still answer; 0 ends the round at the majority.
	straggle time.Duration
	// giveUp ends the round, without a majority, as soon as the peers not
	// yet found unreachable cannot make one, rather than when ctx ends.
	giveUp bool
}

// readWait is a reader's round of cosigning.
func readWait() cosignWait { return cosignWait{straggle: readStraggle, giveUp: true} }

// cosign gathers the other auditors' signatures on l's latest checkpoint
// through n and returns it signed by every auditor that answered before
// the round ended (see cosignWait). It returns a *ledger.QuorumError (with
// the partly signed checkpoint) if fewer than a majority of the ledger's
// auditors signed, and a *ForkError if any auditor signed a different root
// for the size.
func cosign(ctx context.Context, n *raftnode.Node, l *Ledger, log *slog.Logger, wait cosignWait) ([]byte, error) {
	own, err := l.Checkpoint(0)
	if err != nil {
		return nil, err
	}
	cp, err := ledger.PeekCheckpoint(own)
	if err != nil {
		return nil, err
	}
	keys, err := l.state.AuditorKeys(cp.Size)
	if err != nil {
		return nil, err
	}
	vs, err := ledger.CheckpointVerifiers(keys)
	if err != nil {
		return nil, err
	}
	verifiers := note.VerifierList(vs...)
	mine, err := note.Open(own, verifiers)
	if err != nil {
		return nil, fmt.Errorf("auditor: this auditor's key %s is not an auditor of the ledger: %w", l.id, err)
	}
	sigs := map[string]note.Signature{}
	for _, s := range mine.Sigs {
		sigs[s.Name] = s
	}
	var peers []string
	st := n.Status()
	for _, p := range st.Peers {
		if p.ID != st.ID {
			peers = append(peers, p.Addr)
		}
	}
	merged := func() ([]byte, error) {
		all := make([]note.Signature, 0, len(sigs))
		all = append(all, mine.Sigs...)
		names := slices.Sorted(maps.Keys(sigs))
		for _, name := range names {
			if name != l.id {
				all = append(all, sigs[name])
			}
		}
		return note.Sign(&note.Note{Text: mine.Text, Sigs: all})
	}
	// Ask every peer at once, each until it has applied the size (a
	// follower may lag by a few entries, and answers once it has them) or
	// ctx ends, so that a dead or slow auditor delays nobody once enough
	// have answered. An ask still out when the round ends is left to
	// finish (within peerAskTimeout), even when the caller's ctx ends with
	// the round, as the intake's does: a cancelled ask closes its
	// connection, and the next round would pay a mutual-TLS handshake on
	// both sides for it. Only the retries stop with the round.
	quorum := ledger.Quorum(len(vs))
	// An answer is a peer's signed checkpoint, or (note nil) the news that
	// it could not be reached: not listening, or no connection made.
	type answer struct {
		addr string
		note []byte
	}
	answers := make(chan answer, 2*len(peers))
	round, endRound := context.WithCancel(ctx)
	defer endRound()
	asks := context.WithoutCancel(ctx)
	for _, addr := range peers {
		go func() {
			reported := false
			pause := 5 * time.Millisecond
			for {
				call, cancel := context.WithTimeout(asks, peerAskTimeout)
				theirs, err := n.PeerCheckpoint(call, addr, uint64(cp.Size))
				cancel()
				if err == nil {
					answers <- answer{addr, theirs}
					return
				}
				log.Debug("peer checkpoint not available", "peer", addr, "size", cp.Size, "error", err)
				if errors.Is(err, raftnode.ErrPeerUnreachable) && !reported {
					reported = true
					answers <- answer{addr, nil}
				}
				if backoff.Wait(round, pause) != nil {
					return // the round is over: ask no more
				}
				pause = min(2*pause, 200*time.Millisecond)
			}
		}()
	}
	// waiting are the peers that have neither signed nor been found
	// unreachable; one found unreachable still signs if it answers before
	// the round ends.
	waiting := map[string]bool{}
	for _, p := range peers {
		waiting[p] = true
	}
	signed := map[string]bool{}
	var straggle <-chan time.Time
collect:
	for len(signed) < len(peers) {
		switch {
		case len(sigs) >= quorum && (wait.straggle == 0 || len(waiting) == 0):
			break collect
		case len(sigs) >= quorum && straggle == nil:
			t := time.NewTimer(wait.straggle)
			defer t.Stop()
			straggle = t.C
		case len(sigs) < quorum && wait.giveUp && len(sigs)+len(waiting) < quorum:
			break collect // those that could still answer cannot make a majority
		}
		var a answer
		select {
		case a = <-answers:
		case <-straggle:
			break collect
		case <-ctx.Done():
			break collect
		}
		delete(waiting, a.addr)
		if a.note == nil {
			continue
		}
		signed[a.addr] = true
		tn, err := note.Open(a.note, verifiers)
		if err != nil {
			log.Warn("peer checkpoint does not verify", "peer", a.addr, "error", err)
			continue
		}
		if tn.Text != mine.Text {
			return nil, &ForkError{Size: cp.Size, Peer: a.addr, Ours: mine.Text, Theirs: tn.Text}
		}
		for _, s := range tn.Sigs {
			sigs[s.Name] = s
		}
	}
	out, err := merged()
	if err != nil {
		return nil, err
	}
	if _, err := ledger.OpenCheckpoint(out, keys); err != nil {
		return out, err
	}
	return out, nil
}

var _ ledger.History = (*raftnode.History)(nil)
