package aggregator

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nzcfed/nzc/crypto/cryptotest"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/party/auditor/intake"
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

// The remedy in the ledger: the federation's administrator suspends the
// hospital voting against the others with a signed suspend command, and
// the aggregator, which reads suspensions in each batch's budget read,
// leaves it out of the next batch without a restart; its charge names
// only the others. Before, the aggregator asked the suspended hospital,
// and the ledger refused the batch's reservation naming it.
func TestLedgerSuspensionLeavesTheHospitalOut(t *testing.T) {
	f := newFixture(t, 3, 50)
	cfg := f.cfg
	cfg.Quorum = 2
	a := f.start(t, cfg)
	bad := f.hospitals[2]
	ca := cryptotest.CA(t, f.m)
	cmd, err := ledger.Sign(&ledger.Suspend{Hospital: bad.id, Version: 1, Suspended: true, Reason: "burnt sessions"}, intake.AdminID, ca.Key())
	if err != nil {
		t.Fatal(err)
	}
	if res, err := f.led.Submit(t.Context(), cmd); err != nil || res.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED {
		t.Fatalf("suspending %s: %v %v", bad.id, res, err)
	}
	req, _ := f.request(t, 1, 4)
	resp := label(t, a, req)
	if !slices.Equal(resp.GetLeftOut(), []string{bad.id}) {
		t.Fatalf("left out %v, want the suspended %s", resp.GetLeftOut(), bad.id)
	}
	f.wantChargedTo(t, req, "hospital-1", "hospital-2")
	if _, why := a.Ready(); !strings.Contains(why, "suspended in the ledger by the federation's administrator: "+bad.id) {
		t.Errorf("/readyz does not name the hospital suspended in the ledger: %q", why)
	}
}

// The marks of a burnt session survive a restart of the aggregator: the
// restarted aggregator opens no session for the same hospitals (before, a
// restart forgot the marks and every hospital paid for another session).
// The administrator's suspension of the adversarial hospital in the ledger
// then lifts them, and the honest hospitals are answered without it, in
// one more session.
func TestBurnMarksSurviveRestart(t *testing.T) {
	f, cfg := svtFixture(t, 3)
	cfg.Mechanism = mechanism.Params{Mechanism: mechanism.NZCSVT, Threshold: 150, Scale: 1, MaxRefusals: 3}
	bad := f.hospitals[2]
	bad.against = true
	a := f.start(t, cfg)
	for id := byte(1); id <= 2; id++ {
		req, _ := f.request(t, id, 4)
		_, _ = a.Label(t.Context(), "student-1", req)
	}
	if _, accepted := f.led.openings(t); accepted != 1 {
		t.Fatalf("%d sessions opened, want 1", accepted)
	}
	a = f.start(t, cfg) // a restart over the same outbox
	req, _ := f.request(t, 3, 4)
	if _, err := a.Label(t.Context(), "student-1", req); !errors.Is(err, protocol.ErrBudgetExhausted) || !strings.Contains(err.Error(), "no nzc-svt session is opened") {
		t.Fatalf("after a restart: %v, want the burnt session's refusal", err)
	}
	if _, accepted := f.led.openings(t); accepted != 1 {
		t.Fatalf("a restart opened another session for hospitals whose session burnt (%d opened)", accepted)
	}
	if _, why := a.Ready(); !strings.Contains(why, "no nzc-svt session opens for hospital-1, hospital-2, hospital-3") {
		t.Errorf("/readyz after a restart does not name the marked hospitals: %q", why)
	}

	ca := cryptotest.CA(t, f.m)
	cmd, err := ledger.Sign(&ledger.Suspend{Hospital: bad.id, Version: 1, Suspended: true, Reason: "burnt a session"}, intake.AdminID, ca.Key())
	if err != nil {
		t.Fatal(err)
	}
	if res, err := f.led.Submit(t.Context(), cmd); err != nil || res.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED {
		t.Fatalf("suspending %s: %v %v", bad.id, res, err)
	}
	req, want := f.request(t, 4, 4)
	resp := label(t, a, req)
	for i, l := range f.open(t, resp).GetLabels() {
		if l != want[i] {
			t.Errorf("query %d: %d, want %d", i, l, want[i])
		}
	}
	f.wantChargedTo(t, req, "hospital-1", "hospital-2")
	a = f.start(t, cfg) // the lifted marks stay lifted
	if _, why := a.Ready(); strings.Contains(why, "no nzc-svt session opens") {
		t.Errorf("/readyz after the suspension and a restart: %q", why)
	}
}

// FuzzBurns feeds arbitrary burns files to a restarting aggregator's
// outbox: each is read as marks of valid ids, each hospital once and in
// its session, or refused as ErrCorruptOutbox, never a panic.
func FuzzBurns(f *testing.F) {
	f.Add([]byte(`{"version":1,"marks":[{"hospital":"hospital-1","session":"s1","hospitals":["hospital-1","hospital-2"],"answered":0,"refusals":3}]}`))
	f.Add([]byte(`{"version":1,"marks":[]}`))
	f.Add([]byte(`{"version":1,"marks":[{"hospital":"hospital-1","session":"s1","hospitals":["hospital-2"]}]}`))
	f.Add([]byte(`{"version":2,"marks":[]}`))
	f.Add([]byte(`{"version":1,`))
	ob, err := OpenOutbox(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, file []byte) {
		if err := os.WriteFile(filepath.Join(ob.dir, burnsFile), file, 0o600); err != nil {
			t.Fatal(err)
		}
		marks, err := ob.Burns()
		if err != nil {
			if !errors.Is(err, ErrCorruptOutbox) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		seen := map[string]bool{}
		for _, m := range marks {
			if seen[m.Hospital] || !slices.Contains(m.Hospitals, m.Hospital) || m.Session == "" {
				t.Fatalf("accepted %+v", marks)
			}
			seen[m.Hospital] = true
		}
		if err := ob.PutBurns(marks); err != nil {
			t.Fatal(err)
		}
		again, err := ob.Burns()
		if err != nil || len(again) != len(marks) {
			t.Fatalf("rewritten marks read back as %+v, %v", again, err)
		}
	})
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
