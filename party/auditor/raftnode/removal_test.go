package raftnode

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nzcfed/nzc/party/auditor/internal/auditortest"
)

// testVerifyRemoval stands for the ledger's check of a quorum's signatures
// (compliance.VerifyRemoval): it accepts only the proof quorumProof(id).
func testVerifyRemoval(id string, proof []byte) error {
	if string(proof) != quorumProof(id) {
		return errors.New("not signed by a majority of the other auditors")
	}
	return nil
}

func quorumProof(id string) string { return fmt.Sprintf("a majority removes %s", id) }

// A vanished auditor is removed only on a proof that verifies: the node a
// removal is handed to checks it, and so does the leader when a follower
// forwards it, so neither a follower's word nor a proof of one auditor's
// signature (a proof for another auditor, here) removes anybody.
func TestRemoveSignedChecksTheProof(t *testing.T) {
	c := newTLSCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	li := c.leader()
	follower, victim := c.nodes[(li+1)%3], (li+2)%3
	c.stop(victim) // vanished
	gone := c.ids(victim)
	weak := []byte(quorumProof(c.ids(li))) // a valid proof, for another auditor
	if err := follower.RemoveSigned(ctx, gone, weak); !errors.Is(err, ErrMembership) {
		t.Fatalf("removal on a proof that does not verify: %v, want ErrMembership", err)
	}
	// Past the follower's own check, the leader checks the proof too.
	if _, _, err := follower.fwd.call(ctx, c.addrs[li], opRemoveSigned, encodePair(gone, string(weak))); err == nil {
		t.Fatal("the leader removed an auditor on a proof that does not verify")
	}
	if peers := c.nodes[li].Status().Peers; len(peers) != 3 {
		t.Fatalf("membership changed: %+v", peers)
	}
	if err := follower.RemoveSigned(ctx, gone, []byte(quorumProof(gone))); err != nil {
		t.Fatalf("removal on a quorum's proof: %v", err)
	}
	auditortest.WaitFor(t, 10*time.Second, "the vanished auditor to leave", func() bool {
		for _, p := range c.nodes[li].Status().Peers {
			if p.ID == gone {
				return false
			}
		}
		return true
	})
}
