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
//
// What is asserted is that behaviour, not a count that depends on how fast
// the machine is: no ask is abandoned by its round, and, each round
// beginning once the last one's asks have finished, every dial beyond one
// per peer replaces a connection dropped because its ask ran out of time,
// or follows a dial that did (which a busy machine causes, and which is
// correct).
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
	// idle waits until no call of the leader to a peer is under way: the
	// asks a round left to finish have finished.
	idle := func() {
		t.Helper()
		if err := poll(ctx, func() bool { return gatherMetric(t, reg, "nzc_auditor_peer_calls_in_flight") == 0 }); err != nil {
			t.Fatalf("calls to peers still under way: %v", err)
		}
	}
	counters := func() (dials, failed, dropped, abandoned float64) {
		return gatherMetric(t, reg, "nzc_auditor_peer_dials_total"), gatherMetric(t, reg, "nzc_auditor_peer_dials_failed_total"),
			gatherMetric(t, reg, "nzc_auditor_peer_conns_dropped_total"), gatherMetric(t, reg, "nzc_auditor_peer_calls_abandoned_total")
	}
	idle()
	d0, f0, dr0, a0 := counters()
	receipts := intake.NewReceipts(leader.Ledger().State(), leader.CosignQuorum, 0)
	const rounds = 40
	for i := range rounds {
		// Each round only needs the log to have grown.
		r := submitTo(ctx, t, leader, &ledger.RegisterParty{Party: ledgerKeys.Party(fmt.Sprintf("student-%d", i), ledger.RoleStudent), Timestamp: int64(10 + i)}, "admin")
		if _, err := receipts.For(ctx, int64(r.Index)); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		idle()
	}
	d1, f1, dr1, a1 := counters()
	dials, failed, dropped, abandoned := d1-d0, f1-f0, dr1-dr0, a1-a0
	t.Logf("%v dials (%v failed), %v connections dropped (%v abandoned) in %d rounds", dials, failed, dropped, abandoned, rounds)
	if abandoned != 0 {
		t.Errorf("%v asks were cancelled with their round, closing their connections; want 0 (an ask is left to finish)", abandoned)
	}
	if peers := float64(len(ids) - 1); dials > peers+failed+dropped {
		t.Errorf("the leader dialled its peers %v times in %d rounds of cosigning, %v dials failing and %v connections dropped; want at most %v more (connections are reused)", dials, rounds, failed, dropped, peers)
	}
}

// gatherMetric returns the value of the counter or gauge name in reg.
func gatherMetric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			if g := mf.GetMetric()[0].GetGauge(); g != nil {
				return g.GetValue()
			}
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
