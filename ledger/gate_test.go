package ledger

import (
	"math"
	"testing"

	"github.com/nzcfed/nzc/mechanism"
)

// TestGateMixedMechanisms drives one account through a mix of pure-DP
// charges (lnmax answers, an nzc-svt session with its additive δ) and
// Gaussian ones (gnmax answers), chosen adaptively as a ledger sees them,
// and checks the gate against the argument of the package documentation:
// every admitted state's filter ε is within the cap, the first charge that
// would take it over is refused, and a charge the fixed-sequence (tight)
// conversion would admit but the filter does not is refused — the gate that
// converted the running total as if it were one fixed composition admitted it.
func TestGateMixedMechanisms(t *testing.T) {
	f := newFed(t)
	g := mechanism.DefaultGrid()
	const h = "h1" // cap ε = 8, δ = 1e-5
	acct := f.st.accounts[h]
	lnmax := mechanism.PureDP(g, 2.0/20) // one lnmax answer, b = 20
	svt := mechanism.PureDP(g, 1.0)      // one nzc-svt session of ε = 1
	const svtDelta = 1e-7
	gnmax := mechanism.Gaussian(g, math.Sqrt2, 40) // one gnmax answer, σ = 40

	filterEps := func(c mechanism.Curve, delta float64) float64 {
		conv, err := c.FilterEpsilon(acct.capDelta - delta)
		if err != nil {
			t.Fatal(err)
		}
		return conv.Epsilon
	}
	// admit runs the gate on one charge (with its pure ε, +Inf for a
	// Gaussian one) and spends it when admitted.
	admit := func(c mechanism.Curve, delta, pure float64) bool {
		t.Helper()
		cost := derived{admit: c, charge: c, admitDelta: delta, chargeDelta: delta, admitPure: pure, chargePure: pure}
		_, ok := f.st.capCheck("student-1", []string{h}, cost, uint64(f.st.TreeSize()), "")
		after, _ := acct.curve.Compose(c)
		bound := min(filterEps(after, acct.deltaSpent+delta), acct.pure+pure)
		if within := bound <= acct.capEps; ok != within {
			t.Fatalf("gate admitted=%v, but the proven ε after the charge is %v against the cap %v", ok, bound, acct.capEps)
		}
		if ok {
			f.st.spend("student-1", []string{h}, cost, 1)
		}
		return ok
	}

	inf := math.Inf(1)
	steps := []struct {
		name        string
		curve       mechanism.Curve
		delta, pure float64
		times       int
	}{
		{"lnmax answers", lnmax, 0, 0.1, 10},
		{"an nzc-svt session", svt, svtDelta, 1, 1},
		{"gnmax answers", gnmax, 0, inf, 50},
		{"another nzc-svt session", svt, svtDelta, 1, 1},
		{"lnmax answers", lnmax, 0, 0.1, 5},
	}
	for i, s := range steps {
		for range s.times {
			if !admit(s.curve, s.delta, s.pure) {
				t.Fatalf("%s refused at filter ε %v of cap %v: the test's budget is too small", s.name, filterEps(acct.curve, acct.deltaSpent), acct.capEps)
			}
		}
		// Before the first Gaussian charge the pure-ε sum is the bound: two
		// pure steps sum exactly (10 × 0.1 + 1 = 2).
		if i == 1 && (acct.pure < 2 || acct.pure > 2+1e-9) {
			t.Fatalf("pure ε after lnmax and a session: %v, want 2", acct.pure)
		}
	}
	if !math.IsInf(acct.pure, 1) {
		t.Fatalf("pure ε after gnmax answers: %v, want +Inf", acct.pure)
	}
	// Now gnmax answers until the gate refuses; each admitted state is
	// checked inside admit.
	n := 0
	for admit(gnmax, 0, inf) {
		n++
		if n > 100000 {
			t.Fatal("the gate never refused")
		}
	}
	if got := filterEps(acct.curve, acct.deltaSpent); got > acct.capEps {
		t.Fatalf("spent filter ε %v over the cap %v", got, acct.capEps)
	}

	// A charge between the two conversions: the tight conversion of the
	// running total would call it within the cap, the filter does not.
	lo, hi := 0.0, 1.0
	var between mechanism.Curve
	for range 60 {
		mid := (lo + hi) / 2
		c := mechanism.Gaussian(g, math.Sqrt2, 40).Times(1)
		c = scaleCurve(t, c, mid)
		after, _ := acct.curve.Compose(c)
		tight, _ := after.Epsilon(acct.capDelta - acct.deltaSpent)
		if tight.Epsilon <= acct.capEps {
			lo, between = mid, c
		} else {
			hi = mid
		}
	}
	if between.Grid().Len() == 0 {
		t.Fatal("no charge found that the tight conversion admits")
	}
	if admit(between, 0, inf) {
		t.Fatal("the gate admitted a charge that only the fixed-sequence conversion allows")
	}
}

// scaleCurve multiplies every value of c by x.
func scaleCurve(t *testing.T, c mechanism.Curve, x float64) mechanism.Curve {
	t.Helper()
	v := c.Values()
	for i := range v {
		v[i] *= x
	}
	out, err := c.Grid().CurveOf(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
