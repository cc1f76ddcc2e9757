package aggregator

import (
	"slices"
	"testing"

	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/mechanism/mechanismtest"
)

// A mechanism registered outside package mechanism answers a batch and is
// charged through the ledger with no change to the aggregator: it is asked
// for by its kind, and the charge is what its definition prices.
func TestRegisteredMechanismAnswers(t *testing.T) {
	mechanismtest.Register(t)
	f := newFixture(t, 3, 50)
	cfg := f.cfg
	// 60 teachers agree on every query: an answer is wrong only if noise of
	// scale 2 overturns a lead of 60 votes (probability below 1e-12 per
	// query; the noise is seeded). Refusals are counted, not failed.
	cfg.Mechanism = mechanism.Params{Mechanism: mechanismtest.Toy, Scale: 2, Threshold: 30}
	a := f.start(t, cfg)
	req, want := f.request(t, 1, 12)
	labels := f.open(t, label(t, a, req))
	answered := 0
	for i, l := range labels.GetLabels() {
		if labels.GetRefused()[i] {
			continue
		}
		answered++
		if l != want[i] {
			t.Errorf("query %d: label %d, all teachers voted %d", i, l, want[i])
		}
	}
	ch := f.led.charges(t)[batchHex(req)]
	if ch == nil || ch.Mechanism != string(mechanismtest.Toy) || ch.Answers != uint64(answered) || ch.Queries != 12 {
		t.Fatalf("charge %+v, want a toy charge of %d answers out of 12", ch, answered)
	}
	p := cfg.Mechanism
	p.Teachers, p.Classes = 60, classes
	cost, err := p.Charge(mechanism.DefaultGrid(), answered, 12-answered)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ch.Curve, cost.RDP.Values()) {
		t.Errorf("charged curve %v, want the toy's %v", ch.Curve, cost.RDP.Values())
	}
}
