package mechanism

import (
	"fmt"
	"math"
)

// QueryCost is the data-independent privacy cost of one query of a
// per-query mechanism, valid whatever the votes are.
type QueryCost struct {
	// Answered and Refused are the RDP curves charged for a query that is
	// answered or refused (a query is charged one of the two).
	Answered, Refused Curve
	// PureAnswered and PureRefused are the pure ε of an answered or refused
	// query when the mechanism is pure DP, +Inf when it is not.
	PureAnswered, PureRefused float64
}

// Charge is a data-independent privacy cost of many queries, or of a
// session.
type Charge struct {
	RDP   Curve   // the composed RDP curve
	Delta float64 // additive δ, beyond the RDP conversion's own (sessions only)
	// PureEpsilon is the sum of the pure ε of the charged queries (a valid
	// (ε, 0)-DP guarantee); +Inf when some part is not pure DP.
	PureEpsilon float64
}

// Epsilon converts the charge to (ε, δ+Delta)-DP with the tight conversion
// at δ; the Conversion's Delta is the total δ.
func (c Charge) Epsilon(delta float64) (Conversion, error) {
	conv, err := c.RDP.Epsilon(delta)
	if err != nil {
		return conv, err
	}
	conv.Delta = delta + c.Delta
	return conv, nil
}

// QueryCost returns the per-query cost of p's mechanism (DESIGN.md,
// "Privacy model"). Every value is rounded up; a value too large for a
// float64 is +Inf, never a small number. nzc-svt has no per-query cost (its
// queries are covered by the session's cost, see Charge): both curves are
// zero.
//
//	nzc, laplace     pure ε = 2(c+1)/b   (ℓ1 sensitivity of n + c·e_top is 2c+2)
//	nzc, gaussian    RDP α(c+1)²/σ²      (ℓ2² sensitivity 2(c+1)²)
//	lnmax            pure ε = 2/b
//	gnmax            RDP α/σ²
//	confident-gnmax  RDP α/(2σ1²) for the test, every query; + α/σ2² when answered
func (p Params) QueryCost(g Grid) (QueryCost, error) {
	if err := p.Validate(); err != nil {
		return QueryCost{}, err
	}
	d, err := Lookup(p.Mechanism)
	if err != nil {
		return QueryCost{}, err
	}
	return d.QueryCost(g, p)
}

// gaussianRDP returns f·α/σ² rounded up (f = 1 for GNMax, whose ℓ2²
// sensitivity is 2; f = 1/2 for a query of sensitivity 1), the formula of
// PATE 2018's rdp_data_independent_gaussian.
func gaussianRDP(g Grid, sigma, f float64) Curve {
	v := math.Nextafter(sigma*sigma, 0) // a lower bound on σ²
	return g.Eval(func(a float64) float64 { return up(f * up(a/v)) })
}

func roundUp(c Curve) Curve {
	return c.mapIdx(func(i int) float64 { return up(c.eps[i]) })
}

func (c Curve) mapIdx(f func(i int) float64) Curve {
	out := make([]float64, len(c.eps))
	for i := range out {
		v := f(i)
		if math.IsNaN(v) || v < 0 {
			v = math.Inf(1)
		}
		out[i] = v
	}
	return Curve{grid: c.grid, eps: out}
}

// scaleUp returns k·c rounded up.
func scaleUp(c Curve, k int) Curve {
	return c.mapIdx(func(i int) float64 {
		if k == 0 || c.eps[i] == 0 {
			return 0
		}
		return up(c.eps[i] * float64(k))
	})
}

// sumUp returns a+b rounded up, +Inf absorbing.
func sumUp(a, b Curve) (Curve, error) {
	s, err := a.Compose(b)
	if err != nil {
		return s, err
	}
	return roundUp(s), nil
}

// Charge returns the data-independent cost of answering `answered` queries
// and refusing `refused` ones with p's mechanism. For a mechanism that
// answers in sessions (Kind.Sessions) it returns the fixed cost of one
// whole session, whatever the counts: pay it once, when the session opens.
func (p Params) Charge(g Grid, answered, refused int) (Charge, error) {
	if answered < 0 || refused < 0 {
		return Charge{}, fmt.Errorf("%w: negative query counts (%d answered, %d refused)", ErrBadParams, answered, refused)
	}
	if err := p.Validate(); err != nil {
		return Charge{}, err
	}
	if d, ok := sessionDef(p.Mechanism); ok {
		return d.SessionCharge(g, p)
	}
	qc, err := p.QueryCost(g)
	if err != nil {
		return Charge{}, err
	}
	return qc.Charge(answered, refused)
}

// Charge returns the cost of answering `answered` queries and refusing
// `refused` ones at this per-query cost: Params.Charge for every mechanism
// that answers per query, without recomputing the per-query cost.
func (qc QueryCost) Charge(answered, refused int) (Charge, error) {
	if answered < 0 || refused < 0 {
		return Charge{}, fmt.Errorf("%w: negative query counts (%d answered, %d refused)", ErrBadParams, answered, refused)
	}
	rdp, err := sumUp(scaleUp(qc.Answered, answered), scaleUp(qc.Refused, refused))
	if err != nil {
		return Charge{}, err
	}
	pure := 0.0
	if answered > 0 {
		pure = up(qc.PureAnswered * float64(answered))
	}
	if refused > 0 {
		pure = up(pure + up(qc.PureRefused*float64(refused)))
	}
	return Charge{RDP: rdp, PureEpsilon: pure}, nil
}
