package mechanism

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// Smooth-sensitivity release of a data-dependent privacy cost (PATE 2018,
// section 4 and appendix C; Nissim, Raskhodnikova and Smith 2007). The
// data-dependent RDP at one order λ is a function of the votes; its local
// sensitivity at distance d (how much it can change when d teachers change
// their votes) is bounded per query, discounted by e^{−βd} into a
// β-smooth sensitivity SS, and the value is published with Gaussian noise
// scaled by SS (the GNSS mechanism), whose own RDP is added to the result.

// gnmaxSS holds the per-order constants of the GNMax smooth sensitivity.
type gnmaxSS struct {
	sigma, order float64
	m            int // classes
	logq0        float64
	logq1        float64
	// q̃ = e^{logK} Σ_{j≠top} P[N(0, 2σ²) ≥ g_j − shift]: (0, 0) is PATE's
	// continuous bound, (log κ(σ), 1) the discrete one.
	logK  float64
	shift int
}

// ddBound is Theorem 6's bound at order λ without its validity checks
// (the caller compares logq with logq0).
func ddBound(sigma, logq, order float64) float64 {
	variance := sigma * sigma
	mu2 := sigma * math.Sqrt(-logq)
	mu1 := mu2 + 1
	eps1, eps2 := mu1/variance, mu2/variance
	log1q := math.Log1p(-math.Exp(logq))
	logA := (order - 1) * (log1q - math.Log1p(-math.Exp((logq+eps2)*(1-1/mu2))))
	logB := (order - 1) * (eps1 - logq/(mu1-1))
	return logAddExp(log1q+logA, logq+logB) / (order - 1)
}

// LogQ0 returns log q0(σ, λ): for log q below it the data-dependent bound of
// Theorem 6 holds and beats the data-independent λ/σ²; above it the
// data-independent bound is used (PATE 2018, appendix C).
func LogQ0(sigma, order float64) (float64, error) {
	valid := func(logq float64) bool {
		mu2 := sigma * math.Sqrt(-logq)
		mu1 := mu2 + 1
		if mu1 < order {
			return false
		}
		eps2 := mu2 / (sigma * sigma)
		return logq <= (mu2-1)*eps2-mu2*math.Log(mu1/(mu1-1)*mu2/(mu2-1))
	}
	cmp := func(logq float64) float64 { return ddBound(sigma, logq, order) - order/(sigma*sigma) }
	logub := min(-(1+1/sigma)*(1+1/sigma), -((order-.99)/sigma)*((order-.99)/sigma), -1/(sigma*sigma))
	if !valid(logub) {
		return 0, fmt.Errorf("%w: no valid q0 for σ = %v at order %v", ErrBadAnalysis, sigma, order)
	}
	if cmp(logub) < 0 {
		return logub, nil
	}
	loglb := 2 * logub
	for cmp(loglb) > 0 {
		if loglb < -1e4 {
			return 0, fmt.Errorf("%w: q0 out of range for σ = %v at order %v", ErrBadAnalysis, sigma, order)
		}
		loglb *= 1.5
	}
	// Bisection to full precision: cmp(lo) ≤ 0 < cmp(hi).
	lo, hi := loglb, logub
	for range 200 {
		mid := (lo + hi) / 2
		if mid == lo || mid == hi {
			break
		}
		if cmp(mid) > 0 {
			hi = mid
		} else {
			lo = mid
		}
	}
	return lo, nil
}

func newGNMaxSS(sigma, order float64, classes int, b QBound) (*gnmaxSS, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	s := &gnmaxSS{sigma: sigma, order: order, m: classes}
	if b == QDiscrete {
		s.logK, s.shift = logKappa(sigma), 1
	}
	var err error
	if s.logq0, err = LogQ0(sigma, order); err != nil {
		return nil, err
	}
	s.logq1 = s.logBL(s.logq0)
	return s, nil
}

func (s *gnmaxSS) rdp(logq float64) float64 {
	if logq >= s.logq0 {
		return s.order / (s.sigma * s.sigma)
	}
	return ddBound(s.sigma, logq, s.order)
}

// logBL and logBU bound log q̃ of a histogram one vote move away
// (PATE 2018, appendix C): q̃' ∈ [B_l(q̃), B_u(q̃)] with
// B(q) = (m−1)/2 · erfc(erfcinv(2q/(m−1)) ± 1/σ), applied to q̃/κ and
// scaled back by κ for the discrete bound (the gaps move the same way).
func (s *gnmaxSS) logBL(logq float64) float64 {
	k := float64(s.m - 1)
	y := erfcinv(2 * math.Exp(logq-s.logK) / k)
	return min(logq, s.logK+math.Log(k/2)+logErfc(1/s.sigma+y))
}

func (s *gnmaxSS) logBU(logq float64) float64 {
	k := float64(s.m - 1)
	y := erfcinv(2 * math.Exp(logq-s.logK) / k)
	return max(logq, min(0, s.logK+math.Log(k/2)+logErfc(-1/s.sigma+y)))
}

func (s *gnmaxSS) logQ(h Histogram) float64 { return logQShift(h, s.sigma, s.shift, s.logK) }

// localSens is Algorithm 3 of PATE 2018 (Proposition 13).
//
// The RDP lies in [0, λ/σ²], so no local sensitivity exceeds λ/σ². When
// σ is so small that q̃₀ underflows (q̃₁ = 0, log −∞), the bound's formulas
// give NaN; the cap λ/σ² is then the sound answer (the data-dependent
// region is out of reach and a neighbour may move the RDP across all of
// it), never a silent NaN that would poison the release.
func (s *gnmaxSS) localSens(logq float64) float64 {
	if s.logq1 <= logq && logq <= s.logq0 {
		logq = s.logq1
	}
	beta := s.rdp(logq)
	v := max(s.rdp(s.logBU(logq))-beta, beta-s.rdp(s.logBL(logq)))
	if limit := s.order / (s.sigma * s.sigma); !(v <= limit) {
		return limit
	}
	return v
}

// LocalSensitivityGNMax returns, for d = 0, …, teachers−1, PATE 2018's bound
// on the local sensitivity at distance d of GNMax(σ)'s data-dependent RDP at
// the given order on histogram h (Algorithms 4 and 5, in the O(teachers ·
// classes) form of the reference analysis).
func LocalSensitivityGNMax(h Histogram, teachers int, sigma, order float64) ([]float64, error) {
	s, err := newGNMaxSS(sigma, order, len(h), QContinuous)
	if err != nil {
		return nil, err
	}
	return s.localSensitivities(h, teachers, nil), nil
}

func (s *gnmaxSS) localSensitivities(h Histogram, teachers int, memo map[float64]float64) []float64 {
	res := make([]float64, teachers)
	if s.m < 2 {
		return res
	}
	ls := func(logq float64) float64 {
		if memo == nil {
			return s.localSens(logq)
		}
		v, ok := memo[logq]
		if !ok {
			v = s.localSens(logq)
			memo[logq] = v
		}
		return v
	}
	plateau := ls(s.logq1)
	for i := range res {
		res[i] = plateau
	}
	logq := s.logQ(h)
	if s.logq1 <= logq && logq <= s.logq0 {
		return res
	}
	votes := slices.Clone(h)
	slices.SortFunc(votes, func(a, b int) int { return b - a })
	res[0] = ls(logq)
	d := 0
	left := logq > s.logq0
	for (left && logq > s.logq0 && votes[1] > 0) || (!left && logq < s.logq1) {
		d++
		if d >= teachers {
			break
		}
		if left {
			votes[0]++
			votes[1]--
			for i := 1; i < len(votes)-1 && votes[i] < votes[i+1]; i++ {
				votes[i], votes[i+1] = votes[i+1], votes[i]
			}
		} else {
			votes[0]--
			votes[1]++
		}
		logq = s.logQ(votes)
		res[d] = ls(logq)
	}
	return res
}

// LocalSensitivityThreshold returns, for d = 0, …, teachers−1, PATE 2018's
// local sensitivity at distance d of Confident-GNMax's data-dependent
// threshold RDP at the given order: the largest change of RDPThreshold
// between max-counts v and v±1 at v = max(h) ± d.
func LocalSensitivityThreshold(h Histogram, teachers int, threshold, sigma1, order float64) ([]float64, error) {
	return localSensitivityThreshold(h, teachers, threshold, sigma1, order, QContinuous)
}

func localSensitivityThreshold(h Histogram, teachers int, threshold, sigma1, order float64, b QBound) ([]float64, error) {
	g, err := NewGrid([]float64{order})
	if err != nil {
		return nil, err
	}
	rdp := make([]float64, teachers+1)
	for v := range rdp {
		c, err := RDPGaussian(g, thresholdLogQ(b, v, threshold, sigma1), math.Sqrt2*sigma1)
		if err != nil {
			return nil, err
		}
		rdp[v] = c.At(0)
	}
	step := func(v int) float64 {
		out := 0.0
		if v > 0 {
			out = math.Abs(rdp[v-1] - rdp[v])
		}
		if v < teachers {
			out = max(out, math.Abs(rdp[v+1]-rdp[v]))
		}
		return out
	}
	cur := h[h.Top()]
	ls := make([]float64, teachers)
	for d := range min(max(cur, teachers-cur), teachers) {
		v := 0.0
		if cur+d <= teachers {
			v = step(cur + d)
		}
		if cur-d >= 0 {
			v = max(v, step(cur-d))
		}
		ls[d] = v
	}
	return ls, nil
}

// SmoothSensitivityParams parameterise the GNSS release.
type SmoothSensitivityParams struct {
	// Order is the Rényi order λ > 1 at which the data-dependent RDP is
	// released. Choose it without looking at the votes.
	Order float64 `json:"order"`
	// Beta is the smoothness β, 0 < β < 1/(2λ); 0 means 0.4/λ (the choice
	// of PATE 2018's experiments).
	Beta float64 `json:"beta"`
	// Sigma is the GNSS noise multiplier σ_s: the release adds
	// SS_β · σ_s · N(0, 1).
	Sigma float64 `json:"sigma"`
	// Bound is the q bound of the data-dependent analysis; "" means
	// QDiscrete, the one that holds for the noise GNMax samples here.
	Bound QBound `json:"q_bound"`
}

// SmoothSensitivityRelease is the outcome of ReleaseSmoothSensitivity.
type SmoothSensitivityRelease struct {
	SmoothSensitivityParams
	// Released is the published, noisy data-dependent RDP of the answers at
	// Order: RDP_dd(λ) + SS_β · σ_s · Z, clamped to [0, the data-independent
	// RDP at Order] (post-processing: the true value lies in that range).
	// It is a private estimate, as PATE 2018 publishes it, not a bound that
	// holds with certainty: the proven cost is the data-independent one.
	Released float64 `json:"released_rdp"`
	// ReleaseCost is the RDP at Order of the release itself (PATE 2018,
	// Theorem 23): λe^{2β}/σ_s² + (βλ − ½ log(1 − 2λβ))/(λ − 1).
	ReleaseCost float64 `json:"release_rdp"`
	// Epsilon is the published ε at Delta: Released + ReleaseCost converted
	// at Order with the tight conversion; EpsilonClassic uses
	// RDP + log(1/δ)/(λ−1) as PATE's reference does.
	Epsilon        float64 `json:"epsilon"`
	EpsilonClassic float64 `json:"epsilon_classic"`
	Delta          float64 `json:"delta"`

	// DataDependent and SmoothSensitivity are computed from the raw votes:
	// for analysis only, never to be published.
	DataDependent     float64 `json:"unsafe_data_dependent_rdp"`
	SmoothSensitivity float64 `json:"unsafe_smooth_sensitivity"`
}

// RDPSmoothSensitivityGaussian returns the RDP at order λ of the GNSS
// mechanism with smoothness β and noise multiplier σ (PATE 2018, Theorem
// 23), defined for 1 < λ < 1/(2β).
func RDPSmoothSensitivityGaussian(beta, sigma, order float64) (float64, error) {
	if !(order > 1) || !(beta >= 0) || !(sigma > 0) || math.IsInf(sigma, 0) || (beta > 0 && !(order < 1/(2*beta))) {
		return 0, fmt.Errorf("%w: GNSS needs σ > 0, β ≥ 0 and 1 < λ < 1/(2β) (λ = %v, β = %v, σ = %v)", ErrBadAnalysis, order, beta, sigma)
	}
	return order*math.Exp(2*beta)/(sigma*sigma) + (-0.5*math.Log(1-2*order*beta)+beta*order)/(order-1), nil
}

// SmoothSensitivity returns the β-smooth sensitivity at order λ of the
// data-dependent RDP of answering all histograms with p's mechanism (gnmax,
// or confident-gnmax counting every query as answered), together with that
// data-dependent RDP. The local sensitivity of the sum is bounded by the sum
// of the per-query bounds, each made non-decreasing in d (a dataset at
// distance d is within distance d of every query's histogram). Analysis
// only: both values depend on the raw votes.
func SmoothSensitivity(p Params, hs []Histogram, order, beta float64, b QBound) (ss, rdp float64, err error) {
	if err := b.check(); err != nil {
		return 0, 0, err
	}
	if err := p.Validate(); err != nil {
		return 0, 0, err
	}
	g, err := NewGrid([]float64{order})
	if err != nil {
		return 0, 0, err
	}
	if len(hs) == 0 {
		return 0, 0, nil
	}
	total := make([]float64, p.Teachers)
	add := func(ls []float64) {
		run := 0.0
		for d, v := range ls {
			run = max(run, v)
			total[d] += run
		}
	}
	var sigma float64
	switch p.Mechanism {
	case GNMax:
		sigma = p.Sigma
	case ConfidentGNMax:
		sigma = p.Sigma2
		for _, h := range hs {
			ls, err := localSensitivityThreshold(h, p.Teachers, p.Threshold, p.Sigma1, order, b)
			if err != nil {
				return 0, 0, err
			}
			add(ls)
		}
	default:
		return 0, 0, fmt.Errorf("%w: smooth sensitivity is defined for gnmax and confident-gnmax, not %s", ErrBadAnalysis, p.Mechanism)
	}
	byClasses := map[int]*gnmaxSS{}
	memo := map[int]map[float64]float64{}
	lsCache := map[string][]float64{}
	for _, h := range hs {
		if err := p.check(h); err != nil {
			return 0, 0, err
		}
		s, ok := byClasses[len(h)]
		if !ok {
			if s, err = newGNMaxSS(sigma, order, len(h), b); err != nil {
				return 0, 0, err
			}
			byClasses[len(h)] = s
			memo[len(h)] = map[float64]float64{}
		}
		key := sortedKey(h)
		ls, ok := lsCache[key]
		if !ok {
			ls = s.localSensitivities(h, p.Teachers, memo[len(h)])
			lsCache[key] = ls
		}
		add(ls)
	}
	for d, v := range total {
		ss = max(ss, math.Exp(-beta*float64(d))*v)
	}
	var c Curve
	if p.Mechanism == GNMax {
		c, _, err = GNMaxDataDependentBound(g, hs, p.Sigma, b)
	} else {
		c, err = ConfidentDataDependentBound(g, hs, p.Threshold, p.Sigma1, p.Sigma2, b)
	}
	if err != nil {
		return 0, 0, err
	}
	return ss, c.At(0), nil
}

func sortedKey(h Histogram) string {
	v := slices.Clone(h)
	slices.SortFunc(v, func(a, b int) int { return b - a })
	b := make([]byte, 0, 8*len(v))
	for _, x := range v {
		b = binary.AppendUvarint(b, uint64(x))
	}
	return string(b)
}

// ReleaseSmoothSensitivity publishes the data-dependent RDP of answering the
// histograms with p's mechanism (gnmax or confident-gnmax) through the GNSS
// mechanism: Released = RDP_dd(λ) + SS_β·σ_s·Z, Z ~ N(0, 1) drawn from src,
// and reports the published ε = Released + ReleaseCost converted at λ and
// δ. Only the fields not marked unsafe may be published. Z is a
// floating-point normal (Box–Muller on 53-bit uniforms): it perturbs a
// privacy statistic, never votes.
func ReleaseSmoothSensitivity(src Source, p Params, hs []Histogram, ssp SmoothSensitivityParams, delta float64) (SmoothSensitivityRelease, error) {
	if ssp.Beta == 0 {
		ssp.Beta = 0.4 / ssp.Order
	}
	if ssp.Bound == "" {
		ssp.Bound = QDiscrete
	}
	out := SmoothSensitivityRelease{SmoothSensitivityParams: ssp, Delta: delta}
	if math.IsNaN(delta) || delta <= 0 || delta >= 1 {
		return out, fmt.Errorf("%w (got %v)", ErrBadDelta, delta)
	}
	cost, err := RDPSmoothSensitivityGaussian(ssp.Beta, ssp.Sigma, ssp.Order)
	if err != nil {
		return out, err
	}
	ss, rdp, err := SmoothSensitivity(p, hs, ssp.Order, ssp.Beta, ssp.Bound)
	if err != nil {
		return out, err
	}
	z, err := standardNormal(newRNG(src))
	if err != nil {
		return out, err
	}
	out.DataDependent, out.SmoothSensitivity, out.ReleaseCost = rdp, ss, cost
	g, _ := NewGrid([]float64{ssp.Order})
	ind, err := p.Charge(g, len(hs), 0)
	if err != nil {
		return out, err
	}
	out.Released = min(max(rdp+ss*ssp.Sigma*z, 0), ind.RDP.At(0))
	out.Epsilon = epsilonAtOrder(out.Released+cost, ssp.Order, delta)
	out.EpsilonClassic = max(0, out.Released+cost-math.Log(delta)/(ssp.Order-1))
	return out, nil
}

// epsilonAtOrder converts RDP rdp at order l to ε at δ with the tight
// conversion.
func epsilonAtOrder(rdp, l, delta float64) float64 {
	return max(0, rdp+math.Log((l-1)/l)-(math.Log(delta)+math.Log(l))/(l-1))
}

// UnsafeDataDependentEpsilon is the ε at Delta of the unperturbed
// data-dependent RDP plus the release's own cost, converted at Order: the
// quantity Epsilon is a noisy estimate of, and the data-dependent guarantee
// of answering and publishing (PATE 2018). It is computed from the raw
// votes, so a deployment must not publish it; a research report on public
// data states it beside Epsilon to show how far the noise moved the
// published figure.
func (r SmoothSensitivityRelease) UnsafeDataDependentEpsilon() float64 {
	return epsilonAtOrder(r.DataDependent+r.ReleaseCost, r.Order, r.Delta)
}

// UnsafeNoiseSD is SS_β·σ_s, the standard deviation of the noise added to
// the data-dependent RDP before it is published. Not publishable.
func (r SmoothSensitivityRelease) UnsafeNoiseSD() float64 {
	return r.SmoothSensitivity * r.Sigma
}

// standardNormal returns a N(0, 1) sample by Box–Muller.
func standardNormal(r *rng) (float64, error) {
	a, err := r.uint64()
	if err != nil {
		return 0, err
	}
	b, err := r.uint64()
	if err != nil {
		return 0, err
	}
	u1 := (float64(a>>11) + 1) / (1 << 53) // (0, 1]
	u2 := float64(b>>11) / (1 << 53)
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2), nil
}
