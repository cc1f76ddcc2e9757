package audit

import (
	"errors"
	"fmt"
	"math"

	"github.com/nzcfed/nzc/mechanism"
)

// ErrNoExact reports a mechanism the exact analysis does not cover: nzc-svt,
// whose sessions are audited by sampling (SessionAudit).
var ErrNoExact = errors.New("audit: the exact two-class analysis covers nzc, lnmax, gnmax and confident-gnmax")

// Exact is the exact privacy loss of one query of a mechanism over every pair
// of neighbouring two-class histograms of its ensemble: (a, t−a) against
// (a−1, t−a+1), for a = 1 … t, in both directions. Unlike a sampled lower
// bound it has no statistical error, and it sees the pairs where the loss
// peaks — for GNMax a top-two gap of several σ, far from the ties.
type Exact struct {
	// Epsilon is the smallest ε such that every pair is (ε, Delta)-close:
	// the mechanism's true ε at Delta on two-class histograms, a lower
	// bound on its ε over all histograms. +Inf when some output has
	// probability above Delta on one side and 0 on the other.
	Epsilon float64
	Delta   float64
	// Witness names the pair and direction that attains Epsilon.
	Witness string
	// A is the count of class 0 on the first histogram of the witness pair.
	A int
}

// ExactTwoClass computes the exact two-class ε at delta (0 for pure ε) of
// one query of p's mechanism with p.Teachers teachers. The output
// distributions are computed from the noise's probability mass functions
// (discrete Gaussian and discrete Laplace, truncated where the omitted mass
// is below 1e-30), with small tails summed from the far end.
func ExactTwoClass(p mechanism.Params, delta float64) (Exact, error) {
	p.Classes = 2
	if err := p.Validate(); err != nil {
		return Exact{}, err
	}
	if !(delta >= 0 && delta < 1) {
		return Exact{}, fmt.Errorf("%w: δ %v", ErrBadConfig, delta)
	}
	out := func(n [2]int) ([3]float64, error) { return twoClassOutputs(p, n) }
	switch p.Mechanism {
	case mechanism.NZC, mechanism.LNMax, mechanism.GNMax, mechanism.ConfidentGNMax:
	default:
		return Exact{}, ErrNoExact
	}
	t := p.Teachers
	best := Exact{Delta: delta, Epsilon: 0, A: -1}
	for a := 1; a <= t; a++ {
		d, err := out([2]int{a, t - a})
		if err != nil {
			return Exact{}, err
		}
		d2, err := out([2]int{a - 1, t - a + 1})
		if err != nil {
			return Exact{}, err
		}
		for dir, pq := range [2][2][3]float64{{d, d2}, {d2, d}} {
			e := epsilonAtDelta(pq[0][:], pq[1][:], delta)
			if e > best.Epsilon || best.A < 0 {
				best.Epsilon, best.A = e, a
				from, to := fmt.Sprintf("[%d %d]", a, t-a), fmt.Sprintf("[%d %d]", a-1, t-a+1)
				if dir == 1 {
					from, to = to, from
				}
				best.Witness = fmt.Sprintf("%s against %s", from, to)
			}
		}
	}
	return best, nil
}

// epsilonAtDelta returns the smallest ε ≥ 0 with Σ_o max(0, P_o − e^ε Q_o) ≤ δ.
func epsilonAtDelta(p, q []float64, delta float64) float64 {
	excess := func(eps float64) float64 {
		s := 0.0
		for i := range p {
			if d := p[i] - math.Exp(eps)*q[i]; d > 0 {
				s += d
			}
		}
		return s
	}
	if excess(0) <= delta {
		return 0
	}
	// Above δ even as ε → ∞: mass where Q has none.
	s := 0.0
	for i := range p {
		if q[i] == 0 {
			s += p[i]
		}
	}
	if s > delta {
		return math.Inf(1)
	}
	lo, hi := 0.0, 1.0
	for excess(hi) > delta {
		lo, hi = hi, 2*hi
		if hi > 1e6 {
			return math.Inf(1)
		}
	}
	for range 200 {
		mid := (lo + hi) / 2
		if excess(mid) > delta {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// pmf is a noise distribution on the integers −r … r.
type pmf struct {
	r int
	w []float64 // w[x+r]
}

func newPMF(logw func(x float64) float64, r int) pmf {
	w := make([]float64, 2*r+1)
	for x := -r; x <= r; x++ {
		w[x+r] = math.Exp(logw(float64(x)))
	}
	// Normalise, summing small terms first.
	tot := 0.0
	for i := 0; i < r; i++ {
		tot += w[i] + w[2*r-i]
	}
	tot += w[r]
	for i := range w {
		w[i] /= tot
	}
	return pmf{r: r, w: w}
}

// noisePMF returns the discrete Gaussian (sigma > 0) or discrete Laplace
// (scale > 0) distribution on −r … r, r = reach + a margin past which the
// omitted mass is below e^-70 of the smallest tail evaluated at reach.
func noisePMF(sigma, scale float64, reach int) (pmf, error) {
	switch {
	case sigma > 0:
		r := reach + int(math.Ceil(sigma*12)) + 2
		if r > 1<<20 {
			return pmf{}, fmt.Errorf("audit: σ %v is too large for the exact analysis", sigma)
		}
		return newPMF(func(x float64) float64 { return -x * x / (2 * sigma * sigma) }, r), nil
	case scale > 0:
		r := reach + int(math.Ceil(scale*70)) + 2
		if r > 1<<20 {
			return pmf{}, fmt.Errorf("audit: scale %v is too large for the exact analysis", scale)
		}
		return newPMF(func(x float64) float64 { return -math.Abs(x) / scale }, r), nil
	}
	return pmf{}, errors.New("audit: no noise")
}

// diffTails returns the distribution of Z1 − Z0 for independent Z0, Z1 ~ f as
// two cumulative arrays over k = −2r … 2r: le[k] = P[D ≤ k] summed from the
// left and gt[k] = P[D > k] summed from the right, so both small tails keep
// their relative precision.
func diffTails(f pmf) (le, gt []float64) {
	r := f.r
	n := 4*r + 1
	d := make([]float64, n)
	for x := -r; x <= r; x++ {
		for y := -r; y <= r; y++ {
			d[y-x+2*r] += f.w[x+r] * f.w[y+r]
		}
	}
	le, gt = make([]float64, n), make([]float64, n)
	s := 0.0
	for i := range n {
		s += d[i]
		le[i] = s
	}
	s = 0
	for i := n - 1; i >= 0; i-- {
		gt[i] = s
		s += d[i]
	}
	return le, gt
}

// argmaxTwo returns P[label 0] and P[label 1] of argmax(n + bonus + Z) with
// ties to class 0, where thr = n0' − n1' (bonus included).
func argmaxTwo(le, gt []float64, r int, thr float64) (p0, p1 float64) {
	// Label 0 iff Z1 − Z0 ≤ thr.
	switch {
	case thr >= float64(2*r):
		return 1, 0
	case thr < float64(-2*r):
		return 0, 1
	}
	k := int(math.Floor(thr)) + 2*r
	return le[k], gt[k]
}

// twoClassOutputs returns P[label 0], P[label 1], P[refused] of one query.
func twoClassOutputs(p mechanism.Params, n [2]int) ([3]float64, error) {
	var out [3]float64
	gap := float64(n[0] - n[1])
	switch p.Mechanism {
	case mechanism.NZC:
		sigma, scale := 0.0, p.Scale
		if p.Noise == mechanism.NoiseGaussian {
			sigma, scale = p.Sigma, 0
		}
		f, err := noisePMF(sigma, scale, p.Teachers)
		if err != nil {
			return out, err
		}
		le, gt := diffTails(f)
		thr := gap + p.Constant // the bonus goes to the top count, ties to class 0
		if n[1] > n[0] {
			thr = gap - p.Constant
		}
		out[0], out[1] = argmaxTwo(le, gt, f.r, thr)
	case mechanism.LNMax, mechanism.GNMax:
		f, err := noisePMF(p.Sigma, p.Scale, p.Teachers)
		if err != nil {
			return out, err
		}
		le, gt := diffTails(f)
		out[0], out[1] = argmaxTwo(le, gt, f.r, gap)
	case mechanism.ConfidentGNMax:
		test, err := noisePMF(p.Sigma1, 0, int(math.Ceil(math.Abs(p.Threshold)))+p.Teachers)
		if err != nil {
			return out, err
		}
		// Answered iff max(n) + Z ≥ T, i.e. Z ≥ ⌈T − max(n)⌉.
		k := int(math.Ceil(p.Threshold - float64(max(n[0], n[1]))))
		pass, refuse := 0.0, 0.0
		for x := -test.r; x <= test.r; x++ {
			if x >= k {
				continue
			}
			refuse += test.w[x+test.r]
		}
		for x := test.r; x >= -test.r && x >= k; x-- {
			pass += test.w[x+test.r]
		}
		ans, err := noisePMF(p.Sigma2, 0, p.Teachers)
		if err != nil {
			return out, err
		}
		le, gt := diffTails(ans)
		p0, p1 := argmaxTwo(le, gt, ans.r, gap)
		out[0], out[1], out[2] = pass*p0, pass*p1, refuse
	}
	return out, nil
}
