package ledger

import (
	"crypto/sha256"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/mechanism"
)

// underCostCommands are the charges an aggregator could sign to spend
// budget without paying for it, each stating less than its mechanism and
// parameters cost.
func underCostCommands(t testing.TB) map[string]Body {
	g := mechanism.DefaultGrid()
	zero := make([]float64, g.Len())
	gn := mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Classes: 10, Sigma: 0.5}
	nzc := mechanism.Params{Mechanism: mechanism.NZC, Teachers: 250, Classes: 10, Noise: mechanism.NoiseLaplace, Scale: 1, Constant: 1e100}
	svt := mechanism.Params{Mechanism: mechanism.NZCSVT, Teachers: 250, Classes: 10, Scale: 1, Threshold: 240, MaxRefusals: 1 << 40}
	charge := func(batch string, p mechanism.Params, q uint64, curve []float64) *Charge {
		return &Charge{BatchID: batch, Student: "s2", Hospitals: []string{"h1"}, Mechanism: string(p.Mechanism),
			Params: p.LedgerParams(), Queries: q, Answers: q, Curve: curve, AnswersHash: sha256.Sum256([]byte(batch)),
			Timestamp: 1_700_000_001_000_000_000}
	}
	return map[string]Body{
		// 10,000 GNMax answers at σ = 0.5: honest ε ≈ 44,000 against a cap of 8.
		"gnmax-zero-curve": charge("gnmax-free", gn, 10_000, zero),
		// The paper's mechanism with c = 1e100 stated as one cheap GNMax answer.
		"nzc-c1e100": charge("nzc-cheap", nzc, 1, gaussCurve(40, 1)),
		// A sparse-vector session with K = 2^40 refusals, at no cost.
		"svt-k2^40-free": &OpenSession{SessionID: "svt-free", Student: "s2", Hospitals: []string{"h1"}, Mechanism: string(svt.Mechanism),
			Params: svt.LedgerParams(), MaxRefusals: 1 << 40, Curve: zero, Timestamp: 1_700_000_001_000_000_000},
	}
}

func TestApplyRefusesUnderCost(t *testing.T) {
	for name, b := range underCostCommands(t) {
		t.Run(name, func(t *testing.T) {
			f := newFed(t)
			before := f.st.Accounts()
			r := f.apply(f.sign(b, "agg"))
			if r.Status != StatusRefused || r.Code != CodeUnderCost {
				t.Fatalf("got %s/%s (%s), want refused/under-cost", r.Status, r.Code, r.Message)
			}
			if after := f.st.Accounts(); after[0].Epsilon != before[0].Epsilon || after[0].Charges != 0 {
				t.Fatalf("a refused charge changed h1's account: %+v", after[0])
			}
		})
	}
}

// forge appends an entry recording cmd as accepted without applying it: a
// log written by a ledger that did not derive costs.
func (f *fed) forge(cmd []byte) int64 {
	f.t.Helper()
	n := f.st.TreeSize()
	prev, err := f.st.log.treeHash(n)
	if err != nil {
		f.t.Fatal(err)
	}
	b, err := Entry{Index: uint64(n), PrevRoot: prev, Command: cmd, Outcome: Outcome{Status: StatusAccepted}}.Encode()
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.st.appendEntry(b); err != nil {
		f.t.Fatal(err)
	}
	return n
}

func TestVerifyNamesEveryUnderCostEntry(t *testing.T) {
	f := newFed(t)
	f.must(chargeBody("honest", []string{"h1"}, gaussCurve(40, 10), 10), "agg")
	var forged []int64
	names := []string{"gnmax-zero-curve", "nzc-c1e100", "svt-k2^40-free"}
	bodies := underCostCommands(t)
	for _, name := range names {
		forged = append(forged, f.forge(f.sign(bodies[name], "agg")))
	}
	export, err := f.st.Export(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := Verify(export, VerifyOptions{Unpinned: true})
	if r.OK {
		t.Fatal("an export with under-costed charges verified")
	}
	var named []int64
	for _, c := range r.Failures() {
		if c.Name == "cost" && c.Entry != nil {
			named = append(named, *c.Entry)
			if !strings.Contains(c.Detail, "under-cost") {
				t.Errorf("entry %d: %s", *c.Entry, c.Detail)
			}
		}
	}
	if !slices.Equal(named, forged) {
		t.Fatalf("cost checks name entries %v, want every forged one %v", named, forged)
	}
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, i := range forged {
		if !strings.Contains(text.String(), "FAIL cost [entry "+strconv.FormatInt(i, 10)+"]") {
			t.Errorf("the report does not name entry %d:\n%s", i, text.String())
		}
	}
}

func TestDerivedCostRules(t *testing.T) {
	g := mechanism.DefaultGrid()
	gn := mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Classes: 10, Sigma: 40}
	cost, err := gn.Charge(g, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	scaled := func(c []float64, k float64) []float64 {
		out := slices.Clone(c)
		for i := range out {
			out[i] *= k
		}
		return out
	}
	with := func(mut func(b *Charge)) *Charge {
		b := chargeBody("b1", []string{"h1"}, cost.RDP.Values(), 10)
		mut(b)
		return b
	}
	cases := []struct {
		name string
		body *Charge
		code Code // CodeOK: accepted
		// charged, when accepted: the factor of cost.RDP h1 must be charged
		// at least (and at most that times 1 + CostTolerance).
		charged float64
	}{
		{"exact", with(func(*Charge) {}), CodeOK, 1},
		{"last bits below", with(func(b *Charge) { b.Curve = scaled(b.Curve, 1-1e-12) }), CodeOK, 1},
		{"over-stated", with(func(b *Charge) { b.Curve = scaled(b.Curve, 3) }), CodeOK, 3},
		{"below by more than the tolerance", with(func(b *Charge) { b.Curve = scaled(b.Curve, 1-1e-6) }), CodeUnderCost, 0},
		{"other σ", with(func(b *Charge) { b.Params = gnmaxParams(20) }), CodeUnderCost, 0},
		{"non-canonical σ", with(func(b *Charge) { b.Params[1].Value = "40.0" }), CodeBadParams, 0},
		{"no teachers", with(func(b *Charge) { b.Params = b.Params[:2] }), CodeBadParams, 0},
		{"unknown mechanism", with(func(b *Charge) { b.Mechanism = "median" }), CodeBadParams, 0},
		{"svt outside a session", with(func(b *Charge) {
			b.Mechanism, b.Params = "nzc-svt", svtParams(3).LedgerParams()
		}), CodeBadParams, 0},
		{"more answers than queries", with(func(b *Charge) { b.Answers = 11 }), CodeBadCharge, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFed(t)
			r := f.apply(f.sign(c.body, "agg"))
			if r.Code != c.code {
				t.Fatalf("got %s/%s (%s), want %s", r.Status, r.Code, r.Message, c.code)
			}
			if c.code != CodeOK {
				return
			}
			acc, _ := f.st.Account("h1")
			for i, v := range acc.Curve {
				want := cost.RDP.At(i) * c.charged
				if v < want*(1-1e-15) || v > want*(1+CostTolerance) {
					t.Fatalf("order %v: charged %v, want %v", g.Order(i), v, want)
				}
				if v != latticeUp(v) {
					t.Fatalf("order %v: charged %v is not on the lattice", g.Order(i), v)
				}
			}
		})
	}
}

func TestLatticeUp(t *testing.T) {
	for _, v := range []float64{0, 1e-300, 1e-12, 0.1, 1, 1.5, math.Pi, 4095.999, 4096, 1e10, 1e300, math.Inf(1)} {
		got := latticeUp(v)
		if got < v {
			t.Errorf("latticeUp(%v) = %v, below", v, got)
		}
		if got-v > 1.0/(1<<latticeBits) {
			t.Errorf("latticeUp(%v) = %v, more than one lattice step up", v, got)
		}
		if !math.IsInf(got, 0) && math.Mod(got, 1.0/(1<<latticeBits)) != 0 {
			t.Errorf("latticeUp(%v) = %v, not a lattice point", v, got)
		}
		if latticeUp(got) != got {
			t.Errorf("latticeUp is not idempotent at %v", v)
		}
	}
}

// TestAdmissionAtWorstCase: the cap and quota decide on every query
// answered, so a refusal and its message do not depend on how many were.
func TestAdmissionAtWorstCase(t *testing.T) {
	g := mechanism.DefaultGrid()
	conf := mechanism.Params{Mechanism: mechanism.ConfidentGNMax, Teachers: 250, Classes: 10, Threshold: 200, Sigma1: 150, Sigma2: 5}
	batch := func(id string, queries, answers int) *Charge {
		c, err := conf.Charge(g, answers, queries-answers)
		if err != nil {
			t.Fatal(err)
		}
		return &Charge{BatchID: id, Student: "s2", Hospitals: []string{"h2"}, Mechanism: string(conf.Mechanism), Params: conf.LedgerParams(),
			Queries: uint64(queries), Answers: uint64(answers), Curve: c.RDP.Values(), AnswersHash: sha256.Sum256([]byte(id))}
	}
	// h2's cap is ε = 2 at δ = 1e-6: 20 refused queries fit, 20 answered
	// ones do not.
	f := newFed(t)
	var msgs []string
	for answers := range 21 {
		r := f.apply(f.sign(batch("b"+strconv.Itoa(answers), 20, answers), "agg"))
		if r.Code != CodeCapExceeded {
			t.Fatalf("%d of 20 answered: got %s (%s), want cap-exceeded for every count", answers, r.Code, r.Message)
		}
		msgs = append(msgs, r.Message+"|"+strconv.FormatFloat(r.ChargeEpsilon, 'g', -1, 64))
	}
	for i := range msgs {
		if msgs[i] != msgs[0] {
			t.Fatalf("the refusal depends on the answers:\n%s\n%s", msgs[0], msgs[i])
		}
	}
	// Quota: s1 may receive 100 answers; a batch of 101 queries is refused
	// whatever it answered.
	for _, answers := range []uint64{0, 101} {
		b := chargeBody("q"+strconv.FormatUint(answers, 10), []string{"h1"}, gaussCurve(40, int(answers)), answers)
		b.Student, b.Queries = "s1", 101
		if r := f.apply(f.sign(b, "agg")); r.Code != CodeQuotaExceeded {
			t.Fatalf("%d answers of 101 queries over a quota of 100: %s", answers, r.Code)
		}
	}
}

func TestSessionChargeNamesItsMechanism(t *testing.T) {
	f := newFed(t)
	f.must(openSession(t, "svt1", "s2", []string{"h1"}, 3), "agg")
	zero := make([]float64, mechanism.DefaultGrid().Len())
	in := func(batch string, p []Param) *Charge {
		b := chargeBody(batch, []string{"h1"}, zero, 1)
		b.Session, b.Mechanism, b.Params = "svt1", "nzc-svt", p
		return b
	}
	f.must(in("ok", svtParams(3).LedgerParams()), "agg")
	if r := f.apply(f.sign(in("other-k", svtParams(4).LedgerParams()), "agg")); r.Code != CodeBadParams {
		t.Fatalf("a charge naming another K: %s", r.Code)
	}
	if r := f.apply(f.sign(in("gnmax", gnmaxParams(40)), "agg")); r.Code != CodeBadParams {
		t.Fatalf("a charge naming gnmax params in a session: %s", r.Code)
	}
	open := openSession(t, "svt2", "s2", []string{"h1"}, 3)
	open.MaxRefusals = 4
	if r := f.apply(f.sign(open, "agg")); r.Code != CodeBadParams {
		t.Fatalf("a session whose K is not its parameters': %s", r.Code)
	}
}

// A session that has refused its K queries is over: a batch without
// refusals may not be recorded in it either, since the session's cost
// covers no query after its K-th refusal.
func TestExhaustedSessionAnswersNothingMore(t *testing.T) {
	f := newFed(t)
	f.must(openSession(t, "svt1", "s2", []string{"h1"}, 3), "agg")
	zero := make([]float64, mechanism.DefaultGrid().Len())
	in := func(batch string, q, a uint64) *Charge {
		b := chargeBody(batch, []string{"h1"}, zero, a)
		b.Session, b.Mechanism, b.Params, b.Queries = "svt1", "nzc-svt", svtParams(3).LedgerParams(), q
		return b
	}
	f.must(in("b1", 10, 7), "agg") // the 3rd refusal ends the session
	if r := f.apply(f.sign(in("b2", 5, 5), "agg")); r.Code != CodeSessionExhausted {
		t.Fatalf("five answers after the session's 3rd refusal: %s/%s, want session-exhausted", r.Status, r.Code)
	}
}

// Opening a session for the same aggregator, student and hospitals
// replaces the open one: no charge may name the old session afterwards.
func TestSupersededSessionRecordsNothing(t *testing.T) {
	f := newFed(t)
	f.must(openSession(t, "svt1", "s2", []string{"h1"}, 3), "agg")
	f.must(openSession(t, "svt-other-set", "s2", []string{"h1", "h3"}, 3), "agg")
	zero := make([]float64, mechanism.DefaultGrid().Len())
	in := func(batch, session string, hospitals []string) *Charge {
		b := chargeBody(batch, hospitals, zero, 1)
		b.Session, b.Mechanism, b.Params = session, "nzc-svt", svtParams(3).LedgerParams()
		return b
	}
	f.must(in("b1", "svt1", []string{"h1"}), "agg") // another hospital set replaces nothing
	f.must(openSession(t, "svt2", "s2", []string{"h1"}, 3), "agg")
	if r := f.apply(f.sign(in("b2", "svt1", []string{"h1"}), "agg")); r.Code != CodeSessionSuperseded {
		t.Fatalf("a batch in the replaced session: %s/%s, want session-superseded", r.Status, r.Code)
	}
	f.must(in("b3", "svt2", []string{"h1"}), "agg")
	f.must(in("b4", "svt-other-set", []string{"h1", "h3"}), "agg")
}
