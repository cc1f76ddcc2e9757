// Package audit bounds the privacy loss of the aggregation mechanisms from
// below, empirically: it runs a mechanism many times on both histograms of a
// worst-case pair of neighbours (one teacher moves its vote) and turns the
// output frequencies into a lower bound on ε with Clopper–Pearson
// intervals. An accounted ε below the lower bound would prove the accounting
// wrong; for the source paper's nzc settings the bound refutes the paper's
// claim of ε≈0.
//
// The package is pure: randomness comes in as a mechanism.Source.
package audit

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/nzcfed/nzc/mechanism"
)

// Pair is a pair of neighbouring inputs: D2 is D with one teacher's vote
// moved from one class to another, on every query. A per-query mechanism is
// audited on one query; an nzc-svt session on a sequence of queries, asked
// in order within one session.
type Pair struct {
	Name  string
	D, D2 []mechanism.Histogram
}

func onePair(name string, d, d2 mechanism.Histogram) Pair {
	return Pair{Name: name, D: []mechanism.Histogram{d}, D2: []mechanism.Histogram{d2}}
}

// WorstCasePairs returns the fixed neighbours for two classes and the given
// number of teachers t (at least 4): the top-two gap of D is 0, 1, 2,
// about t/2 and t, and one teacher moves from class 0 to class 1.
func WorstCasePairs(teachers int) []Pair {
	h := teachers / 2
	return []Pair{
		onePair("gap 0", mechanism.Histogram{h, h}, mechanism.Histogram{h - 1, h + 1}),
		onePair("gap 1", mechanism.Histogram{h, h - 1}, mechanism.Histogram{h - 1, h}),
		onePair("gap 2", mechanism.Histogram{h + 1, h - 1}, mechanism.Histogram{h, h}),
		onePair("gap "+fmt.Sprint(2*(teachers/4)), mechanism.Histogram{teachers - teachers/4, teachers / 4}, mechanism.Histogram{teachers - teachers/4 - 1, teachers/4 + 1}),
		onePair("gap "+fmt.Sprint(teachers), mechanism.Histogram{teachers, 0}, mechanism.Histogram{teachers - 1, 1}),
	}
}

// gapPair returns the two-class pair whose first histogram has top-two gap
// at least g (the nearest the ensemble's parity allows, at most t).
func gapPair(t, g int) (Pair, bool) {
	a := (t + g + 1) / 2
	if a > t || a < 1 {
		return Pair{}, false
	}
	return onePair(fmt.Sprintf("gap %d", 2*a-t), mechanism.Histogram{a, t - a}, mechanism.Histogram{a - 1, t - a + 1}), true
}

// CasePairs returns the neighbours on which p's mechanism is audited. For a
// per-query mechanism: top-two gaps 0, 1 and 2, gaps of 1 to 8 noise scales
// (σ for Gaussian noise, b for Laplace; where the loss of a noisy argmax
// peaks), and the pair where the exact two-class analysis finds the largest
// loss. For nzc-svt: sessions of several queries whose distances sit at the
// threshold, so that refusals happen and the refusal limit is reached, with
// and without an unstable query whose label differs between D and D'.
func CasePairs(p mechanism.Params) []Pair {
	t := p.Teachers
	if p.Mechanism == mechanism.NZCSVT {
		return sessionPairs(p)
	}
	scale := p.Sigma
	switch p.Mechanism {
	case mechanism.LNMax:
		scale = p.Scale
	case mechanism.NZC:
		if p.Noise == mechanism.NoiseLaplace {
			scale = p.Scale
		}
	case mechanism.ConfidentGNMax:
		scale = p.Sigma2
	}
	var out []Pair
	seen := map[string]bool{}
	add := func(pr Pair, ok bool) {
		if ok && !seen[pr.Name] {
			seen[pr.Name] = true
			out = append(out, pr)
		}
	}
	for _, g := range []int{0, 1, 2} {
		add(gapPair(t, g))
	}
	for k := 1; k <= 8; k++ {
		add(gapPair(t, int(math.Ceil(float64(k)*scale))))
	}
	if ex, err := ExactTwoClass(p, 1e-5); err == nil && ex.A >= 1 {
		a := ex.A
		pr := onePair(fmt.Sprintf("gap %d", 2*a-t), mechanism.Histogram{a, t - a}, mechanism.Histogram{a - 1, t - a + 1})
		add(pr, true)
	}
	return out
}

// distanceHist returns a two-class histogram of t votes whose distance to
// instability is d (class 0 on top), clipped to what t allows.
func distanceHist(t, d int) mechanism.Histogram {
	a := min(t, (t+2*d+1)/2)
	return mechanism.Histogram{a, t - a}
}

// sessionPairs are nzc-svt's audited sessions: K+2 queries (at most 5) at
// the threshold's distance, so that a session refuses, reaches its limit
// and stops; the same with an unstable last query; and queries just above
// the threshold.
func sessionPairs(p mechanism.Params) []Pair {
	t, T := p.Teachers, int(math.Floor(p.Threshold))
	q := min(p.MaxRefusals+2, 5)
	seq := func(name string, ds []int, unstableLast bool) Pair {
		var pr Pair
		pr.Name = name
		for i, d := range ds {
			h := distanceHist(t, d)
			h2 := mechanism.Histogram{h[0] - 1, h[1] + 1}
			if unstableLast && i == len(ds)-1 {
				half := t / 2
				h, h2 = mechanism.Histogram{half, t - half - (t % 2)}, mechanism.Histogram{half - 1, t - half - (t % 2) + 1}
			}
			pr.D, pr.D2 = append(pr.D, h), append(pr.D2, h2)
		}
		return pr
	}
	at := make([]int, q)
	above := make([]int, q)
	for i := range q {
		at[i] = max(T, 1)
		above[i] = max(T+2, 1)
	}
	return []Pair{
		seq(fmt.Sprintf("session of %d queries at distance %d", q, at[0]), at, false),
		seq(fmt.Sprintf("session of %d queries, the last unstable", q), at, true),
		seq(fmt.Sprintf("session of %d queries at distance %d", q, above[0]), above, false),
	}
}

// Case is one audited mechanism and parameter set.
type Case struct {
	Params mechanism.Params
	// PaperClaim is the ε the source paper claims for these settings, if any.
	PaperClaim *float64
}

// DefaultCases returns the audited parameter sets for the given number of
// teachers: the paper's nzc settings (c = 1e100, scale or σ 1e-10), nzc with
// a small constant, and the sound mechanisms at settings where a few
// hundred thousand runs can resolve their ε.
func DefaultCases(teachers int) []Case {
	zero := 0.0
	t := teachers
	return []Case{
		{Params: mechanism.Params{Mechanism: mechanism.NZC, Teachers: t, Noise: mechanism.NoiseLaplace, Scale: 1e-10, Constant: 1e100}, PaperClaim: &zero},
		{Params: mechanism.Params{Mechanism: mechanism.NZC, Teachers: t, Noise: mechanism.NoiseGaussian, Sigma: 1e-10, Constant: 1e100}, PaperClaim: &zero},
		{Params: mechanism.Params{Mechanism: mechanism.NZC, Teachers: t, Noise: mechanism.NoiseLaplace, Scale: 2, Constant: 3}},
		{Params: mechanism.Params{Mechanism: mechanism.LNMax, Teachers: t, Scale: 1}},
		{Params: mechanism.Params{Mechanism: mechanism.GNMax, Teachers: t, Sigma: 1}},
		{Params: mechanism.Params{Mechanism: mechanism.ConfidentGNMax, Teachers: t, Threshold: float64(t) / 2, Sigma1: 1, Sigma2: 1}},
		{Params: mechanism.Params{Mechanism: mechanism.NZCSVT, Teachers: t, Scale: 1, Threshold: float64(t) / 4, MaxRefusals: 1}},
	}
}

// Config sets the size and confidence of an audit.
type Config struct {
	Trials     int     // runs of the mechanism (or session) per input
	Confidence float64 // probability that every reported lower bound holds, e.g. 0.95
	// Delta is the δ at which the accounted ε of a mechanism without a pure
	// ε is computed (tight RDP conversion); the lower bound and the exact
	// two-class ε use the same δ.
	Delta float64
	// Accountant computes the (ε, δ) the accounting charges; nil means
	// Accounted. Tests put a deliberately wrong one here to show that the
	// audit catches it.
	Accountant func(p mechanism.Params, delta float64) (eps, d float64, err error)
}

// Result is the audit of one Case.
type Result struct {
	Params mechanism.Params
	// Pairs are the inputs the mechanism ran on.
	Pairs []Pair
	// EpsilonAccounted is the per-query ε the accounting charges at
	// DeltaAccounted (pure ε and δ = 0 when the mechanism has one; for
	// nzc-svt the session's ε and δ).
	EpsilonAccounted float64
	DeltaAccounted   float64
	// EpsilonLowerBound holds, with probability at least Confidence, for
	// the true ε at DeltaAccounted. 0 when no event gives a positive bound.
	EpsilonLowerBound float64
	// Witness names the pair, direction and output event that gave the bound.
	Witness string
	// Exact is the exact two-class ε at DeltaAccounted (nil for nzc-svt,
	// which only the sampled audit covers).
	Exact      *Exact
	PaperClaim *float64
	// OK is EpsilonAccounted ≥ EpsilonLowerBound, and ≥ Exact.Epsilon.
	OK bool
	// Counts[i] are the output counts on Pairs[i].D and .D2, indexed by
	// outcome (see Outcomes).
	Counts [][2][]int
}

// ErrBadConfig reports an unusable audit configuration.
var ErrBadConfig = errors.New("audit: trials must be at least 1, confidence in (0, 1) and δ in [0, 1)")

// Accounted returns the per-query (ε, δ) that the accounting charges p.
func Accounted(p mechanism.Params, delta float64) (eps, d float64, err error) {
	g := mechanism.DefaultGrid()
	ch, err := p.Charge(g, 1, 0)
	if err != nil {
		return 0, 0, err
	}
	if !math.IsInf(ch.PureEpsilon, 1) {
		return ch.PureEpsilon, ch.Delta, nil
	}
	// Take the worse of an answered and a refused query.
	conv, err := ch.Epsilon(delta)
	if err != nil {
		return 0, 0, err
	}
	ch2, err := p.Charge(g, 0, 1)
	if err != nil {
		return 0, 0, err
	}
	conv2, err := ch2.Epsilon(delta)
	if err != nil {
		return 0, 0, err
	}
	return max(conv.Epsilon, conv2.Epsilon), conv.Delta, nil
}

// outcomes is the number of outcomes of one query with the given number of
// classes: a label, a refusal, or (in a session) not asked because the
// session had stopped.
func outcomes(classes int) int { return classes + 2 }

// OutcomeName names outcome index i of a run over q queries of the given
// number of classes: one symbol per query, a label, "⊥" for a refusal and
// "·" for a query not asked after the session stopped.
func OutcomeName(i, q, classes int) string {
	base := outcomes(classes)
	out := make([]byte, 0, 2*q)
	syms := make([]string, q)
	for k := q - 1; k >= 0; k-- {
		o := i % base
		i /= base
		switch {
		case o < classes:
			syms[k] = fmt.Sprint(o)
		case o == classes:
			syms[k] = "⊥"
		default:
			syms[k] = "·"
		}
	}
	for k, s := range syms {
		if k > 0 {
			out = append(out, ' ')
		}
		out = append(out, s...)
	}
	return string(out)
}

// runOnce runs the mechanism once over the queries hs (one fresh session for
// nzc-svt) and returns the outcome index.
func runOnce(src mechanism.Source, p mechanism.Params, hs []mechanism.Histogram) (int, error) {
	base := outcomes(len(hs[0]))
	idx := 0
	m, err := mechanism.New(p)
	if err != nil {
		return 0, err
	}
	stopped := false
	for _, h := range hs {
		o := len(h) + 1 // not asked
		if !stopped {
			out, err := m.Answer(src, h)
			if errors.Is(err, mechanism.ErrSessionExhausted) {
				stopped = true
			} else if err != nil {
				return 0, err
			} else if out.Refused {
				o = len(h)
			} else {
				o = out.Label
			}
		}
		idx = idx*base + o
	}
	return idx, nil
}

// Run audits one case on the given pairs (CasePairs(c.Params) when pairs is
// nil). progress, if not nil, is called after each batch of runs with the
// number done so far.
func Run(ctx context.Context, src mechanism.Source, c Case, pairs []Pair, cfg Config, progress func(done int)) (Result, error) {
	if cfg.Trials < 1 || !(cfg.Confidence > 0 && cfg.Confidence < 1) || !(cfg.Delta >= 0 && cfg.Delta < 1) {
		return Result{}, ErrBadConfig
	}
	if pairs == nil {
		pairs = CasePairs(c.Params)
	}
	res := Result{Params: c.Params, PaperClaim: c.PaperClaim, Pairs: pairs}
	account := cfg.Accountant
	if account == nil {
		account = Accounted
	}
	var err error
	if res.EpsilonAccounted, res.DeltaAccounted, err = account(c.Params, max(cfg.Delta, 1e-300)); err != nil {
		return res, err
	}
	if math.IsInf(mustPure(c.Params), 1) && cfg.Delta == 0 {
		return res, fmt.Errorf("%w: %s has no pure ε; give δ > 0", ErrBadConfig, c.Params.Mechanism)
	}
	if ex, err := ExactTwoClass(c.Params, res.DeltaAccounted); err == nil {
		res.Exact = &ex
	} else if !errors.Is(err, ErrNoExact) {
		return res, err
	}
	done := 0
	for _, pr := range pairs {
		if len(pr.D) == 0 || len(pr.D) != len(pr.D2) {
			return res, fmt.Errorf("%w: pair %q needs the same number of queries on both sides", ErrBadConfig, pr.Name)
		}
		size := 1
		for range pr.D {
			size *= outcomes(len(pr.D[0]))
		}
		var counts [2][]int
		for side, hs := range [][]mechanism.Histogram{pr.D, pr.D2} {
			cnt := make([]int, size)
			for i := range cfg.Trials {
				if i%4096 == 0 {
					if err := ctx.Err(); err != nil {
						return res, err
					}
					if progress != nil && i > 0 {
						progress(done)
					}
				}
				o, err := runOnce(src, c.Params, hs)
				if err != nil {
					return res, err
				}
				cnt[o]++
				done++
			}
			counts[side] = cnt
		}
		res.Counts = append(res.Counts, counts)
	}
	if progress != nil {
		progress(done)
	}
	// Bonferroni over every (pair, direction, event) test; each test uses
	// two one-sided Clopper–Pearson bounds.
	tests := 0
	for _, cs := range res.Counts {
		tests += 2 * len(cs[0])
	}
	alpha := (1 - cfg.Confidence) / float64(2*tests)
	n := cfg.Trials
	for i, cs := range res.Counts {
		for dir := range 2 {
			a, b := cs[dir], cs[1-dir]
			for ev := range a {
				lo := ClopperPearsonLower(a[ev], n, alpha)
				hi := ClopperPearsonUpper(b[ev], n, alpha)
				if lo <= res.DeltaAccounted || hi <= 0 {
					continue
				}
				if e := math.Log((lo - res.DeltaAccounted) / hi); e > res.EpsilonLowerBound {
					res.EpsilonLowerBound = e
					from, to := "D", "D'"
					if dir == 1 {
						from, to = to, from
					}
					name := OutcomeName(ev, len(pairs[i].D), len(pairs[i].D[0]))
					res.Witness = fmt.Sprintf("%s: P[%s | %s] vs P[%s | %s]", pairs[i].Name, name, from, name, to)
				}
			}
		}
	}
	res.OK = res.EpsilonAccounted >= res.EpsilonLowerBound
	if res.Exact != nil && exceeds(res.Exact.Epsilon, res.EpsilonAccounted) {
		res.OK = false
	}
	return res, nil
}

// resolvable is the largest ε the exact analysis resolves: probabilities
// below e^-resolvable underflow a float64, so beyond it an exact ε reads +Inf.
const resolvable = 700

// exceeds reports whether an exact ε is above the accounted one, allowing
// for rounding, and treating every ε beyond what a float64 resolves as equal.
func exceeds(exact, accounted float64) bool {
	if accounted >= resolvable {
		return false
	}
	return exact > accounted*(1+1e-9)+1e-12
}

func mustPure(p mechanism.Params) float64 {
	ch, err := p.Charge(mechanism.DefaultGrid(), 1, 0)
	if err != nil {
		return math.Inf(1)
	}
	return ch.PureEpsilon
}

// ClopperPearsonLower returns the one-sided lower confidence bound at level
// 1−alpha on a binomial proportion with k successes in n trials:
// the p with P[Bin(n, p) ≥ k] = alpha (0 when k = 0).
func ClopperPearsonLower(k, n int, alpha float64) float64 {
	if k <= 0 {
		return 0
	}
	if k >= n {
		return math.Pow(alpha, 1/float64(n))
	}
	// P[Bin(n,p) ≥ k] = I_p(k, n−k+1), increasing in p.
	return bisect(func(p float64) float64 { return betaInc(float64(k), float64(n-k+1), p) - alpha })
}

// ClopperPearsonUpper returns the one-sided upper confidence bound at level
// 1−alpha: the p with P[Bin(n, p) ≤ k] = alpha (1 when k = n).
func ClopperPearsonUpper(k, n int, alpha float64) float64 {
	if k >= n {
		return 1
	}
	if k <= 0 {
		return 1 - math.Pow(alpha, 1/float64(n))
	}
	// P[Bin(n,p) ≤ k] = 1 − I_p(k+1, n−k), decreasing in p.
	return bisect(func(p float64) float64 { return betaInc(float64(k+1), float64(n-k), p) - (1 - alpha) })
}

// bisect finds the root in (0, 1) of an increasing function.
func bisect(f func(float64) float64) float64 {
	lo, hi := 0.0, 1.0
	for range 100 {
		mid := (lo + hi) / 2
		if f(mid) < 0 {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// betaInc returns the regularised incomplete beta function I_x(a, b).
func betaInc(a, b, x float64) float64 {
	if x <= 0 {
		return 0
	}
	if x >= 1 {
		return 1
	}
	la, _ := math.Lgamma(a + b)
	lb, _ := math.Lgamma(a)
	lc, _ := math.Lgamma(b)
	front := math.Exp(la - lb - lc + a*math.Log(x) + b*math.Log1p(-x))
	if x < (a+1)/(a+b+2) {
		return front * betaCF(a, b, x) / a
	}
	return 1 - front*betaCF(b, a, 1-x)/b
}

// betaCF evaluates the continued fraction of the incomplete beta function
// (modified Lentz).
func betaCF(a, b, x float64) float64 {
	const tiny = 1e-300
	qab, qap, qam := a+b, a+1, a-1
	// nonzero keeps Lentz's method away from a division by zero.
	nonzero := func(v float64) float64 {
		if math.Abs(v) < tiny {
			return tiny
		}
		return v
	}
	c, d := 1.0, 1/nonzero(1-qab*x/qap)
	h := d
	// step takes one term aa of the continued fraction and returns the
	// factor it multiplies h by.
	step := func(aa float64) float64 {
		d = 1 / nonzero(1+aa*d)
		c = nonzero(1 + aa/c)
		return d * c
	}
	for m := 1; m <= 100000; m++ {
		fm := float64(m)
		m2 := 2 * fm
		h *= step(fm * (b - fm) * x / ((qam + m2) * (a + m2)))
		del := step(-(a + fm) * (qab + fm) * x / ((a + m2) * (qap + m2)))
		h *= del
		if math.Abs(del-1) < 1e-15 {
			break
		}
	}
	return h
}
