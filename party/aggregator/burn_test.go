package aggregator

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// A hospital holding a third of the teachers, all voting against the
// others, makes every nzc-svt query refused, so that each session ends at
// once with nothing answered. Before, the next batch opened, and every
// hospital paid for, another session, until the caps ran out. Now a
// session that answers fewer queries than it refuses burns: no session is
// opened again for its hospitals, so each honest hospital pays at most one
// session's ε; the refusal, /readyz and the metrics say why, and the
// remedy — suspending the hospital and restarting — brings the others
// back. The queries' margins put a false failure far below 1e-6: an
// honest unanimous query is 300 votes from instability against a
// threshold of 150, the adversary's 100, with noise of scale 1 and 6.
func TestAdversarialHospitalBurnsOneSession(t *testing.T) {
	f, cfg := svtFixture(t, 3)
	cfg.Mechanism = mechanism.Params{Mechanism: mechanism.NZCSVT, Threshold: 150, Scale: 1, MaxRefusals: 3}
	bad := f.hospitals[2]
	bad.against = true
	reg := prometheus.NewRegistry()
	cfg.Registry = reg
	a := f.start(t, cfg)
	var refusal error
	for id := byte(1); id <= 6; id++ {
		req, _ := f.request(t, id, 4)
		if _, err := a.Label(t.Context(), "student-1", req); err != nil && refusal == nil {
			refusal = err
		}
	}
	if _, accepted := f.led.openings(t); accepted != 1 {
		t.Fatalf("%d sessions opened beside a hospital voting against the others, want 1", accepted)
	}
	if !errors.Is(refusal, protocol.ErrBudgetExhausted) || !strings.Contains(refusal.Error(), "no nzc-svt session is opened") {
		t.Fatalf("the batches after the burnt session: %v, want a refusal that says why", refusal)
	}
	if _, why := a.Ready(); !strings.Contains(why, "no nzc-svt session opens for hospital-1, hospital-2, hospital-3") {
		t.Errorf("/readyz does not say which hospitals get no session: %q", why)
	}
	if got := metricValue(t, reg, "nzc_aggregator_svt_sessions_burnt_total"); got != 1 {
		t.Errorf("nzc_aggregator_svt_sessions_burnt_total = %v, want 1", got)
	}
	if got := metricValue(t, reg, "nzc_aggregator_svt_blocked", bad.id); got != 1 {
		t.Errorf("nzc_aggregator_svt_blocked{%s} = %v, want 1", bad.id, got)
	}
	one := sessionEpsilon(t, f, cfg)
	for _, h := range f.hospitals[:2] {
		if eps := f.led.epsilon(t, h.id); eps > one*(1+1e-9) {
			t.Errorf("honest %s paid ε=%v, more than one session's ε=%v", h.id, eps, one)
		}
	}

	// The remedy: the operator suspends the hospital and restarts.
	cfg.Suspended = []string{bad.id}
	cfg.Registry = nil
	a = f.start(t, cfg)
	req, want := f.request(t, 20, 4)
	resp := label(t, a, req)
	for i, l := range f.open(t, resp).GetLabels() {
		if l != want[i] {
			t.Errorf("query %d: %d, want %d", i, l, want[i])
		}
	}
	f.wantChargedTo(t, req, "hospital-1", "hospital-2")
	if _, why := a.Ready(); !strings.Contains(why, "suspended by the operator: "+bad.id) {
		t.Errorf("/readyz does not name the suspended hospital: %q", why)
	}
}

// epsilon is the ε the ledger reports hospital id has spent.
func (l *fakeLedger) epsilon(t *testing.T, id string) float64 {
	t.Helper()
	resp, err := l.Budget(t.Context(), &nzcpb.BudgetRequest{HospitalIds: []string{id}})
	if err != nil || len(resp.GetBudgets()) != 1 {
		t.Fatalf("budget of %s: %v %v", id, resp, err)
	}
	return resp.GetBudgets()[0].GetEpsilonSpent()
}

// sessionEpsilon is one nzc-svt session's ε over the fixture's three
// hospitals, at the accounts' δ (1e-5), with 1 % for the ledger's rounding.
func sessionEpsilon(t *testing.T, f *fixture, cfg Config) float64 {
	t.Helper()
	p := cfg.Mechanism
	p.Classes = classes
	for _, h := range f.hospitals {
		p.Teachers += h.teachers
	}
	c, err := p.Charge(mechanism.DefaultGrid(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	eps := c.PureEpsilon
	if !c.RDP.IsZero() {
		if e, err := c.RDP.FilterEpsilon(1e-5 - c.Delta); err == nil {
			eps = min(eps, e.Epsilon)
		}
	}
	return eps * 1.01
}
