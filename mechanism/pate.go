package mechanism

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sort"
	"sync"
)

// Data-dependent analysis of GNMax and Confident-GNMax (Papernot et al.
// 2018, "Scalable Private Learning with PATE", Theorem 6, Propositions 7, 8
// and 10). The formulas follow the paper and agree with its published
// reference analysis (research/pate_2018/core.py of tensorflow/privacy).
//
// These numbers depend on the votes. They are NOT differentially private
// and must never be published unsanitised or charged to a ledger as if
// they were: use them for analysis, or publish them through
// ReleaseSmoothSensitivity. Ledger charges use the data-independent costs
// (Params.Charge).
//
// Theorem 6 needs an upper bound q̃ on the probability of a non-argmax
// answer. PATE 2018's Proposition 7 (QContinuous, LogQGaussian) is for
// continuous Gaussian noise; GNMax here samples the discrete Gaussian
// N_Z(0, σ²), for which it is not an upper bound at small gaps. QDiscrete
// (LogQDiscreteGaussian) is one: for iid Z_j, Z_* ~ N_Z(0, σ²) and an
// integer h ≥ 1,
//
//	P[Z_j − Z_* ≥ h] ≤ κ(σ) · P[N(0, 2σ²) ≥ h − 1],  κ(σ) = θ(π²σ²)/θ(2π²σ²)²,  θ(t) = Σ_k e^{−t k²}.
//
// Proof: P[Z_j − Z_* = w] = e^{−w²/4σ²} Σ_a e^{−(2a+w)²/4σ²} / N², N =
// Σ_a e^{−a²/2σ²}; by Poisson summation the inner sum is at most its value
// at even w, √π σ θ(π²σ²), and N = √(2π) σ θ(2π²σ²); and for w ≥ 1,
// e^{−w²/4σ²} ≤ ∫_{w−1}^{w} e^{−u²/4σ²} du. κ(σ) − 1 < 3e^{−π²σ²} (below
// 1e-4 for σ ≥ 1). Class j beats the top class i* only if Z_j − Z_* ≥ g_j
// (j < i*) or g_j + 1 (j > i*), where g_j is the gap; the discrete bound
// uses h = g_j for every j, which ignores the class order. The cap
// q̃ ≤ 1 − 1/m holds for both noises because i* is at least as likely an
// answer as any other class (swap the two noises). The threshold test of
// Confident-GNMax uses P[Z ≥ m] ≤ P[N(0, σ²) ≥ m − 1] for integers m ≥ 1
// (the same two facts for one variable).

// ErrBadAnalysis reports inputs the data-dependent analysis cannot use.
var ErrBadAnalysis = errors.New("mechanism: bad input to the data-dependent analysis")

const logSqrtPi = 0.5723649429247001 // log √π

// logErfc returns log(erfc(z)), accurate for large z where erfc underflows.
func logErfc(z float64) float64 {
	if z < 25 {
		return math.Log(math.Erfc(z))
	}
	// Asymptotic expansion: erfc(z) = e^{−z²}/(z√π) · (1 − 1/(2z²) + 3/(4z⁴) − 15/(8z⁶) + 105/(16z⁸) − …);
	// at z ≥ 25 the omitted terms are below 1e-15 relative.
	w := 1 / (2 * z * z)
	s := 1 - w*(1-3*w*(1-5*w*(1-7*w)))
	return -z*z - math.Log(z) - logSqrtPi + math.Log(s)
}

// logNormSF returns log P[N(0, scale²) ≥ x].
func logNormSF(x, scale float64) float64 {
	return logErfc(x/(scale*math.Sqrt2)) - math.Ln2
}

// erfcinv returns y with erfc(y) = x for x ∈ (0, 2), accurate for tiny x
// (math.Erfcinv computes Erfinv(1−x), which loses all precision there).
func erfcinv(x float64) float64 {
	switch {
	case x <= 0:
		return math.Inf(1)
	case x >= 2:
		return math.Inf(-1)
	case x > 1:
		return -erfcinv(2 - x)
	}
	y := math.Erfcinv(x)
	if x < 1e-10 || math.IsInf(y, 0) {
		// Start from the leading asymptotic term: y² ≈ −log(x·y·√π).
		l := -math.Log(x)
		y = math.Sqrt(l)
		for range 5 {
			y = math.Sqrt(max(l-math.Log(y)-logSqrtPi, 1e-300))
		}
	}
	lx := math.Log(x)
	for range 50 { // Newton on g(y) = log erfc(y) − log x
		le := logErfc(y)
		g := le - lx
		dg := -2 / math.Sqrt(math.Pi) * math.Exp(-y*y-le)
		step := g / dg
		y -= step
		if math.Abs(step) <= 1e-15*math.Max(1, math.Abs(y)) {
			break
		}
	}
	return y
}

// log1mexp returns log(1 − e^x) for x ≤ 0.
func log1mexp(x float64) float64 {
	switch {
	case x < -1:
		return math.Log1p(-math.Exp(x))
	case x < 0:
		return math.Log(-math.Expm1(x))
	case x == 0:
		return math.Inf(-1)
	}
	return math.NaN()
}

// log1pSmall returns log(1+x) for 0 ≤ x ≤ 1, faster than math.Log1p: a
// series below 0.01 (omitted terms below x⁸/8, i.e. 1e-16 relative), else
// math.Log(1+x) (rounding of 1+x costs at most 1e-14 relative there).
func log1pSmall(x float64) float64 {
	if x < 0.01 {
		return x * (1 - x*(1.0/2-x*(1.0/3-x*(1.0/4-x*(1.0/5-x*(1.0/6-x/7))))))
	}
	return math.Log(1 + x)
}

// logAddExp returns log(e^a + e^b).
func logAddExp(a, b float64) float64 { return logSumExp(a, b) }

// LogQGaussian returns PATE 2018's upper bound (Proposition 7) on
// log P[GNMax(h) ≠ argmax h] for Gaussian noise σ: the union bound
// Σ_{j ≠ top} P[N(0, 2σ²) ≥ h_top − h_j], capped at log(1 − 1/m) for m
// classes. One class gives −Inf (the answer is fixed).
func LogQGaussian(h Histogram, sigma float64) float64 {
	return logQShift(h, sigma, 0, 0)
}

// logQShift is log(e^{logK} Σ_{j≠top} P[N(0, 2σ²) ≥ g_j − shift]) capped
// at log(1 − 1/m).
func logQShift(h Histogram, sigma float64, shift int, logK float64) float64 {
	if len(h) < 2 {
		return math.Inf(-1)
	}
	top := h.Top()
	scale := math.Sqrt(2) * sigma
	// log Σ e^{l_j}, shifted by the largest term (the smallest gap).
	minGap := -1
	for j, n := range h {
		if j != top && (minGap < 0 || h[top]-n < minGap) {
			minGap = h[top] - n
		}
	}
	lmax := logNormSF(float64(minGap-shift), scale)
	sum := 0.0
	for j, n := range h {
		if j != top {
			sum += math.Exp(logNormSF(float64(h[top]-n-shift), scale) - lmax)
		}
	}
	return min(logK+lmax+math.Log(sum), math.Log(1-1/float64(len(h))))
}

// QBound selects the bound q̃ of Theorem 6.
type QBound string

// The bounds.
const (
	// QContinuous is PATE 2018's Proposition 7 for continuous Gaussian
	// noise: the formula of the paper's reference analysis.
	QContinuous QBound = "continuous"
	// QDiscrete holds for the discrete Gaussian noise GNMax samples here.
	QDiscrete QBound = "discrete"
)

func (b QBound) check() error {
	if b != QContinuous && b != QDiscrete {
		return fmt.Errorf("%w: the q bound must be %q or %q, not %q", ErrBadAnalysis, QDiscrete, QContinuous, b)
	}
	return nil
}

// theta returns θ(t) = Σ_k e^{−t k²}.
func theta(t float64) float64 {
	s := 1.0
	for k := 1.0; ; k++ {
		v := 2 * math.Exp(-t*k*k)
		s += v
		if v < 1e-18*s {
			return s
		}
	}
}

// logKappa returns log κ(σ), rounded up, for LogQDiscreteGaussian.
func logKappa(sigma float64) float64 {
	if sigma >= 0.5 {
		return math.Log(theta(math.Pi*math.Pi*sigma*sigma)) - 2*math.Log(theta(2*math.Pi*math.Pi*sigma*sigma)) + 1e-12
	}
	// Small σ: by Poisson summation κ = 2√π σ · Σ_a e^{−a²/σ²} / (Σ_a e^{−a²/2σ²})².
	return math.Log(2*math.Sqrt(math.Pi)*sigma) + math.Log(theta(1/(sigma*sigma))) - 2*math.Log(theta(1/(2*sigma*sigma))) + 1e-12
}

// LogQDiscreteGaussian returns an upper bound on log P[GNMax(h) ≠ argmax h]
// for GNMax with discrete Gaussian noise N_Z(0, σ²), as this package runs
// it: log κ(σ) + log Σ_{j ≠ top} P[N(0, 2σ²) ≥ g_j − 1], capped at
// log(1 − 1/m) (see the note on QBound above).
func LogQDiscreteGaussian(h Histogram, sigma float64) float64 {
	return logQShift(h, sigma, 1, logKappa(sigma))
}

// LogQ returns the bound b on log P[GNMax(h) ≠ argmax h].
func (b QBound) LogQ(h Histogram, sigma float64) float64 {
	if b == QDiscrete {
		return LogQDiscreteGaussian(h, sigma)
	}
	return LogQGaussian(h, sigma)
}

// gnmaxDD holds the per-query constants of Theorem 6 for one logq.
type gnmaxDD struct {
	active bool    // the data-dependent bound applies at some order
	mu1    float64 // the order limit: the bound applies at α < mu1
	log1q  float64
	logq   float64
	a, b   float64 // log_a = (α−1)·a, log_b = (α−1)·b
}

func newGNMaxDD(logq, sigma float64) gnmaxDD {
	variance := sigma * sigma
	mu2 := math.Sqrt(variance * -logq)
	mu1 := mu2 + 1
	eps1, eps2 := mu1/variance, mu2/variance
	d := gnmaxDD{mu1: mu1, logq: logq}
	if !(mu2 > 1) {
		return d
	}
	logA2 := (mu2 - 1) * eps2
	if !(logq <= logA2-mu2*(math.Log(1+1/(mu1-1))+math.Log(1+1/(mu2-1))) && -logq > eps2) {
		return d
	}
	d.active = true
	d.log1q = log1mexp(logq)
	d.a = d.log1q - log1mexp((logq+eps2)*(1-1/mu2))
	d.b = eps1 - logq/(mu1-1)
	return d
}

// at returns min(α/σ², data-dependent bound) at order α.
func (d gnmaxDD) at(alpha, variance float64) float64 {
	ind := alpha / variance
	if !d.active || !(d.mu1 > alpha) {
		return ind
	}
	u, w := d.log1q+(alpha-1)*d.a, d.logq+(alpha-1)*d.b
	if u < w {
		u, w = w, u
	}
	x := math.Exp(w - u)
	// log(1+x) ≥ x − x²/2: when even that puts the bound above α/σ², the
	// data-independent value wins and the logarithm is not needed.
	if (u+x-x*x/2)/(alpha-1) >= ind {
		return ind
	}
	return min(ind, (u+log1pSmall(x))/(alpha-1))
}

// RDPGaussian returns PATE 2018's data-dependent RDP bound of one GNMax
// answer (Theorem 6 with the orders μ1, μ2 of Proposition 10) given
// logq ≥ log P[answer ≠ argmax]: at each order α it is the smaller of the
// data-independent α/σ² and Theorem 6's bound, the latter used only where
// its conditions hold (μ2 > 1, α < μ1, q small enough for the bound to be
// increasing in q, −log q > μ2/σ²). logq = −Inf (the answer is certain)
// gives 0.
func RDPGaussian(g Grid, logq, sigma float64) (Curve, error) {
	if math.IsNaN(logq) || logq > 0 || !(sigma > 0) || math.IsInf(sigma, 0) {
		return Curve{}, fmt.Errorf("%w: logq = %v (must be ≤ 0), σ = %v (must be > 0)", ErrBadAnalysis, logq, sigma)
	}
	if math.IsInf(logq, -1) {
		return g.Zero(), nil
	}
	d := newGNMaxDD(logq, sigma)
	v := sigma * sigma
	return g.Eval(func(a float64) float64 { return d.at(a, v) }), nil
}

// RDPDataIndependentGaussian returns α/σ² (PATE 2018, Proposition 8), the
// data-independent RDP of one GNMax answer.
func RDPDataIndependentGaussian(g Grid, sigma float64) Curve {
	return gaussianRDP(g, sigma, 1)
}

// GNMaxDataDependent returns the data-dependent RDP of answering every
// histogram with GNMax(σ) (the sum over queries of RDPGaussian(LogQGaussian))
// and the per-query logq. Analysis only: see the package note above.
func GNMaxDataDependent(g Grid, hs []Histogram, sigma float64) (Curve, []float64, error) {
	return GNMaxDataDependentBound(g, hs, sigma, QContinuous)
}

// GNMaxDataDependentBound is GNMaxDataDependent with the q bound b; with
// QDiscrete it holds for the discrete Gaussian noise GNMax samples here.
func GNMaxDataDependentBound(g Grid, hs []Histogram, sigma float64, b QBound) (Curve, []float64, error) {
	if err := b.check(); err != nil {
		return Curve{}, nil, err
	}
	if !(sigma > 0) || math.IsInf(sigma, 0) {
		return Curve{}, nil, fmt.Errorf("%w: σ = %v", ErrBadAnalysis, sigma)
	}
	return gnmaxDataDependent(g, hs, sigma, b, runtime.GOMAXPROCS(0))
}

// gnmaxDataDependent is GNMaxDataDependentBound on up to workers
// goroutines. Its result is the same, bit for bit, for any workers: the
// queries' bounds are found in parallel, and each order's total is summed
// by one goroutine, over the queries in their order, as one would be.
func gnmaxDataDependent(g Grid, hs []Histogram, sigma float64, b QBound, workers int) (Curve, []float64, error) {
	v := sigma * sigma
	logqs := make([]float64, len(hs))
	// ds[i] are query i's constants, and from[i] the first order at which
	// its bound is α/σ² (-1 for a query certain to be answered, which adds
	// nothing).
	ds := make([]gnmaxDD, len(hs))
	from := make([]int, len(hs))
	workers = max(1, min(workers, len(hs)))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			cache := map[float64]gnmaxDD{}
			for i := w; i < len(hs); i += workers {
				lq := b.LogQ(hs[i], sigma)
				logqs[i] = lq
				if math.IsInf(lq, -1) {
					from[i] = -1
					continue
				}
				d, ok := cache[lq]
				if !ok {
					d = newGNMaxDD(lq, sigma)
					cache[lq] = d
				}
				ds[i] = d
				// Orders are increasing: from the first order ≥ μ1 on (or
				// from the start when the bound is inactive) the value is
				// α/σ², added in bulk below.
				if d.active {
					from[i] = sort.SearchFloat64s(g.orders, d.mu1)
				}
			}
		})
	}
	wg.Wait()
	total := make([]float64, g.Len())
	for w := range workers {
		wg.Go(func() {
			for k := w; k < len(g.orders); k += workers {
				a := g.orders[k]
				for i := range ds {
					if k < from[i] {
						total[k] += ds[i].at(a, v)
					}
				}
			}
		})
	}
	wg.Wait()
	indFrom := make([]int, g.Len()+1)
	for _, f := range from {
		if f >= 0 {
			indFrom[f]++
		}
	}
	run := 0
	for k, a := range g.orders {
		run += indFrom[k]
		if run > 0 {
			total[k] += float64(run) * (a / v)
		}
	}
	c, err := g.CurveOf(total)
	return c, logqs, err
}

// LogPrAnswered returns log P[max(h) + N(0, σ1²) ≥ T], the probability that
// Confident-GNMax answers (PATE 2018; max(h) is an integer here).
func LogPrAnswered(h Histogram, threshold, sigma1 float64) float64 {
	return logNormSF(threshold-float64(h[h.Top()]), sigma1)
}

// RDPThreshold returns the data-dependent RDP of Confident-GNMax's threshold
// test given log P[answered]: the test has sensitivity 1, so it is Theorem 6
// for Gaussian noise √2·σ1 with q = min(P[answered], P[refused]).
func RDPThreshold(g Grid, logPrAnswered, sigma1 float64) (Curve, error) {
	logq := min(logPrAnswered, log1mexp(logPrAnswered))
	return RDPGaussian(g, logq, math.Sqrt2*sigma1)
}

// thresholdLogQ returns the q̃ of the threshold test when the top count is
// v: min(P[answered], P[refused]) for QContinuous (as PATE 2018); for
// QDiscrete, with answering iff Z ≥ m = ⌈T − v⌉, Z ~ N_Z(0, σ1²), the
// bounds P[Z ≥ m] ≤ P[N(0, σ1²) ≥ m − 1] (m ≥ 1) and
// P[Z ≤ m − 1] ≤ P[N(0, σ1²) ≥ −m] (m ≤ 0), capped at 1/2.
func thresholdLogQ(b QBound, v int, threshold, sigma1 float64) float64 {
	if b == QContinuous {
		lp := logNormSF(threshold-float64(v), sigma1)
		return min(lp, log1mexp(lp))
	}
	m := math.Ceil(threshold - float64(v))
	lq := -math.Ln2
	if m >= 1 {
		lq = min(lq, logNormSF(m-1, sigma1))
	}
	if m <= 0 {
		lq = min(lq, logNormSF(-m, sigma1))
	}
	return lq
}

// ConfidentDataDependent returns the data-dependent RDP of Confident-GNMax
// on the histograms, counting every query as answered (an upper bound: a
// refused query costs only its threshold test), with PATE 2018's bounds.
// Analysis only.
func ConfidentDataDependent(g Grid, hs []Histogram, threshold, sigma1, sigma2 float64) (Curve, error) {
	return ConfidentDataDependentBound(g, hs, threshold, sigma1, sigma2, QContinuous)
}

// ConfidentDataDependentBound is ConfidentDataDependent with the q bound b.
func ConfidentDataDependentBound(g Grid, hs []Histogram, threshold, sigma1, sigma2 float64, b QBound) (Curve, error) {
	total := g.Zero()
	ans, _, err := GNMaxDataDependentBound(g, hs, sigma2, b)
	if err != nil {
		return Curve{}, err
	}
	total, _ = total.Compose(ans)
	if !(sigma1 > 0) || math.IsInf(sigma1, 0) {
		return Curve{}, fmt.Errorf("%w: σ1 = %v", ErrBadAnalysis, sigma1)
	}
	for _, h := range hs {
		c, err := RDPGaussian(g, thresholdLogQ(b, h[h.Top()], threshold, sigma1), math.Sqrt2*sigma1)
		if err != nil {
			return Curve{}, err
		}
		total, _ = total.Compose(c)
	}
	return total, nil
}
