package ledger

import (
	"testing"

	"github.com/nzcfed/nzc/mechanism"
)

// A replica restored from a snapshot decides the next session opening as
// the others do: it still knows which session each one replaces. (Before,
// Restore dropped that record, so on a restored replica a later opening
// replaced nothing and a charge naming the replaced session was accepted
// where every other replica refused it: a fork.)
func TestRestoredReplicaKnowsTheLatestSessions(t *testing.T) {
	f := newFed(t)
	f.must(openSession(t, "svt1", "s2", []string{"h1"}, 3), "agg")
	restored := restoredCopy(t, f.st)
	zero := make([]float64, mechanism.DefaultGrid().Len())
	charge := chargeBody("b1", []string{"h1"}, zero, 1)
	charge.Session, charge.Mechanism, charge.Params = "svt1", "nzc-svt", svtParams(3).LedgerParams()
	for _, st := range []*State{f.st, restored} {
		g := &fed{t: t, st: st, ts: f.ts}
		g.must(openSession(t, "svt2", "s2", []string{"h1"}, 3), "agg")
		if r := g.apply(g.sign(charge, "agg")); r.Code != CodeSessionSuperseded {
			t.Fatalf("a charge in the replaced session: %s/%s, want session-superseded", r.Status, r.Code)
		}
	}
}
