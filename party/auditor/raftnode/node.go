package raftnode

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	retry "github.com/nzcfed/nzc/internal/backoff"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Node is one auditor: a raft server replicating a StateMachine.
//
// New opens the data directory, starts raft and listens; Run bootstraps or
// joins as configured and serves until its context ends. Submit, Join,
// Remove and Status may be called from any goroutine once New returns.
type Node struct {
	cfg  Config
	log  *slog.Logger
	raft *raft.Raft
	fsm  *fsm
	// started is raft once NewRaft returned, for the state machine's
	// goroutine (which raft starts before).
	started atomic.Pointer[raft.Raft]
	met     *metrics

	logs   raft.LogStore
	stable raft.StableStore
	snaps  raft.SnapshotStore

	localAddr raft.ServerAddress
	mux       *muxListener   // nil for an in-memory transport
	fwd       *forwardClient // nil when forwarding is off

	hadState bool // raft state existed when the node started
	// startCmd is the index of the last command in the log when the node
	// started (0 if none): Replayed waits for the state machine to reach it.
	startCmd uint64

	proposals chan *proposal // submissions for the leader's proposer
	budget    *peerBudget    // bytes each other auditor may have the leader screen

	lifetime context.Context
	stop     context.CancelFunc
	wg       sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
	closers   []func() error

	readyMu     sync.Mutex
	readyTarget uint64 // commit index when a leader was first seen
	readyKnown  bool
}

// deps are the pieces of a node that tests replace with in-memory ones.
type deps struct {
	logs    raft.LogStore
	stable  raft.StableStore
	snaps   raft.SnapshotStore
	trans   raft.Transport
	mux     *muxListener
	client  *tls.Config
	closers []func() error

	trailingLogs uint64 // raft TrailingLogs; zero keeps raft's default
}

// logCacheSize is how many recent raft entries a node keeps in memory.
const logCacheSize = 1024

// Files inside Config.DataDir.
const (
	raftDBFile   = "raft.db"
	snapshotsDir = "snapshots"
)

// New validates cfg, opens (or creates) the data directory, starts raft
// and listens on cfg.BindAddr. A data directory that cannot be read
// faithfully yields a *CorruptDataError naming the file; the node never
// starts empty over existing state.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("auditor: create data directory: %w", err)
	}
	store, err := openBoltStore(filepath.Join(cfg.DataDir, raftDBFile))
	if err != nil {
		return nil, err
	}
	// The leader reads every entry back to replicate it to each follower:
	// keep the recent ones in memory instead of reading them from bbolt.
	cached, err := raft.NewLogCache(logCacheSize, store)
	if err != nil {
		_ = store.Close()
		return nil, fmt.Errorf("auditor: log cache: %w", err)
	}
	d := deps{logs: cached, stable: store, closers: []func() error{store.Close}}
	fail := func(err error) (*Node, error) {
		for _, c := range d.closers {
			_ = c()
		}
		return nil, err
	}
	snaps, err := openSnapshots(cfg.DataDir, cfg.snapshotRetain(), newHclog(log, "raft-snapshots"))
	if err != nil {
		return fail(err)
	}
	d.snaps = snaps

	var adv net.Addr
	if cfg.AdvertiseAddr != "" {
		if adv, err = net.ResolveTCPAddr("tcp", cfg.AdvertiseAddr); err != nil {
			return fail(&ConfigError{"AdvertiseAddr", err.Error()})
		}
	}
	mux, err := newMuxListener(cfg.BindAddr, adv, cfg.ServerTLS, log)
	if err != nil {
		return fail(err)
	}
	d.mux = mux
	d.client = clientTLS(cfg.ClientTLS)
	d.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  &streamLayer{m: mux, client: d.client},
		MaxPool: 4,
		Timeout: 10 * time.Second,
		Logger:  newHclog(log, "raft-net"),
	})
	d.closers = append(d.closers, d.trans.(*raft.NetworkTransport).Close)
	n, err := newNode(cfg, log, d)
	if err != nil {
		return fail(err)
	}
	return n, nil
}

// openSnapshots opens the snapshot store and reads every retained snapshot
// through its checksum, so a damaged one stops the start instead of being
// skipped (raft would fall back to an older snapshot or to an empty state).
func openSnapshots(dataDir string, retain int, log hclog.Logger) (*raft.FileSnapshotStore, error) {
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dataDir, retain, log)
	if err != nil {
		return nil, fmt.Errorf("auditor: open snapshot store: %w", err)
	}
	dir := filepath.Join(dataDir, snapshotsDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, &CorruptDataError{Path: dir, Err: err}
	}
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		_, rc, err := snaps.Open(e.Name())
		if err != nil {
			return nil, &CorruptDataError{Path: filepath.Join(dir, e.Name()), Err: err}
		}
		_ = rc.Close()
	}
	return snaps, nil
}

func newNode(cfg Config, log *slog.Logger, d deps) (*Node, error) {
	hasState, err := raft.HasExistingState(d.logs, d.stable, d.snaps)
	if err != nil {
		return nil, fmt.Errorf("auditor: read raft state: %w", err)
	}
	n := &Node{
		cfg:       cfg,
		log:       log,
		logs:      d.logs,
		stable:    d.stable,
		snaps:     d.snaps,
		mux:       d.mux,
		localAddr: d.trans.LocalAddr(),
		hadState:  hasState,
		closers:   d.closers,
	}
	if n.startCmd, err = lastCommand(d.logs); err != nil {
		return nil, &CorruptDataError{Path: filepath.Join(cfg.DataDir, raftDBFile), Err: err}
	}
	if d.mux != nil {
		n.fwd = &forwardClient{tls: d.client, idle: map[string][]*fwdConn{}}
	}
	n.lifetime, n.stop = context.WithCancel(context.Background())
	n.budget = newPeerBudget(cfg.peerBytes(), cfg.Now)
	n.met = newMetrics(n)
	n.fsm = &fsm{sm: cfg.StateMachine, onBatch: n.met.observeBatch, ctx: n.lifetime}
	n.fsm.peers = nodePeers{n}
	// Raft restores the latest snapshot of this node's own store first,
	// when there is one; any later restore is a snapshot a leader sent.
	peers, kept := snapshotPeers(d.snaps)
	n.fsm.startPeers = peers
	n.fsm.ownLeft.Store(int64(kept))

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = newHclog(log, "raft")
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = maxAppendEntries
	rc.NoLegacyTelemetry = true
	rc.SnapshotThreshold = cfg.snapshotThreshold()
	if d.trailingLogs > 0 {
		rc.TrailingLogs = d.trailingLogs
	}
	if cfg.TrailingLogs > 0 {
		rc.TrailingLogs = cfg.TrailingLogs
	}
	rc.HeartbeatTimeout = durationOr(cfg.HeartbeatTimeout, defaultTimeout)
	rc.ElectionTimeout = durationOr(cfg.ElectionTimeout, defaultTimeout)
	rc.LeaderLeaseTimeout = min(rc.LeaderLeaseTimeout, rc.HeartbeatTimeout)
	rc.CommitTimeout = min(commitNotice, rc.HeartbeatTimeout/4)

	r, err := raft.NewRaft(rc, n.fsm, d.logs, d.stable, d.snaps, d.trans)
	if err != nil {
		n.stop()
		if e := n.fsm.restoreErr.Load(); e != nil {
			// The snapshot is intact; what it needs is not here.
			return nil, *e
		}
		if strings.Contains(err.Error(), "snapshot") {
			return nil, &CorruptDataError{Path: filepath.Join(cfg.DataDir, snapshotsDir), Err: err}
		}
		return nil, fmt.Errorf("auditor: start raft: %w", err)
	}
	n.raft = r
	n.started.Store(r)
	if d.mux != nil {
		d.mux.peers.set(fromRaft(r))
	}
	if cfg.MaxPacked != 1 {
		n.proposals = make(chan *proposal, maxBatchCommands)
		n.wg.Add(1)
		go n.propose()
	}
	if d.mux != nil {
		n.wg.Add(1)
		go n.serveForward(d.mux.fwdConns, d.mux.closed)
	}
	n.log.Info("auditor started", "node", cfg.NodeID, "addr", n.Addr(), "existing_state", hasState)
	return n, nil
}

func durationOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func (c *Config) snapshotThreshold() uint64 {
	if c.SnapshotThreshold == 0 {
		return defaultSnapshotThreshold
	}
	return c.SnapshotThreshold
}

func (c *Config) snapshotRetain() int {
	if c.SnapshotRetain == 0 {
		return defaultSnapshotRetain
	}
	return c.SnapshotRetain
}

// Addr is the address other auditors dial to reach this node.
func (n *Node) Addr() string { return string(n.localAddr) }

// ListenAddr is the address raft and the forwarding RPC are bound to, which
// differs from Addr when an advertised address (a proxy or a relay in front
// of this node) is configured; empty for an in-memory transport.
func (n *Node) ListenAddr() string {
	if n.mux == nil {
		return ""
	}
	return n.mux.ln.Addr().String()
}

// notLeader is the error for a leader-only operation on a follower.
func (n *Node) notLeader() error {
	addr, id := n.raft.LeaderWithID()
	if addr == "" {
		return ErrNoLeader
	}
	return &NotLeaderError{LeaderID: string(id), LeaderAddr: string(addr)}
}

// Run bootstraps or joins the cluster as configured, then serves until ctx
// ends, and shuts the node down.
func (n *Node) Run(ctx context.Context) error {
	switch {
	case n.cfg.Bootstrap:
		if err := n.Bootstrap(n.cfg.Peers); err != nil {
			_ = n.Close()
			return err
		}
	case len(n.cfg.Join) > 0 && !n.hadState:
		if err := n.joinCluster(ctx); err != nil {
			_ = n.Close()
			return err
		}
	}
	<-ctx.Done()
	return n.Close()
}

// Bootstrap starts a new cluster whose voters are peers plus this node. It
// is a no-op on a node that already has raft state, so every founding
// auditor may call it with the same peers, and calling it again after a
// restart changes nothing.
func (n *Node) Bootstrap(peers []Peer) error {
	servers := []raft.Server{}
	self := false
	for _, p := range peers {
		if p.ID == n.cfg.NodeID {
			self = true
		}
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
	}
	if !self {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(n.cfg.NodeID), Address: raft.ServerAddress(n.Addr())})
	}
	err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	switch {
	case err == nil:
		n.log.Info("bootstrapped a new cluster", "voters", len(servers))
		return nil
	case errors.Is(err, raft.ErrCantBootstrap):
		n.log.Info("not bootstrapping: raft state already exists")
		return nil
	default:
		return fmt.Errorf("auditor: bootstrap: %w", err)
	}
}

// joinCluster asks the configured auditors, in turn, to add this node, until
// one accepts or ctx ends.
func (n *Node) joinCluster(ctx context.Context) error {
	var last error
	b := backoff{}
	for {
		for _, addr := range n.cfg.Join {
			actx, cancel := context.WithTimeout(ctx, n.cfg.applyTimeout())
			err := n.joinVia(actx, addr, n.cfg.NodeID, n.Addr())
			cancel()
			if err == nil {
				n.log.Info("joined the cluster", "via", addr)
				return nil
			}
			last = err
			n.log.Warn("join attempt failed; will retry", "via", addr, "error", err)
		}
		if err := b.wait(ctx); err != nil {
			return fmt.Errorf("auditor: could not join via %v: %w (last error: %v)", n.cfg.Join, err, last)
		}
	}
}

// joinVia sends a join request to addr, following one not-leader redirect.
func (n *Node) joinVia(ctx context.Context, addr, id, self string) error {
	for range 3 {
		_, _, err := n.fwd.call(ctx, addr, opJoin, encodePair(id, self))
		var nl *NotLeaderError
		if errors.As(err, &nl) && nl.LeaderAddr != "" && nl.LeaderAddr != addr {
			addr = nl.LeaderAddr
			continue
		}
		return err
	}
	return ErrNoLeader
}

// Close shuts raft down and releases the data directory. It is safe to
// call more than once.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.stop()
		err := n.raft.Shutdown().Error()
		if n.fwd != nil {
			n.fwd.close()
		}
		if n.mux != nil {
			_ = n.mux.Close()
		}
		for _, c := range n.closers {
			if cerr := c(); cerr != nil && err == nil {
				err = cerr
			}
		}
		n.wg.Wait()
		if n.mux != nil {
			n.mux.wait()
		}
		n.closeErr = err
		n.log.Info("auditor stopped", "node", n.cfg.NodeID)
	})
	return n.closeErr
}

// Submit replicates cmd and returns the state machine's result and the raft
// index it was applied at. On a follower the command is forwarded to the
// leader; with no forwarding (in-memory transport) a follower returns a
// *NotLeaderError. A refusal by the state machine is a *RejectedError.
func (n *Node) Submit(ctx context.Context, cmd []byte) ([]byte, uint64, error) {
	if len(cmd) > n.cfg.maxCommand() { // refused here, not forwarded
		return nil, 0, fmt.Errorf("%w: %d bytes, the limit is %d", ErrCommandTooLarge, len(cmd), n.cfg.maxCommand())
	}
	start := time.Now()
	res, idx, err := n.submit(ctx, cmd)
	n.met.observeSubmit(time.Since(start), err)
	return res, idx, err
}

func (n *Node) submit(ctx context.Context, cmd []byte) ([]byte, uint64, error) {
	b := backoff{}
	var lastErr error = ErrNoLeader
	for {
		if n.lifetime.Err() != nil {
			return nil, 0, ErrShutdown
		}
		addr, id := n.raft.LeaderWithID()
		switch {
		case n.raft.State() == raft.Leader:
			res, idx, err := n.applyLocal(ctx, n.cfg.NodeID, cmd)
			var nl *NotLeaderError
			if !errors.Is(err, raft.ErrNotLeader) && !errors.Is(err, ErrNoLeader) && !errors.As(err, &nl) {
				return res, idx, err
			}
			// Leadership moved before the command was enqueued: go round.
			lastErr = ErrNoLeader
		case addr == "":
			lastErr = ErrNoLeader
		case n.fwd == nil:
			return nil, 0, &NotLeaderError{LeaderID: string(id), LeaderAddr: string(addr)}
		default:
			res, idx, err := n.fwd.call(ctx, string(addr), opSubmit, cmd)
			var nl *NotLeaderError
			var ns errNotSent
			switch {
			case errors.As(err, &nl), errors.Is(err, ErrNoLeader), errors.Is(err, ErrShutdown):
				// Nothing was enqueued: the leader moved, or it is stopping.
				lastErr = ErrNoLeader
			case errors.As(err, &ns):
				lastErr = fmt.Errorf("%w: cannot reach leader %s at %s: %v", ErrNoLeader, id, addr, ns.err)
			default:
				return res, idx, err
			}
		}
		if err := b.wait(ctx); err != nil {
			return nil, 0, lastErr
		}
	}
}

// applyLocal applies cmd, submitted through auditor peer, through raft on
// this node, which must be leader. A raft.ErrNotLeader return means nothing
// was appended. A command over the limit, or one Config.Screen refuses, is
// refused before it is proposed.
func (n *Node) applyLocal(ctx context.Context, peer string, cmd []byte) ([]byte, uint64, error) {
	if len(cmd) > n.cfg.maxCommand() {
		return nil, 0, fmt.Errorf("%w: %d bytes, the limit is %d", ErrCommandTooLarge, len(cmd), n.cfg.maxCommand())
	}
	if n.raft.State() != raft.Leader {
		return nil, 0, n.notLeader()
	}
	if peer != n.cfg.NodeID {
		if err := n.budget.take(peer, len(cmd)); err != nil {
			return nil, 0, err
		}
	}
	if n.cfg.Screen != nil {
		if refusal := n.cfg.Screen.Screen(peer, cmd); refusal != nil {
			return nil, 0, &NotProposedError{Refusal: refusal}
		}
	}
	timeout := n.cfg.applyTimeout()
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
		if timeout <= 0 {
			return nil, 0, fmt.Errorf("%w: %w", ErrTimeout, context.DeadlineExceeded)
		}
	}
	var out proposed
	var err error
	if n.cfg.MaxPacked == 1 {
		out, err = n.applyUnpacked(ctx, cmd, timeout)
	} else {
		out, err = n.enqueue(ctx, cmd, timeout)
	}
	if err != nil {
		return nil, 0, err
	}
	err = out.err
	switch {
	case err == nil:
	case errors.Is(err, raft.ErrNotLeader):
		return nil, 0, err
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return nil, 0, fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return nil, 0, ErrShutdown
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return nil, 0, fmt.Errorf("%w: %v", ErrTimeout, err)
	default:
		return nil, 0, fmt.Errorf("auditor: apply: %w", err)
	}
	if out.res.err != nil {
		return nil, out.index, &RejectedError{Index: out.index, Err: out.res.err}
	}
	return out.res.data, out.index, nil
}

// Join adds the auditor id at addr as a voter. Joining again with the same
// id and address is a no-op, and a known id with a new address moves it
// there. A join never removes or displaces another server: an address
// another server holds gives a *DisplaceError, and one Config.Federation
// does not admit an error matching ErrMembership; neither changes the
// membership.
func (n *Node) Join(ctx context.Context, id, addr string) error {
	if err := validID(id); err != nil {
		return &ConfigError{"id", err.Error()}
	}
	if err := validDialAddr(addr); err != nil && n.mux != nil {
		return &ConfigError{"addr", err.Error()}
	}
	return n.leaderOp(ctx, opJoin, encodePair(id, addr), func(ctx context.Context) error { return n.joinLocal(ctx, id, addr) })
}

// Remove takes the auditor id out of the cluster. Removing an absent id is
// a no-op.
func (n *Node) Remove(ctx context.Context, id string) error {
	return n.leaderOp(ctx, opRemove, []byte(id), func(ctx context.Context) error { return n.removeLocal(ctx, id) })
}

// RemoveSigned takes the auditor id out of the cluster on the proof of a
// quorum of the other auditors (Config.VerifyRemoval): the way to remove an
// auditor that has vanished, which cannot ask for its own removal. This
// node checks the proof before forwarding it, and the leader checks it
// again before it changes the membership; a proof that does not verify is
// an error matching ErrMembership and changes nothing.
func (n *Node) RemoveSigned(ctx context.Context, id string, proof []byte) error {
	if err := n.verifyRemoval(id, proof); err != nil {
		return err
	}
	return n.leaderOp(ctx, opRemoveSigned, encodePair(id, string(proof)), func(ctx context.Context) error { return n.removeLocal(ctx, id) })
}

func (n *Node) verifyRemoval(id string, proof []byte) error {
	if n.cfg.VerifyRemoval == nil {
		return fmt.Errorf("%w: this auditor checks no quorum-signed removals", ErrMembership)
	}
	if err := n.cfg.VerifyRemoval(id, proof); err != nil {
		return fmt.Errorf("%w: the removal of %q is not signed by a quorum: %w", ErrMembership, id, err)
	}
	return nil
}

// leaderOp runs local on the leader, or forwards op to it.
func (n *Node) leaderOp(ctx context.Context, op byte, body []byte, local func(context.Context) error) error {
	b := backoff{}
	for {
		addr, id := n.raft.LeaderWithID()
		var err error
		switch {
		case n.raft.State() == raft.Leader:
			err = local(ctx)
		case addr == "":
			err = ErrNoLeader
		case n.fwd == nil:
			return &NotLeaderError{LeaderID: string(id), LeaderAddr: string(addr)}
		default:
			_, _, err = n.fwd.call(ctx, string(addr), op, body)
		}
		var nl *NotLeaderError
		var ns errNotSent
		if !errors.Is(err, ErrNoLeader) && !errors.As(err, &nl) && !errors.As(err, &ns) && !errors.Is(err, ErrShutdown) {
			return err
		}
		if n.lifetime.Err() != nil {
			return ErrShutdown
		}
		if werr := b.wait(ctx); werr != nil {
			return err
		}
	}
}

func (n *Node) configuration() ([]raft.Server, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, mapRaftErr(err)
	}
	return f.Configuration().Servers, nil
}

func (n *Node) joinLocal(ctx context.Context, id, addr string) error {
	if err := validID(id); err != nil {
		return &ConfigError{"id", err.Error()}
	}
	if n.raft.State() != raft.Leader {
		return n.notLeader()
	}
	servers, err := n.configuration()
	if err != nil {
		return err
	}
	for _, s := range servers {
		if s.ID == raft.ServerID(id) && s.Address == raft.ServerAddress(addr) {
			return nil
		}
		if s.Address == raft.ServerAddress(addr) {
			return &DisplaceError{ID: id, Addr: addr, Holder: string(s.ID)}
		}
	}
	if f := n.cfg.Federation; f != nil {
		if err := f.AdmitJoin(id, addr); err != nil {
			return fmt.Errorf("%w: the federation does not place auditor %q at %s: %w", ErrMembership, id, addr, err)
		}
	}
	// AddVoter with a known id moves that server to addr; it never takes
	// another server out.
	timeout := ctxTimeout(ctx, n.cfg.applyTimeout())
	if err := n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout).Error(); err != nil {
		return mapRaftErr(err)
	}
	n.log.Info("auditor joined", "id", id, "addr", addr)
	return nil
}

func (n *Node) removeLocal(ctx context.Context, id string) error {
	if n.raft.State() != raft.Leader {
		return n.notLeader()
	}
	servers, err := n.configuration()
	if err != nil {
		return err
	}
	for _, s := range servers {
		if s.ID == raft.ServerID(id) {
			if err := n.raft.RemoveServer(s.ID, 0, ctxTimeout(ctx, n.cfg.applyTimeout())).Error(); err != nil {
				return mapRaftErr(err)
			}
			n.log.Info("auditor removed", "id", id)
			return nil
		}
	}
	return nil
}

func ctxTimeout(ctx context.Context, def time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Until(dl), time.Millisecond)
	}
	return def
}

func mapRaftErr(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader):
		return ErrNoLeader
	case errors.Is(err, raft.ErrLeadershipLost):
		return fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrShutdown
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %v", ErrTimeout, err)
	default:
		return fmt.Errorf("auditor: raft: %w", err)
	}
}

// Status is a point-in-time view of this node.
type Status struct {
	ID           string `json:"id"`
	Addr         string `json:"addr"`
	State        string `json:"state"`
	LeaderID     string `json:"leader_id"`
	LeaderAddr   string `json:"leader_addr"`
	Term         uint64 `json:"term"`
	LastIndex    uint64 `json:"last_index"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	Peers        []Peer `json:"peers"`
}

// Status reports this node's raft state and the cluster membership it knows.
func (n *Node) Status() Status {
	addr, id := n.raft.LeaderWithID()
	st := Status{
		ID:           n.cfg.NodeID,
		Addr:         n.Addr(),
		State:        n.raft.State().String(),
		LeaderID:     string(id),
		LeaderAddr:   string(addr),
		Term:         n.raft.CurrentTerm(),
		LastIndex:    n.raft.LastIndex(),
		CommitIndex:  n.commitIndex(),
		AppliedIndex: n.raft.AppliedIndex(),
	}
	if servers, err := n.configuration(); err == nil {
		for _, s := range servers {
			st.Peers = append(st.Peers, Peer{ID: string(s.ID), Addr: string(s.Address)})
		}
	}
	return st
}

func (n *Node) commitIndex() uint64 {
	v, _ := strconv.ParseUint(n.raft.Stats()["commit_index"], 10, 64)
	return v
}

// Ready reports whether the node serves reads: no snapshot is being
// restored (the error says how far the history has been fetched) and the
// last one restored, it knows a leader, and it has applied everything
// committed when it first learned of one.
func (n *Node) Ready() error {
	if n.lifetime.Err() != nil {
		return ErrShutdown
	}
	if err := n.fsm.restoreState(); err != nil {
		return err
	}
	if addr, _ := n.raft.LeaderWithID(); addr == "" {
		return ErrNoLeader
	}
	n.readyMu.Lock()
	if !n.readyKnown {
		n.readyTarget, n.readyKnown = n.commitIndex(), true
	}
	target := n.readyTarget
	n.readyMu.Unlock()
	if applied := n.raft.AppliedIndex(); applied < target {
		return fmt.Errorf("auditor: catching up: applied %d of %d committed entries", applied, target)
	}
	return nil
}

// maxCommandScan bounds how far back from the end of the log lastCommand
// looks for a command (past configuration changes and leaders' no-ops).
const maxCommandScan = 4096

// lastCommand returns the index of the last command in logs, or 0 when
// none is among the last maxCommandScan entries.
func lastCommand(logs raft.LogStore) (uint64, error) {
	first, err := logs.FirstIndex()
	if err != nil {
		return 0, err
	}
	last, err := logs.LastIndex()
	if err != nil {
		return 0, err
	}
	for i := last; i >= first && i > 0 && last-i < maxCommandScan; i-- {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			return 0, fmt.Errorf("read log entry %d: %w", i, err)
		}
		if l.Type == raft.LogCommand {
			return i, nil
		}
	}
	return 0, nil
}

// Replayed reports whether the state machine has applied every command
// this node's log held when it started. After a restart a node can know a
// leader, and raft's applied index can pass those commands, before the
// state machine has seen them; wait for Replayed before acting on the
// state's contents. Commands that were never committed, and that a new
// leader drops, are never applied: bound the wait.
func (n *Node) Replayed() bool {
	if n.fsm.applied.Load() >= n.startCmd {
		return true
	}
	snap, _ := strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64)
	return snap >= n.startCmd
}

// CheckpointProvider is implemented by a StateMachine that signs
// checkpoints (the ledger). Checkpoint returns this auditor's signed
// checkpoint for the given tree size, or the latest one when treeSize is 0.
type CheckpointProvider interface {
	Checkpoint(treeSize uint64) ([]byte, error)
}

// commitNotice is how long the leader lets followers go without learning
// its commit index when no new entry carries it (raft's CommitTimeout,
// 50 ms by default, staggered up to twice that). A follower applies, and so
// can cosign, an entry only once it learns it is committed, and a release
// waits for a majority's cosignature: a lone charge's receipt took 50–100
// ms for this alone. The cost is an empty AppendEntries to each follower
// every 5–10 ms while the log is idle.
const commitNotice = 5 * time.Millisecond

// CheckpointWaiter is implemented by a CheckpointProvider that can wait
// for a tree size it has not applied yet. A peer's request for such a size
// (the leader gathering cosignatures on entries just committed) is then
// answered once this node has applied them, within peerCheckpointWait,
// instead of being refused and asked again.
type CheckpointWaiter interface {
	WaitCheckpoint(ctx context.Context, treeSize uint64) ([]byte, error)
}

// peerCheckpointWait bounds how long a peer's checkpoint request waits for
// this node to apply the size it asks for.
const peerCheckpointWait = time.Second

// Checkpoint returns this node's signed checkpoint (see CheckpointProvider).
func (n *Node) Checkpoint(treeSize uint64) ([]byte, error) {
	return n.localCheckpoint(binary.AppendUvarint(nil, treeSize))
}

// PeerCheckpoint fetches the signed checkpoint of the auditor at addr.
func (n *Node) PeerCheckpoint(ctx context.Context, addr string, treeSize uint64) ([]byte, error) {
	if n.fwd == nil {
		return nil, errors.New("auditor: peer checkpoints need the TLS transport")
	}
	cp, _, err := n.fwd.call(ctx, addr, opCheckpoint, binary.AppendUvarint(nil, treeSize))
	var ns errNotSent
	if errors.As(err, &ns) {
		return nil, fmt.Errorf("auditor: reach %s: %w", addr, ns.err) // ErrPeerUnreachable when no connection was made
	}
	return cp, err
}

func (n *Node) localCheckpoint(body []byte) ([]byte, error) {
	cp, ok := n.cfg.StateMachine.(CheckpointProvider)
	if !ok {
		return nil, errors.New("auditor: this state machine does not sign checkpoints")
	}
	size, k := binary.Uvarint(body)
	if k <= 0 || k != len(body) {
		return nil, errors.New("auditor: malformed checkpoint request")
	}
	return cp.Checkpoint(size)
}

// peerCheckpoint answers a peer's checkpoint request, waiting a little for
// a size not applied yet when the state machine can.
func (n *Node) peerCheckpoint(ctx context.Context, body []byte) ([]byte, error) {
	w, ok := n.cfg.StateMachine.(CheckpointWaiter)
	size, k := binary.Uvarint(body)
	if !ok || k <= 0 || k != len(body) {
		return n.localCheckpoint(body)
	}
	ctx, cancel := context.WithTimeout(ctx, peerCheckpointWait)
	defer cancel()
	return w.WaitCheckpoint(ctx, size)
}

// backoff waits between retries: 5ms doubling to 200ms.
type backoff struct{ attempt int }

func (b *backoff) wait(ctx context.Context) error {
	b.attempt++
	return retry.Wait(ctx, retry.Ceiling(b.attempt, 5*time.Millisecond, 200*time.Millisecond))
}
