package mechanism

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"sync"
)

// NZCSVT releases the exact argmax when a noisy distance to instability
// clears a noisy threshold, else refuses; a session stops after K
// refusals. See svtSession.
const NZCSVT Kind = "nzc-svt"

// svtSession is an nzc-svt session: it releases the exact argmax of a query's
// histogram when the query is provably stable, refuses otherwise, and stops
// after K refusals. Its whole privacy cost is fixed when it opens
// (Params.Charge); answered queries cost nothing more.
//
// # The mechanism
//
// Let d(n) be the distance to instability of n (Histogram.Distance): the
// number of vote moves that can be made without changing argmax(n); d(n) ≥ 1
// means every neighbouring histogram has the same argmax,
// and moving one vote changes d by at most 1 (sensitivity Δ = 1). Let
// T' = ⌊T⌋. When the session opens it draws ρ ~ Lap_Z(b_ρ) once (b_ρ =
// Params.Scale). For each query it draws a fresh ν ~ Lap_Z(b_ν) (b_ν =
// Params.DistanceScale, by default 2·K·b_ρ) and
//
//	refuses   if d(n) + ν ≤ T' + ρ   (counted; after the K-th refusal the session is exhausted)
//	answers   argmax(n) otherwise.
//
// # Theorem
//
// A session is (ε, δ)-differentially private with respect to one teacher
// changing its votes on any, adaptively chosen, queries, where
//
//	ε = 1/b_ρ + 2K/b_ν
//	δ = min(δ_sum, δ_split)
//	δ_sum   = K·P[ρ + ν ≥ T'+1]
//	δ_split = min over m ∈ {1, …, T'+1} of  P[ρ ≤ −m] + K·p_m/(1 − p_m),   p_m = P[ν ≥ T'+2−m],
//
// with the discrete Laplace tails P[X ≥ j] = P[X ≤ −j] = e^{−j/b}/(1+e^{−1/b})
// for j ≥ 1, and P[ρ + ν ≥ t] the exact tail of the sum of the two
// independent draws (lapSumTail). Params.Charge reports exactly this
// (rounded up). δ_sum is usually the smaller: its tail falls like
// e^{−T/max(b_ρ, b_ν)}, δ_split's like e^{−T/(b_ρ+b_ν)}, so with b_ρ ≈ b_ν
// it lets the threshold sit about half as high; δ_split can win when K is
// large and b_ν much smaller than b_ρ, since only its ν term grows with K.
//
// Proof. (1) The refuse/answer transcript S is the sparse vector technique
// with the "positive" (counted, at most K) events being the refusals: with
// q_i = −d(n_i), refusing is q_i + (−ν) ≥ −T' + (−ρ), and −ν, −ρ have the
// same distributions as ν, ρ. This is Algorithm 1 of Lyu, Su and Li (2017),
// "Understanding the Sparse Vector Technique for Differential Privacy", with
// c = K, Δ = 1, ρ of scale Δ/ε1 and ν of scale 2cΔ/ε2; their Theorem 2 makes
// it (ε1+ε2)-DP with ε1 = 1/b_ρ and ε2 = 2K/b_ν. The proof only shifts ρ by
// Δ and ν by 2Δ, integers, under which the discrete Laplace density ratio
// is bounded exactly like the continuous one, so it holds for integer noise.
// Distances are not monotone queries (one teacher can raise one distance
// and lower another), so the factor 2 in b_ν is needed.
// (2) The labels: the release is M(D) = (S(D), argmax(n_i(D)) for answered
// i). Fix neighbours D, D' and let S* be the SVT run in which the next
// query is chosen from the transcript and from the labels argmax(n_j(D')),
// always computed on D' (a fixed adaptive strategy, so S* is ε-DP by (1)).
// On D' the real run is S*(D') with its labels. On D the real run and
// S*(D) coincide, query by query, as long as every answered query is
// stable on D (d ≥ 1 makes argmax(n_i(D)) = argmax(n_i(D'))); let B be the
// event that some answered query is unstable. For every set O of outputs
// P[M(D) ∈ O] ≤ P[S*(D) ∈ A] + P[B] ≤ e^ε P[M(D') ∈ O] + P[B], with A the
// transcripts whose D'-labels land in O. (3) Bounding P[B], for any
// strategy that picks each query from the answers so far and from
// randomness of its own. An unstable query (d = 0) is answered exactly when
// ν ≥ T'+1+ρ. Let τ_j be the index of the j-th unstable query the session
// is asked (∞ if there is none). If B happens, the first answered
// unstable query is some τ_j, and the j−1 unstable queries before it were
// refused, so j ≤ K: the K-th refusal ends the session. Hence
// B ⊆ ⋃_{j ≤ K} {τ_j < ∞, ν_{τ_j} ≥ T'+1+ρ}. Whether τ_j = i is decided by
// ρ, ν_1 … ν_{i−1}, the data and the strategy's own randomness, all
// independent of the fresh ν_i, so with G(r) = P[ν ≥ T'+1+r]
//
//	P[τ_j < ∞, ν_{τ_j} ≥ T'+1+ρ] = Σ_i E[1{τ_j = i}·G(ρ)] = E[1{τ_j < ∞}·G(ρ)] ≤ E[G(ρ)] = P[ν − ρ ≥ T'+1],
//
// which is P[ρ + ν ≥ T'+1] since ρ is symmetric; the union over j gives
// δ_sum. For K = 1 it is attained: a strategy that asks only unstable
// queries has P[B] = P[ρ + ν ≥ T'+1]. Alternatively, if ρ ≥ 1−m, an
// unstable query is answered only if ν ≥ T'+2−m, probability at most p_m,
// independently for each query given ρ; the number of answered unstable
// queries is then dominated by the number of successes before the K-th
// failure of Bernoulli(p_m) trials, whose mean is K·p_m/(1−p_m); by
// Markov's inequality that bounds the probability of at least one. Adding
// P[ρ ≤ −m] and minimising over m gives δ_split. Both bound P[B], so their
// minimum does.
//
// As a ledger charge a session is the pure-DP RDP curve of ε (PureDP) plus
// the additive δ, and composing it that way is sound: by (2), for each pair
// of neighbours the whole interaction on D is within total variation
// P[B] ≤ δ of one in which the session is replaced by the ε-DP S* (and on
// D' nothing changes), so the RDP curves of all mechanisms compose as
// usual, and the δs add to the δ of the final (ε, δ) conversion.
//
// # Absent hospitals
//
// A session is opened over an ensemble of N teachers (Params.Teachers: the
// registered teachers of every hospital that pays for it), and its T, b_ρ,
// b_ν and K are fixed then. A query's histogram n_i may hold fewer than N
// votes: the teachers of a hospital that does not vote on it abstain.
// Which hospitals vote on query i — the set P_i — must be decided without
// looking at any vote (the aggregator decides it from timing and
// connections only: deadlines missed, hospitals left out or gone); it is
// then part of the adaptive strategy of the proof above, which may choose
// each query from the outputs so far and randomness of its own. The
// theorem holds unchanged, with the same ε and δ, whatever P_1, P_2, …:
//
//   - Neighbours D, D' differ in one teacher's votes. On query i, if that
//     teacher's hospital is not in P_i, n_i(D) = n_i(D'); if it is, the
//     two differ by one vote moved (or, for a teacher that starts or stops
//     voting, one vote added or removed). P_i is the same on D and D',
//     since no vote decides it.
//   - d is a function of the histogram alone, whatever its number of
//     votes (Histogram.Distance; N only caps it for a single class), and a
//     vote moved, added or removed changes each gap h[top] − h[j] by at
//     most 2, so d by at most 1: Δ = 1 on every query, which is all step
//     (1) uses. d(n) ≥ 1 means every histogram one such step away has the
//     same argmax, which is all step (2) uses. Step (3) uses no data.
//   - T' is fixed when the session opens: it does not shrink with the
//     number of voters (which would make the threshold, not only the
//     distances, depend on who votes). With fewer voters distances are
//     smaller, so more queries are refused: absence costs answers, never
//     privacy.
//
// So hospitals coming and going do not multiply a session's cost: every
// hospital of the session pays its ε once, at opening, and a batch on
// which some of them are absent runs in it. A hospital that is not one of
// the session's pays nothing and its votes are not counted.
// TestDistanceSensitivityWithAbstentions checks the first two points
// exhaustively on small ensembles.
type svtSession struct {
	p        Params
	rhoScale DiscreteLaplace
	nuScale  DiscreteLaplace
	tInt     *big.Int // ⌊T⌋

	mu       sync.Mutex
	rho      *big.Int // drawn at the first query
	refusals int
}

// svtDef is nzc-svt: the exact argmax when a noisy distance to
// instability clears a noisy threshold, in sessions that stop after K
// refusals (svtSession). Its cost is that of a whole session.
type svtDef struct{}

func (svtDef) Kind() Kind { return NZCSVT }

// Preset is one session of pure ε = 1 with its own δ at most 5e-6 and K =
// 1 refusal, the lowest threshold PlanSession finds for ReferenceTeachers
// teachers and 10 classes (T = 40, b_ρ ≈ 2.86, b_ν ≈ 3.08). A student that
// asks first about the queries its teachers agree on needs one refusal: it
// ends the session once those run out.
func (svtDef) Preset() Params {
	p, err := PlanPresetSession(ReferenceTeachers, 10)
	if err != nil {
		// The inputs are constants PlanSession accepts; TestPresetsAndEnsemble checks.
		panic("mechanism: the nzc-svt preset cannot be planned: " + err.Error())
	}
	return p
}

func (svtDef) Keys(Params) []string {
	return []string{keyDistanceScale, keyMaxRefusals, keyScale, keyThreshold}
}

func (svtDef) Check(p Params) error {
	errs := []error{positive("scale", p.Scale)}
	if math.IsNaN(p.Threshold) || math.IsInf(p.Threshold, 0) || p.Threshold < 0 || p.Threshold > 1e9 {
		errs = append(errs, &ParamError{Param: "threshold", Value: fstr(p.Threshold), Reason: "must be a number between 0 and 1e9 (distances are numbers of teachers)"})
	}
	if p.MaxRefusals < 1 {
		errs = append(errs, &ParamError{Param: "max-refusals", Value: strconv.Itoa(p.MaxRefusals), Reason: "must be at least 1"})
	}
	if p.DistanceScale != 0 {
		errs = append(errs, positive("distance-scale", p.DistanceScale))
	}
	return errors.Join(errs...)
}

// ForEnsemble scales the threshold, measured in votes, rounded down
// (distances are whole numbers of votes).
func (svtDef) ForEnsemble(p Params, f float64) Params {
	p.Threshold = math.Floor(p.Threshold * f)
	return p
}

func (svtDef) Describe(p Params) string {
	return fmt.Sprintf("T=%s, K=%d, b_ρ=%s, b_ν=%s", f4(p.Threshold), p.MaxRefusals, f4(p.Scale), f4(p.svtDistanceScale()))
}

func (d svtDef) New(p Params) (Mechanism, error) { return d.Open(p) }

// QueryCost is zero: a session's queries are covered by its cost.
func (svtDef) QueryCost(g Grid, _ Params) (QueryCost, error) {
	return QueryCost{Answered: g.Zero(), Refused: g.Zero()}, nil
}

// SessionCharge is the session's (ε, δ) of the theorem above, as the
// pure-DP curve of ε and the additive δ.
func (svtDef) SessionCharge(g Grid, p Params) (Charge, error) {
	eps, delta := p.svtCost()
	return Charge{RDP: PureDP(g, eps), Delta: delta, PureEpsilon: eps}, nil
}

// Plan is PlanSession.
func (svtDef) Plan(eps, delta float64, maxRefusals, teachers, classes int) (Params, error) {
	return PlanSession(eps, delta, maxRefusals, teachers, classes)
}

// withDefaults spells out the distance scale a zero leaves to its default,
// as the ledger records it.
func (svtDef) withDefaults(p Params) Params {
	p.DistanceScale = p.svtDistanceScale()
	return p
}

// Open opens a session of valid parameters p.
func (svtDef) Open(p Params) (Session, error) {
	r, err := NewDiscreteLaplace(p.Scale)
	if err != nil {
		return nil, err
	}
	n, err := NewDiscreteLaplace(p.svtDistanceScale())
	if err != nil {
		return nil, err
	}
	t := new(big.Int).SetInt64(int64(math.Floor(p.Threshold)))
	return &svtSession{p: p, rhoScale: r, nuScale: n, tInt: t}, nil
}

func (p Params) svtDistanceScale() float64 {
	if p.DistanceScale != 0 {
		return p.DistanceScale
	}
	return 2 * float64(p.MaxRefusals) * p.Scale
}

// Params returns the session's parameters.
func (s *svtSession) Params() Params { return s.p }

// Refusals returns how many queries the session has refused.
func (s *svtSession) Refusals() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refusals
}

// Exhausted reports whether the session has used its K refusals.
func (s *svtSession) Exhausted() bool { return s.Refusals() >= s.p.MaxRefusals }

// Answer releases argmax(h) or a refusal. After K refusals it returns
// ErrSessionExhausted and releases nothing. A bad histogram or a failing
// source changes nothing.
func (s *svtSession) Answer(src Source, h Histogram) (Outcome, error) {
	if err := s.p.check(h); err != nil {
		return Outcome{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refusals >= s.p.MaxRefusals {
		return Outcome{}, &ExhaustedError{Kind: NZCSVT}
	}
	smp := newSampler(src)
	if s.rho == nil {
		rho := new(big.Int)
		if err := s.rhoScale.sampleInto(smp, rho); err != nil {
			return Outcome{}, err
		}
		s.rho = rho
	}
	var nu, rhs big.Int
	if err := s.nuScale.sampleInto(smp, &nu); err != nil {
		return Outcome{}, err
	}
	nu.Add(&nu, big.NewInt(int64(h.Distance(s.p.Teachers))))
	rhs.Add(s.tInt, s.rho)
	if nu.Cmp(&rhs) <= 0 {
		s.refusals++
		return Refusal(), nil
	}
	return Answer(h.Top()), nil
}

// lapTail returns an upper bound on P[X ≥ j] = e^{−j/b}/(1+e^{−1/b}) for the
// discrete Laplace of scale b and j ≥ 1.
func lapTail(b float64, j float64) float64 {
	v := math.Exp(-j/b) / (1 + math.Exp(-1/b))
	return v * (1 + 1e-12)
}

// svtCost returns the (ε, δ) of a session (see Session).
func (p Params) svtCost() (eps, delta float64) {
	br, bn := p.Scale, p.svtDistanceScale()
	k := float64(p.MaxRefusals)
	eps = up(up(1/br) + up(up(2*k)/bn))
	t := math.Floor(p.Threshold)
	delta = math.Inf(1)
	// The objective is a sum of a decreasing and an increasing function
	// of m; scan all m when cheap, else a geometric set plus its neighbours.
	try := func(m float64) {
		if m < 1 || m > t+1 {
			return
		}
		pm := lapTail(bn, t+2-m)
		d := lapTail(br, m)
		if pm < 1 {
			d += k * pm / (1 - pm)
		} else {
			d = math.Inf(1)
		}
		delta = min(delta, d)
	}
	if t <= 1e5 {
		for m := 1.0; m <= t+1; m++ {
			try(m)
		}
	} else {
		for f := 0.0; f <= 1; f += 1e-4 {
			m := math.Round(1 + f*t)
			try(m)
		}
	}
	delta = min(delta*(1+1e-12), k*lapSumTail(br, bn, t+1))
	return eps, min(delta, 1)
}

// lapSumTail returns an upper bound on P[ρ + ν ≥ t] for independent
// discrete Laplace ρ of scale br and ν of scale bn and an integer t ≥ 1.
// With q_ρ = e^{−1/br}, q_ν = e^{−1/bn} and c_ρ = (1−q_ρ)/(1+q_ρ), summing
// over ρ = x:
//
//	x ≤ 0:        Σ c_ρ q_ρ^{−x} · q_ν^{t−x}/(1+q_ν)             = c_ρ q_ν^t / ((1+q_ν)(1 − q_ρq_ν))
//	1 ≤ x ≤ t−1:  Σ c_ρ q_ρ^x · q_ν^{t−x}/(1+q_ν)                = c_ρ/(1+q_ν) · geomSum(1/br, 1/bn, t−1)
//	x ≥ t:        Σ c_ρ q_ρ^x · (1 − q_ν^{x−t+1}/(1+q_ν))      = q_ρ^t (1 − q_ρq_ν²) / ((1+q_ρ)(1+q_ν)(1 − q_ρq_ν))
//
// Every part is a product and quotient of positive factors, each within a
// few units in the last place (1 − q through math.Expm1), so the result is
// raised by a relative 1e-9 and by 1e-300 against underflow.
func lapSumTail(br, bn, t float64) float64 {
	qr, qn := math.Exp(-1/br), math.Exp(-1/bn)
	omqr := -math.Expm1(-1 / br)       // 1 − q_ρ
	omqq := -math.Expm1(-1/br - 1/bn)  // 1 − q_ρq_ν
	omqq2 := -math.Expm1(-1/br - 2/bn) // 1 − q_ρq_ν²
	cr := omqr / (1 + qr)
	low := cr * math.Exp(-t/bn) / ((1 + qn) * omqq)
	high := math.Exp(-t/br) * omqq2 / ((1 + qr) * (1 + qn) * omqq)
	mid := cr / (1 + qn) * geomSum(1/br, 1/bn, t)
	return min((low+mid+high)*(1+1e-9)+1e-300, 1)
}

// geomSum returns Σ_{x=1}^{t−1} e^{−a·x − b·(t−x)} for a, b > 0. Taking
// the larger rate as a (the sum is symmetric under x ↔ t−x with a ↔ b)
// and d = a − b ≥ 0, it is e^{−b·t} Σ_{x=1}^{n} e^{−d·x} with n = t−1,
// a geometric sum computed as e^{−b·t−d}·(1−e^{−d·n})/(1−e^{−d}), or
// n·e^{−b·t} when d = 0.
func geomSum(a, b, t float64) float64 {
	n := t - 1
	if n < 1 {
		return 0
	}
	if a < b {
		a, b = b, a
	}
	d := a - b
	if d == 0 {
		return n * math.Exp(-b*t)
	}
	return math.Exp(-b*t-d) * (-math.Expm1(-d * n)) / (-math.Expm1(-d))
}

// up returns the next float64 above x: applied after each rounded operation
// it keeps a computed cost an upper bound on the exact one.
func up(x float64) float64 {
	if math.IsInf(x, 0) || math.IsNaN(x) || x == 0 {
		return x
	}
	return math.Nextafter(x, math.Inf(1))
}
