package mechanism

import (
	"math"
	"testing"
)

func relClose(a, b, tol float64) bool { return math.Abs(a-b) <= tol*math.Abs(b) }

func TestQueryCosts(t *testing.T) {
	g := must(NewGrid([]float64{2, 10, 100}))
	for _, c := range []struct {
		name            string
		p               Params
		answered, refd  []float64 // RDP per order
		pureAns, pureRf float64
	}{
		{"gnmax", Params{Mechanism: GNMax, Teachers: 5, Sigma: 40}, []float64{2.0 / 1600, 10.0 / 1600, 100.0 / 1600}, []float64{0, 0, 0}, math.Inf(1), 0},
		{"confident", Params{Mechanism: ConfidentGNMax, Teachers: 5, Sigma1: 150, Sigma2: 40, Threshold: 3},
			[]float64{2/(2*150.0*150) + 2.0/1600, 10/(2*150.0*150) + 10.0/1600, 100/(2*150.0*150) + 100.0/1600},
			[]float64{2 / (2 * 150.0 * 150), 10 / (2 * 150.0 * 150), 100 / (2 * 150.0 * 150)}, math.Inf(1), math.Inf(1)},
		{"nzc gaussian", Params{Mechanism: NZC, Teachers: 5, Noise: NoiseGaussian, Sigma: 4, Constant: 3}, []float64{2, 10, 100}, []float64{0, 0, 0}, math.Inf(1), 0},
	} {
		qc, err := c.p.QueryCost(g)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if !relClose(qc.Answered.At(i), c.answered[i], 1e-12) || qc.Answered.At(i) < c.answered[i]*(1-1e-15) {
				t.Errorf("%s answered RDP(%v) = %v, want %v", c.name, g.Order(i), qc.Answered.At(i), c.answered[i])
			}
			if !relClose(qc.Refused.At(i), c.refd[i], 1e-12) {
				t.Errorf("%s refused RDP(%v) = %v, want %v", c.name, g.Order(i), qc.Refused.At(i), c.refd[i])
			}
		}
		if qc.PureAnswered != c.pureAns && !relClose(qc.PureAnswered, c.pureAns, 1e-12) {
			t.Errorf("%s pure ε = %v, want %v", c.name, qc.PureAnswered, c.pureAns)
		}
	}
}

func TestPureCosts(t *testing.T) {
	g := DefaultGrid()
	for _, c := range []struct {
		p    Params
		want float64
	}{
		{Params{Mechanism: LNMax, Teachers: 5, Scale: 20}, 0.1},
		{Params{Mechanism: NZC, Teachers: 5, Noise: NoiseLaplace, Scale: 20, Constant: 9}, 1},
		// The paper: c = 1e100, γ = 1e10 (scale 1e-10): ε = 2(c+1)/b = 2e110.
		{Params{Mechanism: NZC, Teachers: 5, Noise: NoiseLaplace, Scale: 1e-10, Constant: 1e100}, 2e110},
	} {
		ch, err := c.p.Charge(g, 7, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !relClose(ch.PureEpsilon, 7*c.want, 1e-12) || ch.PureEpsilon < 7*c.want {
			t.Errorf("%+v: pure ε of 7 answers = %v, want ≥ %v", c.p, ch.PureEpsilon, 7*c.want)
		}
		conv, err := ch.Epsilon(1e-5)
		if err != nil {
			t.Fatal(err)
		}
		// The RDP curve of ε-DP is at most ε at every order, so the
		// conversion exceeds ε by at most the grid's last-order term.
		if conv.Epsilon > ch.PureEpsilon*(1+1e-12)+0.02 || conv.Epsilon <= 0 {
			t.Errorf("%+v: converted ε %v, pure %v", c.p, conv.Epsilon, ch.PureEpsilon)
		}
	}
}

// The paper's Gaussian setting overflows: the cost is +Inf, never small.
func TestAstronomicalCostIsInfinite(t *testing.T) {
	g := DefaultGrid()
	for _, p := range []Params{
		{Mechanism: NZC, Teachers: 5, Noise: NoiseGaussian, Sigma: 1e-10, Constant: 1e200},
		{Mechanism: NZC, Teachers: 5, Noise: NoiseLaplace, Scale: 1e-300, Constant: 1e100},
	} {
		ch, err := p.Charge(g, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		conv, _ := ch.Epsilon(1e-5)
		if !math.IsInf(conv.Epsilon, 1) {
			t.Errorf("%+v: ε = %v, want +Inf", p, conv.Epsilon)
		}
	}
	// c = 1e100, σ = 1e-10: RDP α(c+1)²/σ² = α·1e220, finite but astronomical.
	p := Params{Mechanism: NZC, Teachers: 5, Noise: NoiseGaussian, Sigma: 1e-10, Constant: 1e100}
	qc, _ := p.QueryCost(g)
	if v := qc.Answered.At(0); !(v >= 1.1*1e220) {
		t.Errorf("RDP(1.1) = %v, want ≥ 1.1e220", v)
	}
}

func TestChargeComposes(t *testing.T) {
	g := DefaultGrid()
	p := Params{Mechanism: ConfidentGNMax, Teachers: 5, Sigma1: 150, Sigma2: 40, Threshold: 3}
	qc, _ := p.QueryCost(g)
	ch, err := p.Charge(g, 30, 70)
	if err != nil {
		t.Fatal(err)
	}
	for i := range g.Len() {
		want := 30*qc.Answered.At(i) + 70*qc.Refused.At(i)
		if !relClose(ch.RDP.At(i), want, 1e-12) || ch.RDP.At(i) < want*(1-1e-15) {
			t.Fatalf("order %v: %v, want %v", g.Order(i), ch.RDP.At(i), want)
		}
	}
	zero, _ := p.Charge(g, 0, 0)
	if !zero.RDP.IsZero() || zero.PureEpsilon != 0 {
		t.Fatal("no queries must cost nothing")
	}
	if _, err := p.Charge(g, -1, 0); err == nil {
		t.Fatal("negative count accepted")
	}
}

func TestSessionCost(t *testing.T) {
	g := DefaultGrid()
	p := Params{Mechanism: NZCSVT, Teachers: 5, Scale: 2, Threshold: 0, MaxRefusals: 3}
	ch, err := p.Charge(g, 1000, 2)
	if err != nil {
		t.Fatal(err)
	}
	// ε = 1/2 + 2·3/12 = 1; T' = 0 leaves m = 1 only in
	// δ_split = P[ρ ≤ −1] + 3·p/(1−p), p = P[ν ≥ 1], scales 2 and 12, and
	// δ_sum = 3·P[ρ + ν ≥ 1]; δ is the smaller.
	tail := func(b, j float64) float64 { return math.Exp(-j/b) / (1 + math.Exp(-1/b)) }
	pm := tail(12, 1)
	wantDelta := min(tail(2, 1)+3*pm/(1-pm), 3*sumTailBrute(2, 12, 1))
	if !relClose(ch.PureEpsilon, 1, 1e-12) || !relClose(ch.Delta, min(wantDelta, 1), 1e-9) {
		t.Fatalf("session cost (%v, %v), want (1, %v)", ch.PureEpsilon, ch.Delta, min(wantDelta, 1))
	}
	// A high threshold makes δ small; the cost does not depend on the counts.
	p.Threshold = 400
	a, _ := p.Charge(g, 0, 0)
	b, _ := p.Charge(g, 5000, 3)
	if a.Delta != b.Delta || a.PureEpsilon != b.PureEpsilon || !(a.Delta < 1e-6) {
		t.Fatalf("session cost %+v / %+v", a, b)
	}
	conv, _ := a.Epsilon(1e-6)
	if conv.Delta != 1e-6+a.Delta || conv.Epsilon > 1.02 {
		t.Fatalf("conversion %+v", conv)
	}
}
