package raftnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nzcfed/nzc/party/auditor/internal/auditortest"
)

// inmemCluster is a raft cluster on in-memory transports and stores.
type inmemCluster struct {
	t      testing.TB
	mu     sync.Mutex // guards nodes against concurrent stop and leader
	nodes  []*Node    // nil once stopped
	sms    []*chainSM
	trans  []*raft.InmemTransport
	logs   []*raft.InmemStore
	snaps  []*raft.InmemSnapshotStore
	ids    []string
	tuning deps
}

func fastConfig(id string, sm StateMachine, log *slog.Logger) Config {
	return Config{
		NodeID:       id,
		StateMachine: sm,
		Logger:       log,
		Tuning: Tuning{
			HeartbeatTimeout: 250 * time.Millisecond,
			ElectionTimeout:  250 * time.Millisecond,
			ApplyTimeout:     2 * time.Second,
		},
	}
}

func newInmemCluster(t testing.TB, size int, tuning deps, snapshotThreshold uint64) *inmemCluster {
	t.Helper()
	c := &inmemCluster{t: t, tuning: tuning}
	var peers []Peer
	for i := range size {
		c.addMember()
		peers = append(peers, Peer{ID: c.ids[i], Addr: string(c.trans[i].LocalAddr())})
	}
	for i := range size {
		c.start(i, snapshotThreshold)
	}
	for _, n := range c.nodes {
		if err := n.Bootstrap(peers); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.stopAll)
	c.waitLeader()
	return c
}

// addMember creates the stores and transport for one more node, connected
// to every existing transport.
func (c *inmemCluster) addMember() int {
	i := len(c.ids)
	addr, tr := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("inmem-%d", i)))
	for j, o := range c.trans {
		tr.Connect(o.LocalAddr(), o)
		o.Connect(addr, tr)
		_ = j
	}
	c.ids = append(c.ids, fmt.Sprintf("a%d", i))
	c.trans = append(c.trans, tr)
	store := raft.NewInmemStore()
	c.logs = append(c.logs, store)
	c.snaps = append(c.snaps, raft.NewInmemSnapshotStore())
	c.sms = append(c.sms, newChainSM())
	c.nodes = append(c.nodes, nil)
	return i
}

func (c *inmemCluster) start(i int, snapshotThreshold uint64) {
	c.t.Helper()
	cfg := fastConfig(c.ids[i], c.sms[i], auditortest.Logger(c.t).With("node", c.ids[i]))
	cfg.SnapshotThreshold = snapshotThreshold
	d := c.tuning
	d.logs, d.stable, d.snaps, d.trans = c.logs[i], c.logs[i], c.snaps[i], c.trans[i]
	n, err := newNode(cfg, cfg.Logger, d)
	if err != nil {
		c.t.Fatal(err)
	}
	c.nodes[i] = n
}

func (c *inmemCluster) stop(i int) {
	c.mu.Lock()
	n := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if n != nil {
		_ = n.Close()
	}
}

func (c *inmemCluster) stopAll() {
	for i := range c.nodes {
		c.stop(i)
	}
}

// leader returns the index of the live node that is leader, or -1.
func (c *inmemCluster) leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, n := range c.nodes {
		if n != nil && n.raft.State() == raft.Leader {
			return i
		}
	}
	return -1
}

func (c *inmemCluster) waitLeader() int {
	c.t.Helper()
	var l int
	auditortest.WaitFor(c.t, 10*time.Second, "a leader", func() bool { l = c.leader(); return l >= 0 })
	return l
}

// submit sends cmd to the current leader, retrying with the same command
// on every error that may be transient, until it is acknowledged.
func (c *inmemCluster) submit(ctx context.Context, cmd []byte) ([]byte, uint64, error) {
	b := backoff{}
	for {
		var n *Node
		c.mu.Lock()
		for _, m := range c.nodes {
			if m != nil && m.raft.State() == raft.Leader {
				n = m
			}
		}
		c.mu.Unlock()
		if n != nil {
			res, idx, err := n.Submit(ctx, cmd)
			var nl *NotLeaderError
			switch {
			case err == nil:
				return res, idx, nil
			case errors.As(err, &nl), errors.Is(err, ErrNoLeader), errors.Is(err, ErrShutdown),
				errors.Is(err, ErrOutcomeUnknown), errors.Is(err, ErrTimeout):
			default:
				return nil, 0, err
			}
		}
		if err := b.wait(ctx); err != nil {
			return nil, 0, err
		}
	}
}

// describe summarises every node's status for a failure message.
func (c *inmemCluster) describe() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for i, n := range c.nodes {
		if n == nil {
			fmt.Fprintf(&b, "[%s stopped] ", c.ids[i])
			continue
		}
		st := n.Status()
		fmt.Fprintf(&b, "[%s %s leader=%s term=%d last=%d commit=%d applied=%d] ", st.ID, st.State, st.LeaderID, st.Term, st.LastIndex, st.CommitIndex, st.AppliedIndex)
	}
	return b.String()
}

// submitIDs submits chainCmd(id, payload) for each id from from to to
// through submit, and fails the test on the first error.
func submitIDs(ctx context.Context, t testing.TB, submit func(context.Context, []byte) ([]byte, uint64, error), from, to uint64, payload string) {
	t.Helper()
	for id := from; id <= to; id++ {
		if _, _, err := submit(ctx, chainCmd(id, payload)); err != nil {
			t.Fatalf("submitting command %d: %v", id, err)
		}
	}
}

// converged reports whether the live nodes among nodes (nil ones are
// skipped) have applied the same index and hold the same state, and returns
// that state's hash. all and sms are the whole cluster's nodes and their
// state machines, in the same order.
func converged(nodes, all []*Node, sms []*chainSM) ([32]byte, bool) {
	var h [32]byte
	var idx uint64
	first := true
	for _, n := range nodes {
		if n == nil {
			continue
		}
		hi, ai := sms[slices.Index(all, n)].stateHash(), n.raft.AppliedIndex()
		if first {
			h, idx, first = hi, ai, false
		} else if hi != h || ai != idx {
			return h, false
		}
	}
	return h, true
}

// waitConverged waits until every live node has applied the same index and
// holds the same state, and returns that state's hash.
func (c *inmemCluster) waitConverged(within time.Duration) [32]byte {
	c.t.Helper()
	var h [32]byte
	auditortest.WaitFor(c.t, within, "all live nodes to converge", func() bool {
		var ok bool
		h, ok = converged(c.nodes, c.nodes, c.sms)
		return ok
	})
	return h
}

func TestLeaderLossDuringSubmissions(t *testing.T) {
	for _, size := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d-nodes", size), func(t *testing.T) {
			c := newInmemCluster(t, size, deps{}, 0)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			const writers, perWriter = 8, 40
			var acked atomic.Int64
			var killOnce sync.Once
			killed := make(chan int, 1)
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			for w := range writers {
				wg.Go(func() {
					for k := range perWriter {
						id := uint64(w*perWriter + k + 1)
						if _, _, err := c.submit(ctx, chainCmd(id, "charge")); err != nil {
							errs <- fmt.Errorf("id %d: %w; cluster: %s", id, err, c.describe())
							return
						}
						if acked.Add(1) == writers*perWriter/3 {
							killOnce.Do(func() {
								l := c.leader()
								if l >= 0 {
									c.stop(l)
								}
								killed <- l
							})
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if l := <-killed; l < 0 {
				t.Fatal("no leader to stop mid-stream")
			}
			c.waitConverged(10 * time.Second)
			for i, n := range c.nodes {
				if n == nil {
					continue
				}
				count, distinct, reordered := c.sms[i].snapshotCount()
				if count != writers*perWriter || distinct != writers*perWriter {
					t.Errorf("node %d: %d applied (%d distinct), want %d", i, count, distinct, writers*perWriter)
				}
				if reordered {
					t.Errorf("node %d applied an index twice or out of order", i)
				}
				for id := uint64(1); id <= writers*perWriter; id++ {
					if !c.sms[i].has(id) {
						t.Fatalf("node %d lost acknowledged command %d", i, id)
					}
				}
			}
		})
	}
}

// isolate cuts node i off from every other node, both ways.
func (c *inmemCluster) isolate(i int) {
	for j, o := range c.trans {
		if j != i {
			c.trans[i].Disconnect(o.LocalAddr())
			o.Disconnect(c.trans[i].LocalAddr())
		}
	}
}

func (c *inmemCluster) heal(i int) {
	for j, o := range c.trans {
		if j != i {
			c.trans[i].Connect(o.LocalAddr(), o)
			o.Connect(c.trans[i].LocalAddr(), c.trans[i])
		}
	}
}

func TestPartitionAndHeal(t *testing.T) {
	c := newInmemCluster(t, 3, deps{}, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	submitIDs(ctx, t, c.submit, 1, 20, "before")
	old := c.leader()
	c.isolate(old)

	// The isolated leader cannot commit: the command times out or loses
	// leadership, and must never appear in any state.
	octx, ocancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, _, err := c.nodes[old].Submit(octx, chainCmd(999, "minority"))
	ocancel()
	if err == nil {
		t.Fatal("a minority leader committed a command")
	}
	if !errors.Is(err, ErrTimeout) && !errors.Is(err, ErrOutcomeUnknown) && !errors.Is(err, ErrNoLeader) {
		t.Fatalf("minority submit: %v, want a timeout, outcome-unknown or no-leader error", err)
	}

	var nl int
	auditortest.WaitFor(t, 10*time.Second, "a new leader in the majority", func() bool {
		for i, n := range c.nodes {
			if i != old && n.raft.State() == raft.Leader {
				nl = i
				return true
			}
		}
		return false
	})
	submitIDs(ctx, t, c.nodes[nl].Submit, 21, 40, "during")
	c.heal(old)
	c.waitConverged(10 * time.Second)
	for i := range c.nodes {
		if c.sms[i].has(999) {
			t.Fatalf("node %d applied the uncommitted minority command", i)
		}
		if count, _, _ := c.sms[i].snapshotCount(); count != 40 {
			t.Fatalf("node %d has %d commands, want 40", i, count)
		}
	}
}

func TestSnapshotRestoreEquivalence(t *testing.T) {
	c := newInmemCluster(t, 3, deps{trailingLogs: 5}, 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	submitIDs(ctx, t, c.submit, 1, 100, "x")
	l := c.leader()
	if err := c.nodes[l].raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	if first, _ := c.logs[l].FirstIndex(); first <= 1 {
		t.Fatalf("log not compacted after snapshot: first index %d", first)
	}
	submitIDs(ctx, t, c.submit, 101, 110, "x")

	// A new node can only be brought up to date from the snapshot.
	i := c.addMember()
	c.start(i, 1<<20)
	if err := c.nodes[l].Join(ctx, c.ids[i], string(c.trans[i].LocalAddr())); err != nil {
		t.Fatal(err)
	}
	// Joining again with the same id and address changes nothing.
	before := c.nodes[l].raft.LastIndex()
	if err := c.nodes[l].Join(ctx, c.ids[i], string(c.trans[i].LocalAddr())); err != nil {
		t.Fatal(err)
	}
	if after := c.nodes[l].raft.LastIndex(); after != before {
		t.Fatalf("second join appended %d entries", after-before)
	}
	submitIDs(ctx, t, c.submit, 111, 120, "x")
	c.waitConverged(10 * time.Second)
	if c.sms[i].restores == 0 {
		t.Fatal("the new node was not restored from a snapshot")
	}
	// The leader applied every command from its log; its state equals the
	// restored node's (waitConverged compared the hashes).
	if c.sms[l].restores != 0 {
		t.Fatal("the leader restored a snapshot; it should have applied the log")
	}
	if st := c.nodes[l].Status(); len(st.Peers) != 4 {
		t.Fatalf("status lists %d peers, want 4: %+v", len(st.Peers), st.Peers)
	}

	// Remove is idempotent too.
	if err := c.nodes[l].Remove(ctx, c.ids[i]); err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[l].Remove(ctx, c.ids[i]); err != nil {
		t.Fatal(err)
	}
	if st := c.nodes[l].Status(); len(st.Peers) != 3 {
		t.Fatalf("after remove, status lists %d peers, want 3", len(st.Peers))
	}
}

func TestSubmitErrors(t *testing.T) {
	c := newInmemCluster(t, 3, deps{}, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := c.leader()
	_, idx, err := c.nodes[l].Submit(ctx, chainCmd(1, "reject"))
	var rej *RejectedError
	if !errors.As(err, &rej) || !errors.Is(err, errRejectPayload) || rej.Index != idx || idx == 0 {
		t.Fatalf("got (%d, %v), want a RejectedError carrying the index and the cause", idx, err)
	}
	f := (l + 1) % 3
	_, _, err = c.nodes[f].Submit(ctx, chainCmd(2, "x"))
	var nl *NotLeaderError
	if !errors.As(err, &nl) || nl.LeaderID != c.ids[l] {
		t.Fatalf("follower submit without forwarding: %v, want NotLeaderError naming %s", err, c.ids[l])
	}
	res, _, err := c.nodes[l].Submit(ctx, chainCmd(2, "x"))
	if err != nil || len(res) != 8 {
		t.Fatalf("submit: %x, %v", res, err)
	}
	c.stop(f)
	n := c.nodes[l]
	c.stop(l)
	if _, _, err := n.Submit(ctx, chainCmd(3, "x")); !errors.Is(err, ErrShutdown) {
		t.Fatalf("submit on a closed node: %v, want ErrShutdown", err)
	}
}

// TestReplayedAfterRestart: a node restarted over its log reports Replayed
// only once its state machine holds every command of that log, not when it
// merely knows it has them.
func TestReplayedAfterRestart(t *testing.T) {
	c := newInmemCluster(t, 3, deps{}, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const cmds = 5
	for id := uint64(1); id <= cmds; id++ {
		if _, _, err := c.submit(ctx, chainCmd(id, "x")); err != nil {
			t.Fatal(err)
		}
	}
	c.waitConverged(10 * time.Second)
	f := (c.leader() + 1) % 3
	if !c.nodes[f].Replayed() {
		t.Fatal("a running node that applied its log is not Replayed")
	}
	// Restart f with an empty state machine while it cannot reach anyone:
	// it has the commands in its log but cannot know they are committed.
	c.stop(f)
	c.sms[f] = newChainSM()
	c.isolate(f)
	c.start(f, 0)
	n := c.nodes[f]
	if n.Replayed() {
		t.Fatal("Replayed before the state machine has applied anything")
	}
	c.heal(f)
	auditortest.WaitFor(t, 20*time.Second, "the restarted node to replay its log", n.Replayed)
	for id := uint64(1); id <= cmds; id++ {
		if !c.sms[f].has(id) {
			t.Fatalf("Replayed, but the state machine lacks command %d", id)
		}
	}
	// A node that starts with no commands in its log has nothing to wait for.
	fresh := c.addMember()
	c.start(fresh, 0)
	if !c.nodes[fresh].Replayed() {
		t.Fatal("a node with an empty log is not Replayed")
	}
}
