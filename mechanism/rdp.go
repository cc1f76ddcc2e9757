package mechanism

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Errors returned by the accounting functions.
var (
	// ErrBadOrders reports an order grid that is empty, unsorted, or has an
	// order that is not a finite number greater than 1.
	ErrBadOrders = errors.New("mechanism: Rényi orders must be finite, greater than 1 and strictly increasing")
	// ErrGridMismatch reports an attempt to compose curves on different grids.
	ErrGridMismatch = errors.New("mechanism: RDP curves are on different order grids; recompute them on one grid")
	// ErrBadDelta reports a δ outside (0, 1).
	ErrBadDelta = errors.New("mechanism: δ must be in (0, 1)")
	// ErrBadCurve reports an RDP value that is negative or NaN.
	ErrBadCurve = errors.New("mechanism: an RDP value must be a non-negative number or +Inf")
)

// Grid is a fixed, strictly increasing set of Rényi orders α > 1 on which
// RDP curves are evaluated and composed. The zero Grid is empty and unusable;
// build one with DefaultGrid or NewGrid.
type Grid struct {
	orders []float64
	// filter are the indices of the orders FilterEpsilon converts at,
	// ascending: those among the filter orders, or every order when none
	// is.
	filter []int
}

// newGrid returns the grid over orders, which it keeps.
func newGrid(orders []float64) Grid {
	var filter []int
	for i, a := range orders {
		if slices.Contains(filterOrders[:], a) {
			filter = append(filter, i)
		}
	}
	if len(filter) == 0 {
		for i := range orders {
			filter = append(filter, i)
		}
	}
	return Grid{orders: orders, filter: filter}
}

// DefaultGrid returns the grid every ledger charge is expressed on:
//
//	1.1, 1.2, …, 10.0     (step 0.1, 90 orders: small orders matter for long compositions)
//	11, 12, …, 64         (step 1, 54 orders)
//	80, 96, 128, 192, 256, 384, 512, 768, 1024
//
// 153 orders in all. The largest order bounds the smallest ε the conversion
// can report: log(1/δ)/(α−1) ≈ 0.011 at δ = 1e-5 and α = 1024.
func DefaultGrid() Grid {
	o := make([]float64, 0, 153)
	for i := 11; i <= 100; i++ {
		o = append(o, float64(i)/10)
	}
	for a := 11; a <= 64; a++ {
		o = append(o, float64(a))
	}
	o = append(o, 80, 96, 128, 192, 256, 384, 512, 768, 1024)
	return newGrid(o)
}

// NewGrid returns a grid over the given orders, which must be finite, greater
// than 1 and strictly increasing.
func NewGrid(orders []float64) (Grid, error) {
	if len(orders) == 0 {
		return Grid{}, ErrBadOrders
	}
	for i, a := range orders {
		if math.IsNaN(a) || math.IsInf(a, 0) || a <= 1 || (i > 0 && a <= orders[i-1]) {
			return Grid{}, fmt.Errorf("%w (order %d is %v)", ErrBadOrders, i, a)
		}
	}
	return newGrid(slices.Clone(orders)), nil
}

// Len returns the number of orders.
func (g Grid) Len() int { return len(g.orders) }

// Orders returns a copy of the orders.
func (g Grid) Orders() []float64 { return slices.Clone(g.orders) }

// Order returns the i-th order.
func (g Grid) Order(i int) float64 { return g.orders[i] }

// Equal reports whether two grids have the same orders.
func (g Grid) Equal(h Grid) bool { return slices.Equal(g.orders, h.orders) }

// Curve is an RDP guarantee: at each order α of its grid, the Rényi divergence
// of order α between the outputs on any two neighbouring inputs is at most the
// curve's value. +Inf means no bound at that order. Curves are immutable.
type Curve struct {
	grid Grid
	eps  []float64
}

// Zero returns the curve of a mechanism that reveals nothing.
func (g Grid) Zero() Curve {
	return Curve{grid: g, eps: make([]float64, len(g.orders))}
}

// Eval builds a curve by evaluating f at every order. Values that are NaN or
// negative are treated as an error in f and reported as +Inf (no bound), never
// as a small number.
func (g Grid) Eval(f func(alpha float64) float64) Curve {
	eps := make([]float64, len(g.orders))
	for i, a := range g.orders {
		v := f(a)
		if math.IsNaN(v) || v < 0 {
			v = math.Inf(1)
		}
		eps[i] = v
	}
	return Curve{grid: g, eps: eps}
}

// CurveOf returns the curve with the given values, one per order.
func (g Grid) CurveOf(values []float64) (Curve, error) {
	if len(values) != len(g.orders) {
		return Curve{}, fmt.Errorf("%w: %d values for %d orders", ErrGridMismatch, len(values), len(g.orders))
	}
	for i, v := range values {
		if math.IsNaN(v) || v < 0 {
			return Curve{}, fmt.Errorf("%w (order %v has %v)", ErrBadCurve, g.orders[i], v)
		}
	}
	return Curve{grid: g, eps: slices.Clone(values)}, nil
}

// Grid returns the curve's grid.
func (c Curve) Grid() Grid { return c.grid }

// Values returns a copy of the curve's values, one per order.
func (c Curve) Values() []float64 { return slices.Clone(c.eps) }

// At returns the value at the i-th order.
func (c Curve) At(i int) float64 { return c.eps[i] }

// IsZero reports whether the curve is zero at every order.
func (c Curve) IsZero() bool {
	for _, v := range c.eps {
		if v != 0 {
			return false
		}
	}
	return true
}

// Compose returns the curve of running both mechanisms (adaptive composition
// adds RDP order by order).
func (c Curve) Compose(d Curve) (Curve, error) {
	if !c.grid.Equal(d.grid) {
		return Curve{}, ErrGridMismatch
	}
	out := make([]float64, len(c.eps))
	for i := range out {
		out[i] = c.eps[i] + d.eps[i]
	}
	return Curve{grid: c.grid, eps: out}, nil
}

// Times returns the curve of k-fold composition. k must be non-negative.
func (c Curve) Times(k int) Curve {
	if k < 0 {
		panic("mechanism: negative composition count")
	}
	out := make([]float64, len(c.eps))
	for i, v := range c.eps {
		if v == 0 || k == 0 {
			continue
		}
		out[i] = v * float64(k)
	}
	return Curve{grid: c.grid, eps: out}
}

// Conversion is an (ε, δ) guarantee derived from an RDP curve.
type Conversion struct {
	Epsilon float64 // +Inf when no order gives a bound
	Delta   float64
	Order   float64 // the order at which the minimum was attained (0 when ε is +Inf)
}

// Epsilon converts the curve to (ε, δ)-DP with the tight conversion of
// Canonne, Kamath and Steinke (2020, Proposition 12) and Asoodeh et al. (2021):
//
//	ε = min over α of  RDP(α) + log((α−1)/α) − (log δ + log α)/(α−1),
//
// clamped at 0 from below. It is never looser than the classic
// RDP(α) + log(1/δ)/(α−1) of Mironov (2017), which EpsilonClassic computes.
func (c Curve) Epsilon(delta float64) (Conversion, error) {
	return c.convert(delta, func(rdp, a float64) float64 {
		return rdp + math.Log((a-1)/a) - (math.Log(delta)+math.Log(a))/(a-1)
	})
}

// FilterOrders are the orders at which FilterEpsilon converts: a geometric
// subset of the default grid. A union bound over m orders costs log(m)/(α−1)
// in ε; seventeen well-spread orders cost less than the grid's 153 while
// losing little to the coarser minimum.
var filterOrders = [...]float64{1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024}

// FilterEpsilon converts a running total of RDP charges that were chosen
// adaptively — each charge's curve may depend on the outputs released before
// it, as a privacy ledger's charges do — to (ε, δ)-DP:
//
//	ε = min over α in F of  RDP(α) + log((α−1)/α) − (log(δ/m) + log α)/(α−1),
//
// the tight conversion of Epsilon taken at δ/m at each of the m orders F of
// the grid that are among the filter orders (1.5, 2, 3, 4, 6, 8, 12, 16, 24,
// 32, 48, 64, 96, 128, 256, 512, 1024; every order of a grid that has none
// of them). A gate that releases an output only while this ε stays within a
// cap keeps the whole adaptive transcript (ε, δ)-DP: for each order, exp((α−1)
// (L − S(α))) — the privacy loss L less the running sum S of the charges at α
// — is a non-negative supermartingale, the tight conversion's pointwise bound
// applies at the stopping time through optional stopping, and a union over
// the m orders costs δ/m each. Package ledger's documentation states the
// argument in full.
func (c Curve) FilterEpsilon(delta float64) (Conversion, error) {
	logM := math.Log(float64(len(c.grid.filter)))
	return c.convertAt(delta, c.grid.filter, func(rdp, a float64) float64 {
		return rdp + math.Log((a-1)/a) - (math.Log(delta)-logM+math.Log(a))/(a-1)
	})
}

// EpsilonClassic converts with Mironov's (2017, Proposition 3) conversion
// ε = min over α of RDP(α) + log(1/δ)/(α−1). It is looser than Epsilon and is
// provided to compare with tools that use it (such as PATE's reference
// analysis); ledger charges use Epsilon.
func (c Curve) EpsilonClassic(delta float64) (Conversion, error) {
	return c.convert(delta, func(rdp, a float64) float64 {
		return rdp - math.Log(delta)/(a-1)
	})
}

func (c Curve) convert(delta float64, f func(rdp, alpha float64) float64) (Conversion, error) {
	return c.convertAt(delta, nil, f)
}

// convertAt minimises f over the orders of the given indices, ascending
// (every order when at is nil).
func (c Curve) convertAt(delta float64, at []int, f func(rdp, alpha float64) float64) (Conversion, error) {
	if math.IsNaN(delta) || delta <= 0 || delta >= 1 {
		return Conversion{}, fmt.Errorf("%w (got %v)", ErrBadDelta, delta)
	}
	best := Conversion{Epsilon: math.Inf(1), Delta: delta}
	try := func(i int) {
		if math.IsInf(c.eps[i], 1) {
			return
		}
		if e := f(c.eps[i], c.grid.orders[i]); e < best.Epsilon {
			best.Epsilon, best.Order = e, c.grid.orders[i]
		}
	}
	if at == nil {
		for i := range c.grid.orders {
			try(i)
		}
	} else {
		for _, i := range at {
			try(i)
		}
	}
	if best.Epsilon < 0 {
		best.Epsilon = 0
	}
	return best, nil
}

// PureDP returns the RDP curve implied by ε-differential privacy. Every ε-DP
// mechanism is dominated by randomized response with parameter ε (Kairouz, Oh
// and Viswanath 2015), so its Rényi divergence of order α is at most
//
//	1/(α−1) · log( p^α q^(1−α) + q^α p^(1−α) ),  p = e^ε/(1+e^ε), q = 1/(1+e^ε),
//
// It is computed in the log domain and rounded up by a bound on its
// floating-point error, then capped by ε and by Bun and Steinke's (2016) αε²/2,
// both of which also hold for every ε-DP mechanism. An astronomically large ε
// gives the curve ε, and ε = +Inf gives +Inf.
func PureDP(g Grid, eps float64) Curve {
	if math.IsNaN(eps) || eps < 0 {
		return g.Eval(func(float64) float64 { return math.Inf(1) })
	}
	if eps == 0 {
		return g.Zero()
	}
	if math.IsInf(eps, 1) {
		return g.Eval(func(float64) float64 { return math.Inf(1) })
	}
	logP := -softplus(-eps) // log(e^ε/(1+e^ε))
	logQ := -softplus(eps)  // log(1/(1+e^ε))
	return g.Eval(func(a float64) float64 {
		t1 := a*logP + (1-a)*logQ
		t2 := a*logQ + (1-a)*logP
		d := logSumExp(t1, t2) / (a - 1)
		d += 1e-14 * (math.Abs(t1) + math.Abs(t2) + 1) / (a - 1)
		return max(0, min(d, eps, a*eps*eps/2))
	})
}

// Gaussian returns the RDP curve α·Δ²/(2σ²) of adding Gaussian noise N(0, σ²)
// (or discrete Gaussian noise N_Z(0, σ²), Canonne, Kamath and Steinke 2020,
// Theorem 15, for integer-valued queries) to a query of ℓ2 sensitivity Δ.
// An overflowing value is +Inf, never a small number.
func Gaussian(g Grid, l2Sensitivity, sigma float64) Curve {
	if math.IsNaN(sigma) || math.IsNaN(l2Sensitivity) || sigma <= 0 || l2Sensitivity < 0 {
		return g.Eval(func(float64) float64 { return math.Inf(1) })
	}
	r := (l2Sensitivity / sigma) * (l2Sensitivity / sigma) / 2
	return g.Eval(func(a float64) float64 { return a * r })
}

// softplus returns log(1 + e^x) without overflow.
func softplus(x float64) float64 {
	if x > 0 {
		return x + math.Log1p(math.Exp(-x))
	}
	return math.Log1p(math.Exp(x))
}

// logSumExp returns log(e^a + e^b) without overflow.
func logSumExp(a, b float64) float64 {
	if a < b {
		a, b = b, a
	}
	if math.IsInf(a, -1) {
		return a
	}
	return a + math.Log1p(math.Exp(b-a))
}
