package auditor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/intake"
)

// TestCosignRoundsReuseConnections gathers receipts round after round as
// the intake does, each round ending as soon as a majority signed. The ask
// to the auditor that answers second is still out when its round ends; it
// must be left to finish, so that its connection goes back to the pool.
// Cancelling it with the round closed that connection, and the next round
// paid a mutual-TLS handshake on both sides for nearly every receipt.
func TestCosignRoundsReuseConnections(t *testing.T) {
	ids := []string{"a1", "a2", "a3"}
	c := newTestCluster(t, ids, nil)
	leader := c.auds[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, cmd := range testGenesis(t, ids) {
		if r := submitCmd(ctx, t, leader, cmd); r.Status != ledger.StatusAccepted {
			t.Fatalf("setup: %s %s", r.Status, r.Message)
		}
	}
	reg := prometheus.NewRegistry()
	if err := leader.Node().Register(reg); err != nil {
		t.Fatal(err)
	}
	receipts := intake.NewReceipts(leader.Ledger().State(), leader.CosignQuorum, 0)
	const rounds = 40
	for i := range rounds {
		// Each round only needs the log to have grown.
		r := submitTo(ctx, t, leader, &ledger.RegisterParty{Party: ledgerKeys.Party(fmt.Sprintf("student-%d", i), ledger.RoleStudent), Timestamp: int64(10 + i)}, "admin")
		if _, err := receipts.For(ctx, int64(r.Index)); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
	dials := gatherCounter(t, reg, "nzc_auditor_peer_dials_total")
	// Two peers, and a few more connections while an ask of the last round
	// is still out when the next begins: far fewer than one per round.
	if dials > 8 {
		t.Errorf("the leader dialled its peers %v times in %d rounds of cosigning; want at most 8 (connections are reused)", dials, rounds)
	}
	t.Logf("%v dials in %d rounds", dials, rounds)
}

// gatherCounter returns the value of the counter name in reg.
func gatherCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
