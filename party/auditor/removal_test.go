package auditor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nzcfed/nzc/party/auditor/compliance"
	"github.com/nzcfed/nzc/party/auditor/internal/auditortest"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

// A vanished auditor is removed from raft on the ledger signing keys of a
// majority of the other auditors, checked against the auditors the ledger
// registered: one auditor's signature alone removes nobody.
func TestQuorumSignedRemoval(t *testing.T) {
	ids := []string{"a1", "a2", "a3"}
	genesis := testGenesis(t, ids)
	c := newTestCluster(t, ids, func(c *Config) { c.Genesis = genesis })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, a := range c.auds {
		if err := a.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.stop[2](); err != nil { // a3 vanishes
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Hour).Unix()
	proof := func(signers ...string) []byte {
		r := compliance.Removal{Remove: "a3", NotAfter: deadline}
		for _, s := range signers {
			r.Signatures = append(r.Signatures, compliance.SignRemoval(s, ledgerKeys.Key(s), "a3", deadline))
		}
		b, err := r.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	via := c.auds[1].Node()
	for _, signers := range [][]string{{"a2"}, {"a2", "a3"}} {
		if err := via.RemoveSigned(ctx, "a3", proof(signers...)); !errors.Is(err, raftnode.ErrMembership) {
			t.Fatalf("removal signed by %v: %v, want ErrMembership", signers, err)
		}
	}
	if peers := via.Status().Peers; len(peers) != 3 {
		t.Fatalf("a refused removal changed the membership: %+v", peers)
	}
	if err := via.RemoveSigned(ctx, "a3", proof("a1", "a2")); err != nil {
		t.Fatalf("removal signed by a1 and a2: %v", err)
	}
	auditortest.WaitFor(t, 10*time.Second, "a3 to leave", func() bool { return len(c.auds[0].Node().Status().Peers) == 2 })
}
