package auditor

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/nzcfed/nzc/internal/backoff"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

// Ledger is the auditor's raftnode.StateMachine: the privacy ledger (ledger.State)
// plus this auditor's checkpoint signing. Each checkpoint it serves is
// signed on request, as a cosignature stamped with the auditor's clock: the
// time says when this auditor last vouched for it, which is what lets a
// verifier tell a fresh checkpoint from a frozen one.
type Ledger struct {
	state *ledger.State
	id    string
	key   ed25519.PrivateKey
	now   func() time.Time
}

var (
	_ raftnode.StateMachine       = (*Ledger)(nil)
	_ raftnode.CheckpointProvider = (*Ledger)(nil)
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
	return &Ledger{state: state, id: auditorID, key: key, now: now}, nil
}

// State is the replicated ledger, for reads (accounts, entries, proofs).
func (l *Ledger) State() *ledger.State { return l.state }

// Apply applies one encoded ledger command; the result is ledger.EncodeResult of
// the ledger's Result. A refusal by the ledger rules is a result, recorded in
// the log like an acceptance, not an error.
func (l *Ledger) Apply(_ uint64, cmd []byte) ([]byte, error) {
	r, err := l.state.Apply(cmd)
	if err != nil {
		return nil, err
	}
	return ledger.EncodeResult(r), nil
}

// Snapshot implements raftnode.StateMachine.
func (l *Ledger) Snapshot() ([]byte, error) { return l.state.Snapshot() }

// Restore implements raftnode.StateMachine.
func (l *Ledger) Restore(b []byte) error { return l.state.Restore(b) }

// sign returns cp signed by this auditor now.
func (l *Ledger) sign(cp ledger.Checkpoint) ([]byte, error) {
	s, err := ledger.NewCheckpointSigner(l.id, l.key, max(l.now().Unix(), 0))
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

// cosign gathers the other auditors' signatures on l's latest checkpoint
// through n and returns it signed by every auditor that answered. It
// returns a *ledger.QuorumError (with the partly signed checkpoint) if fewer
// than a majority of the ledger's auditors signed before ctx ended, and a
// *ForkError if any auditor signed a different root for the size.
func cosign(ctx context.Context, n *raftnode.Node, l *Ledger, log *slog.Logger, all bool) ([]byte, error) {
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
	// follower may lag by a few entries) or ctx ends, so that a dead or
	// slow auditor delays nobody once enough have answered.
	target := len(vs)
	if !all {
		target = ledger.Quorum(len(vs))
	}
	type answer struct {
		addr string
		note []byte
	}
	askCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	answers := make(chan answer)
	for _, addr := range peers {
		go func() {
			wait := 5 * time.Millisecond
			for {
				theirs, err := n.PeerCheckpoint(askCtx, addr, uint64(cp.Size))
				if err == nil {
					select {
					case answers <- answer{addr, theirs}:
					case <-askCtx.Done():
					}
					return
				}
				log.Debug("peer checkpoint not available", "peer", addr, "size", cp.Size, "error", err)
				if backoff.Wait(askCtx, wait) != nil {
					return
				}
				wait = min(2*wait, 200*time.Millisecond)
			}
		}()
	}
collect:
	for range peers {
		if len(sigs) >= target {
			break
		}
		var a answer
		select {
		case a = <-answers:
		case <-ctx.Done():
			break collect
		}
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
	signed, err := merged()
	if err != nil {
		return nil, err
	}
	if _, err := ledger.OpenCheckpoint(signed, keys); err != nil {
		return signed, err
	}
	return signed, nil
}
