package raftnode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// federationFunc is a Federation from a function.
type federationFunc func(id, addr string) error

func (f federationFunc) AdmitJoin(id, addr string) error { return f(id, addr) }

// peersOf returns the membership the node at i reports, sorted by id.
func (c *tlsCluster) peersOf(i int) []Peer {
	ps := c.nodes[i].Status().Peers
	slices.SortFunc(ps, func(a, b Peer) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	return ps
}

// One auditor asking to join, for itself, at another auditor's address
// takes nobody's place: the request is refused with ErrMembership, through
// the node's own API and straight on the forwarding channel alike, and
// the membership stays as it was. (A join that removed every server at the
// requested address let one auditor's certificate take another's seat.)
func TestJoinNeverDisplacesAnotherServer(t *testing.T) {
	c := newTLSCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	li := c.leader()
	rogue, victim := (li+2)%3, (li+1)%3
	before := c.peersOf(li)
	for _, tc := range []struct {
		name string
		join func() error
	}{
		{"own API, a follower's address", func() error { return c.nodes[rogue].Join(ctx, c.ids(rogue), c.addrs[victim]) }},
		{"own API, the leader's address", func() error { return c.nodes[rogue].Join(ctx, c.ids(rogue), c.addrs[li]) }},
		{"forwarded", func() error {
			_, _, err := c.nodes[rogue].fwd.call(ctx, c.addrs[li], opJoin, encodePair(c.ids(rogue), c.addrs[victim]))
			return err
		}},
		{"on the leader itself", func() error { return c.nodes[li].Join(ctx, c.ids(rogue), c.addrs[victim]) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.join(); !errors.Is(err, ErrMembership) {
				t.Fatalf("join at another server's address: %v, want ErrMembership", err)
			}
			if after := c.peersOf(li); !slices.Equal(after, before) {
				t.Fatalf("membership changed from %v to %v", before, after)
			}
		})
	}
	// The leader's own call names the server that holds the address.
	var de *DisplaceError
	if err := c.nodes[li].Join(ctx, c.ids(rogue), c.addrs[victim]); !errors.As(err, &de) || de.Holder != c.ids(victim) {
		t.Fatalf("join on the leader: %v, want a DisplaceError naming %s", err, c.ids(victim))
	}
	// Joining at its own address is still the no-op it was.
	if err := c.nodes[rogue].Join(ctx, c.ids(rogue), c.addrs[rogue]); err != nil {
		t.Fatalf("join at its own address: %v", err)
	}
}

// A join the federation does not admit (an id it does not know, or an
// address it binds to another auditor) is refused by the leader, whoever
// asks, and changes nothing.
func TestJoinAdmittedByTheFederation(t *testing.T) {
	// The founding auditors' addresses are known once they listen: the
	// federation binds the ids it knows to the addresses it learns, the
	// third to an address no one listens on.
	var mu sync.Mutex
	bound := map[string]string{}
	fed := federationFunc(func(id, addr string) error {
		mu.Lock()
		defer mu.Unlock()
		want, ok := bound[id]
		switch {
		case !ok:
			return fmt.Errorf("%s is not an auditor of the federation", id)
		case want != "" && want != addr:
			return fmt.Errorf("%s is bound to %s", id, want)
		}
		return nil
	})
	mu.Lock()
	bound["hospital-a"], bound["hospital-b"], bound["regulator"] = "", "", "127.0.0.1:1"
	mu.Unlock()
	c := newTLSClusterConfigured(t, 2, nil, 0, func(cfg *Config) { cfg.Federation = fed })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	li := c.leader()
	before := c.peersOf(li)
	// A stand-in for a third auditor at an address the federation binds to
	// no one: the leader refuses it whichever node it asks.
	for _, via := range c.nodes {
		if err := via.Join(ctx, c.ids(2), "127.0.0.1:2"); !errors.Is(err, ErrMembership) {
			t.Fatalf("join at an unbound address: %v, want ErrMembership", err)
		}
		if err := via.Join(ctx, "stranger", "127.0.0.1:1"); !errors.Is(err, ErrMembership) {
			t.Fatalf("join of an unknown auditor: %v, want ErrMembership", err)
		}
	}
	if after := c.peersOf(li); !slices.Equal(after, before) {
		t.Fatalf("membership changed from %v to %v", before, after)
	}
}

// screenFunc is a Screen from a function.
type screenFunc func(peer string, cmd []byte) []byte

func (f screenFunc) Screen(peer string, cmd []byte) []byte { return f(peer, cmd) }

// Nothing the screen refuses, and nothing over the command limit, enters
// the log: whether submitted on the leader, through a follower, or sent
// straight on the forwarding channel with an auditor's certificate. The
// screen sees the certificate's auditor, and the caller gets the screen's
// refusal back. (The forwarding channel proposed any bytes from any
// auditor's certificate, and a command over the state machine's limit was
// logged before the state machine refused it.)
func TestScreenAndLimitBeforeProposal(t *testing.T) {
	const limit = 1 << 10
	var mu sync.Mutex
	peers := map[string]bool{}
	screen := screenFunc(func(peer string, cmd []byte) []byte {
		mu.Lock()
		peers[peer] = true
		mu.Unlock()
		if strings.HasSuffix(string(cmd), "junk") {
			return []byte("refused: junk")
		}
		return nil
	})
	c := newTLSClusterConfigured(t, 3, nil, 0, func(cfg *Config) { cfg.Screen, cfg.MaxCommand = screen, limit })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	li := c.leader()
	follower := (li + 1) % 3
	if _, _, err := submitRetry(ctx, c.nodes[follower], chainCmd(1, "fine")); err != nil {
		t.Fatalf("a command the screen admits: %v", err)
	}
	c.waitConverged(10 * time.Second)
	before := c.nodes[li].Status().LastIndex
	big := chainCmd(2, strings.Repeat("x", limit))
	for _, tc := range []struct {
		name string
		send func(cmd []byte) error
	}{
		{"on the leader", func(cmd []byte) error { _, _, err := c.nodes[li].Submit(ctx, cmd); return err }},
		{"through a follower", func(cmd []byte) error { _, _, err := c.nodes[follower].Submit(ctx, cmd); return err }},
		{"forwarded straight", func(cmd []byte) error {
			_, _, err := c.nodes[follower].fwd.call(ctx, c.addrs[li], opSubmit, cmd)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 30 {
				err := tc.send(chainCmd(uint64(100+i), "junk"))
				var np *NotProposedError
				if !errors.As(err, &np) || string(np.Refusal) != "refused: junk" || !errors.Is(err, ErrNotProposed) {
					t.Fatalf("junk command %d: %v, want the screen's refusal", i, err)
				}
			}
			if err := tc.send(big); !errors.Is(err, ErrCommandTooLarge) && !strings.Contains(fmt.Sprint(err), "larger than one raft entry") {
				t.Fatalf("a command over the limit: %v, want ErrCommandTooLarge", err)
			}
		})
	}
	if after := c.nodes[li].Status().LastIndex; after != before {
		t.Fatalf("the log grew from %d to %d entries", before, after)
	}
	mu.Lock()
	defer mu.Unlock()
	if !peers[c.ids(li)] || !peers[c.ids(follower)] {
		t.Fatalf("the screen saw %v, want the leader and the forwarding follower", peers)
	}
}

// Each other auditor may have the leader screen and propose a budget of
// bytes a second, whatever they hold: past it, its forwarded commands are
// refused before they are screened or proposed, and the leader's own and
// the other auditors' are not held up.
func TestForwardedBytesAreBudgetedPerPeer(t *testing.T) {
	var mu sync.Mutex
	screened := 0
	screen := screenFunc(func(string, []byte) []byte {
		mu.Lock()
		screened++
		mu.Unlock()
		return nil
	})
	now := time.Unix(1_800_000_000, 0) // the budget never refills
	c := newTLSClusterConfigured(t, 3, nil, 0, func(cfg *Config) {
		cfg.Screen, cfg.PeerBytes, cfg.Now = screen, 10<<10, func() time.Time { return now }
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	li := c.leader()
	rogue, other := c.nodes[(li+1)%3], c.nodes[(li+2)%3]
	cmd := func(id uint64) []byte { return chainCmd(id, strings.Repeat("x", 2<<10)) }
	sent := 0
	for i := range 10 {
		_, _, err := rogue.fwd.call(ctx, c.addrs[li], opSubmit, cmd(uint64(i+1)))
		if errors.Is(err, ErrPeerBudget) {
			break
		}
		if err != nil {
			t.Fatalf("forwarded command %d: %v", i, err)
		}
		sent++
	}
	if sent != 4 { // 4 × 2 KiB and a bit fit in 10 KiB; the fifth does not
		t.Fatalf("%d commands of 2 KiB passed a budget of 10 KiB", sent)
	}
	mu.Lock()
	if screened != sent {
		t.Errorf("the screen saw %d commands, want %d: a command over the budget is refused before it", screened, sent)
	}
	mu.Unlock()
	if _, _, err := submitRetry(ctx, other, cmd(100)); err != nil {
		t.Fatalf("another auditor's command: %v", err)
	}
	if _, _, err := c.nodes[li].Submit(ctx, cmd(101)); err != nil {
		t.Fatalf("the leader's own command: %v", err)
	}
}
