package raftnode

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/hashicorp/raft"
)

// HistoryProvider is implemented by a StateMachine that serves its
// history to other auditors (opEntries): an auditor restoring a snapshot
// that holds its state but not its history fetches the history from
// them.
type HistoryProvider interface {
	// Entries returns the encoded entries with index in [from, to).
	Entries(from, to int64) ([][]byte, error)
}

// HistoryRestorer is implemented by a StateMachine whose snapshots hold
// its state and the head of its history, not the history. Raft restores
// with RestoreHistory instead of Restore: own says the snapshot is this
// node's own (from its store, at start), not one another auditor sent;
// peers reach the other auditors for the history and their checkpoints.
type HistoryRestorer interface {
	RestoreHistory(ctx context.Context, snapshot []byte, own bool, peers HistoryPeers) error
}

// HistoryPeers are the other auditors, as a restoring state machine
// reaches them.
type HistoryPeers interface {
	// Entries returns entries from, from+1, … of the replicated history
	// from another auditor: at least one and at most to−from of them.
	Entries(ctx context.Context, from, to int64) ([][]byte, error)
	// Checkpoints returns the signed checkpoint of the first size
	// entries of every other auditor that gives one (CheckpointProvider).
	Checkpoints(ctx context.Context, size uint64) [][]byte
}

// Bounds on one opEntries answer: it stops at the first entry that would
// take it past maxEntriesBytes, or at maxEntriesCount entries, but always
// carries one.
const (
	maxEntriesBytes = 4 << 20
	maxEntriesCount = 4096
)

// ErrNoHistory means no other auditor gave the entries asked for.
var ErrNoHistory = errors.New("auditor: no other auditor gave the history asked for")

func encodeRange(from, to int64) []byte {
	return binary.AppendUvarint(binary.AppendUvarint(nil, uint64(from)), uint64(to))
}

func decodeRange(b []byte) (int64, int64, error) {
	from, k := binary.Uvarint(b)
	if k <= 0 {
		return 0, 0, errors.New("auditor: malformed entries request")
	}
	to, k2 := binary.Uvarint(b[k:])
	if k2 <= 0 || k+k2 != len(b) || from >= to || to > 1<<62 {
		return 0, 0, errors.New("auditor: malformed entries request")
	}
	return int64(from), int64(to), nil
}

// localEntries answers a peer's opEntries request.
func (n *Node) localEntries(body []byte) ([]byte, error) {
	hp, ok := n.cfg.StateMachine.(HistoryProvider)
	if !ok {
		return nil, errors.New("auditor: this state machine serves no history")
	}
	from, to, err := decodeRange(body)
	if err != nil {
		return nil, err
	}
	var out []byte
	var count uint64
	var list []byte
	for i := from; i < to && count < maxEntriesCount; i++ {
		es, err := hp.Entries(i, i+1)
		if err != nil {
			if count > 0 {
				break // what there is, up to the end of this history
			}
			return nil, err
		}
		if count > 0 && len(list)+len(es[0]) > maxEntriesBytes {
			break
		}
		list = binary.AppendUvarint(list, uint64(len(es[0])))
		list = append(list, es[0]...)
		count++
	}
	out = binary.AppendUvarint(out, count)
	return append(out, list...), nil
}

func decodeEntries(b []byte, most int64) ([][]byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n == 0 || n > uint64(most) || n > uint64(len(b)) {
		return nil, fmt.Errorf("auditor: malformed entries answer (%d entries)", n)
	}
	b = b[k:]
	out := make([][]byte, 0, n)
	for range n {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return nil, errors.New("auditor: malformed entries answer")
		}
		out = append(out, b[k:k+int(l)])
		b = b[k+int(l):]
	}
	if len(b) != 0 {
		return nil, errors.New("auditor: malformed entries answer: trailing bytes")
	}
	return out, nil
}

// PeerEntries fetches entries [from, to) of the auditor at addr's
// history, or as many of the first of them as one answer carries.
func (n *Node) PeerEntries(ctx context.Context, addr string, from, to int64) ([][]byte, error) {
	if n.fwd == nil {
		return nil, errors.New("auditor: fetching history needs the TLS transport")
	}
	if from < 0 || to <= from {
		return nil, fmt.Errorf("auditor: no entries in [%d, %d)", from, to)
	}
	body, _, err := n.fwd.call(ctx, addr, opEntries, encodeRange(from, to))
	var ns errNotSent
	if errors.As(err, &ns) {
		return nil, fmt.Errorf("auditor: reach %s: %w", addr, ns.err)
	}
	if err != nil {
		return nil, err
	}
	return decodeEntries(body, to-from)
}

// historyPeers returns the other auditors to fetch history from: the
// leader and the raft configuration once raft runs; the configuration of
// the latest snapshot in the store (the one being installed) and of the
// one the node started from; and the configured peers and join addresses.
func (n *Node) historyPeers() []Peer {
	var servers []raft.Server
	if n.mux != nil {
		servers = n.mux.peers.servers()
	}
	seen := map[string]bool{n.cfg.NodeID: true, string(n.localAddr): true}
	var out []Peer
	add := func(id, addr string) {
		if !seen[id] && !seen[addr] && addr != "" {
			seen[id], seen[addr] = true, true
			out = append(out, Peer{ID: id, Addr: addr})
		}
	}
	if r := n.started.Load(); r != nil {
		// A snapshot being installed: the configuration may be empty
		// until it is restored, but the leader sending it is known.
		addr, id := r.LeaderWithID()
		add(string(id), string(addr))
	}
	for _, s := range servers {
		add(string(s.ID), string(s.Address))
	}
	// A snapshot being installed is in the store before it is restored,
	// with the configuration it was taken in.
	latest, _ := snapshotPeers(n.snaps)
	for _, p := range append(latest, n.fsm.startPeers...) {
		add(p.ID, p.Addr)
	}
	for _, p := range n.cfg.Peers {
		add(p.ID, p.Addr)
	}
	for i, addr := range n.cfg.Join {
		add(fmt.Sprintf("join address %d", i+1), addr)
	}
	return out
}

// fetchEntries asks each other auditor in turn for entries from on, each
// within the forwarding timeout; the first that gives some is the answer.
func (n *Node) fetchEntries(ctx context.Context, from, to int64) ([][]byte, error) {
	var errs []string
	for _, p := range n.historyPeers() {
		pctx, cancel := context.WithTimeout(ctx, n.cfg.forwardTimeout())
		es, err := n.PeerEntries(pctx, p.Addr, from, to)
		cancel()
		if err == nil {
			return es, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		errs = append(errs, p.ID+": "+err.Error())
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("%w: this auditor knows no other auditor; start it with its peers configured", ErrNoHistory)
	}
	return nil, fmt.Errorf("%w (entries from %d): %s", ErrNoHistory, from, strings.Join(errs, "; "))
}

// snapshotPeers returns the voters of the latest snapshot in snaps and
// how many snapshots snaps keeps.
func snapshotPeers(snaps raft.SnapshotStore) (peers []Peer, kept int) {
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		return nil, 0
	}
	for _, s := range list[0].Configuration.Servers {
		peers = append(peers, Peer{ID: string(s.ID), Addr: string(s.Address)})
	}
	return peers, len(list)
}

// restore hands a snapshot to the state machine; see HistoryRestorer.
func (f *fsm) restore(rc io.Reader) error {
	b, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("auditor: read snapshot: %w", err)
	}
	hr, ok := f.sm.(HistoryRestorer)
	if !ok {
		if err := f.sm.Restore(b); err != nil {
			return fmt.Errorf("auditor: restore state machine from snapshot: %w", err)
		}
		return nil
	}
	own := f.ownLeft.Add(-1) >= 0
	f.restoring.Store(&restoreStatus{})
	err = hr.RestoreHistory(f.ctx, b, own, f.peers)
	f.restoring.Store(nil)
	if err != nil {
		err = fmt.Errorf("auditor: restore state machine from snapshot: %w", err)
		f.restoreErr.Store(&err)
		return err
	}
	f.restoreErr.Store(nil)
	f.ownLeft.Store(0)
	return nil
}

// restoreStatus is how far a restore has fetched the history.
type restoreStatus struct{ have, total int64 }

// nodePeers are a node's HistoryPeers, noting in its fsm how far a
// restore has fetched.
type nodePeers struct{ n *Node }

func (p nodePeers) Entries(ctx context.Context, from, to int64) ([][]byte, error) {
	f := p.n.fsm
	f.restoring.Store(&restoreStatus{have: from, total: to})
	es, err := p.n.fetchEntries(ctx, from, to)
	f.restoring.Store(&restoreStatus{have: from + int64(len(es)), total: to})
	return es, err
}

func (p nodePeers) Checkpoints(ctx context.Context, size uint64) [][]byte {
	var out [][]byte
	for _, peer := range p.n.historyPeers() {
		pctx, cancel := context.WithTimeout(ctx, p.n.cfg.forwardTimeout())
		if cp, err := p.n.PeerCheckpoint(pctx, peer.Addr, size); err == nil {
			out = append(out, cp)
		}
		cancel()
	}
	return out
}

// restoreState says what a snapshot restore holds the node back for:
// nil when none is under way and the last succeeded.
func (f *fsm) restoreState() error {
	if p := f.restoring.Load(); p != nil {
		if p.total == 0 {
			return errors.New("auditor: restoring a snapshot: replaying the history here")
		}
		return fmt.Errorf("auditor: restoring a snapshot: fetching history, %d of %d entries", p.have, p.total)
	}
	if e := f.restoreErr.Load(); e != nil {
		return *e
	}
	return nil
}
