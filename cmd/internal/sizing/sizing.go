// Package sizing says what a federation's mechanism allows for the ensemble
// that votes on each batch: how many labels fit a hospital's cap, whatever
// the votes; how often a released label is the teachers' clean vote; and
// whether the mechanism can release a label that means anything at all.
// nzc init sizes the mechanism with it, nzc-aggregator checks its
// configuration with it at start.
//
// Fidelity figures estimate the chance that the noise moves a label away
// from the clean vote (the argmax of the votes): the tail of the difference
// of two noise draws (continuous Gaussian or Laplace, which the integer
// noise follows closely from σ or b of 1 up), summed over the classes that
// could overtake the top one. They read no vote.
package sizing

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/party/student"
)

// ErrCannotWork reports a mechanism that cannot label anything for the
// ensemble it is given.
var ErrCannotWork = errors.New("the mechanism cannot work for this federation")

// MaxLabels is the most labels a plan counts.
const MaxLabels = 1_000_000

// MaxUnanimousWrong is the largest probability with which a mechanism may
// release a unanimous vote as another class: above it the noise drowns the
// whole ensemble, and Sound refuses the mechanism.
const MaxUnanimousWrong = 0.1

// FewLabels is the number of labels per hospital cap below which a plan is
// Few: too few to train a student on; nzc init and nzc-aggregator warn and
// say what ensemble would pay for more.
const FewLabels = 100

// Agreement is the probability at which Plan.Lead is taken.
const Agreement = 0.99

// Plan is what a mechanism allows an ensemble within one hospital's cap.
type Plan struct {
	Mechanism mechanism.Params `json:"mechanism"`
	// Teachers is the ensemble that votes on a batch (all hospitals');
	// Classes the federation's.
	Teachers int `json:"teachers"`
	Classes  int `json:"classes"`
	// CapEpsilon and CapDelta are the hospital's cap planned for.
	CapEpsilon float64 `json:"cap_epsilon"`
	CapDelta   float64 `json:"cap_delta"`
	// Labels is how many labels the cap pays for in the worst case (every
	// query answered; for an nzc-svt session, the queries of the sessions
	// that fit), at most MaxLabels; Sessions the sessions, for nzc-svt.
	Labels   int `json:"labels"`
	Sessions int `json:"sessions,omitempty"`
	// Epsilon is the worst-case ε of those labels, at CapDelta.
	Epsilon float64 `json:"epsilon"`
	// Lead is the smallest lead of the top class over every other, in
	// votes, from which a released label is the clean vote with probability
	// at least Agreement (0: no lead the ensemble can reach). UnanimousWrong
	// is the probability that a unanimous vote is released as another
	// class. Both are estimates (see the package docs).
	Lead           int     `json:"lead"`
	UnanimousWrong float64 `json:"unanimous_wrong"`
	// UnanimousAnswered is the probability that a query every teacher
	// agrees on is answered: confident-gnmax's noisy threshold test (the
	// continuous Gaussian's figure); 1 for mechanisms that answer every
	// query; 0 for nzc-svt, whose answers depend on the session.
	UnanimousAnswered float64 `json:"unanimous_answered"`
}

// Few reports a plan that pays for fewer than FewLabels labels per cap.
func (p Plan) Few() bool { return p.Sessions == 0 && p.Labels < FewLabels }

// String says what the plan allows, in one line.
func (p Plan) String() string {
	what := fmt.Sprintf("%d labels", p.Labels)
	if p.Sessions > 0 {
		what = fmt.Sprintf("%d session(s) of up to %d queries", p.Sessions, p.Labels)
	}
	s := fmt.Sprintf("%s (%s) for %d teachers on %d classes: %s within a hospital's cap ε=%g, δ=%g, whatever the votes (worst case ε %.3g)",
		p.Mechanism.Mechanism, p.Mechanism, p.Teachers, p.Classes, what, p.CapEpsilon, p.CapDelta, p.Epsilon)
	if p.Sessions > 0 {
		s += "; an answered label is the teachers' clean vote"
	} else if p.Lead > 0 {
		s += fmt.Sprintf("; a label is the teachers' clean vote with probability ≥ %g where its top class leads by %d votes or more (%.0f%% of the ensemble)",
			Agreement, p.Lead, 100*float64(p.Lead)/float64(p.Teachers))
	}
	if p.UnanimousAnswered > 0 && p.UnanimousAnswered < 1 {
		s += fmt.Sprintf("; a query the teachers agree on unanimously is answered with probability %.2f", p.UnanimousAnswered)
	}
	return s
}

// Preset returns the preset of mechanism k sized for an ensemble of
// teachers voting on classes (mechanism.Params.ForEnsemble).
// A mechanism that answers in sessions (nzc-svt) has its preset session
// planned for the ensemble instead (mechanism.PlanPresetSession): scaling
// the 250-teacher session's threshold down would leave its δ above any cap.
func Preset(k mechanism.Kind, teachers, classes int) (mechanism.Params, error) {
	p, err := mechanism.Preset(k)
	if err != nil {
		return mechanism.Params{}, err
	}
	if k.Sessions() {
		s, err := mechanism.PlanPresetSession(teachers, classesOr10(classes))
		if err != nil {
			return mechanism.Params{}, err
		}
		s.Teachers, s.Classes = teachers, classes
		return s, nil
	}
	return p.ForEnsemble(teachers, classes), nil
}

// classesOr10 is classes, or MNIST's 10 when unset.
func classesOr10(classes int) int {
	if classes < 2 {
		return 10
	}
	return classes
}

// Reachable refuses, with ErrCannotWork and what to change, a mechanism
// whose threshold an ensemble of teachers cannot reach: confident-gnmax
// with T at least the number of teachers, which refuses almost every query
// whatever the hospitals' caps, or nzc-svt with a distance threshold above
// the largest distance to instability, ⌊teachers/2⌋.
func Reachable(p mechanism.Params, teachers, classes int) error {
	p = p.Trim()
	if p.Mechanism == mechanism.NZCSVT && p.Threshold > float64(teachers/2) {
		fix := "plan a session for the ensemble (nzc-student plan --mechanism nzc-svt), or use more teachers"
		if s, err := Preset(p.Mechanism, teachers, classes); err == nil {
			fix = fmt.Sprintf("the preset session planned for %d teachers is %s (mechanism.threshold, scale, distance_scale, max_refusals)", teachers, s)
		} else if errors.Is(err, mechanism.ErrBadParams) {
			fix = fmt.Sprintf("%v; or use confident-gnmax or gnmax sized for the ensemble", err)
		}
		return fmt.Errorf("%w: nzc-svt's threshold T=%g is above %d, the largest distance to instability %d teachers can show, so every session would end refused without an answer; %s",
			ErrCannotWork, p.Threshold, teachers/2, teachers, fix)
	}
	if p.Mechanism != mechanism.ConfidentGNMax || p.Threshold < float64(teachers) {
		return nil
	}
	s := sized(p, teachers, classes)
	return fmt.Errorf("%w: confident-gnmax's threshold T=%g is not below the %d teachers that vote on a batch, so almost every query would be refused; set mechanism.threshold, sigma1 and sigma2 for %d teachers (nzc init sizes them: T=%g, σ1=%g, σ2=%g)",
		ErrCannotWork, p.Threshold, teachers, teachers, s.Threshold, s.Sigma1, s.Sigma2)
}

// Sound refuses, with ErrCannotWork and what to change, a mechanism whose
// labels cannot follow an ensemble of teachers voting on classes, whatever
// the caps: a threshold the ensemble cannot reach (Reachable), or noise so
// large that even a unanimous vote is released as another class with
// probability above MaxUnanimousWrong (lnmax's fixed b for a small
// ensemble, say).
func Sound(p mechanism.Params, teachers, classes int) error {
	p = p.Trim()
	if err := Reachable(p, teachers, classes); err != nil {
		return err
	}
	if w := wrong(p, classes, teachers); w > MaxUnanimousWrong {
		fix := "more teachers"
		if s, err := Preset(mechanism.GNMax, teachers, classes); err == nil {
			fix = fmt.Sprintf("gnmax sized for the ensemble (mechanism.name gnmax, mechanism.sigma %s) or more teachers", strconv4(s.Sigma))
		}
		return fmt.Errorf("%w: %s (%s) for %d teachers: even a unanimous vote would be released as another class with probability up to %.2g, since the noise is large against %d votes; use %s",
			ErrCannotWork, p.Mechanism, p, teachers, w, teachers, fix)
	}
	return nil
}

// Check plans p for an ensemble of teachers voting on classes within a cap
// of (capEps, capDelta), and refuses, with ErrCannotWork and what to
// change, a mechanism that cannot label for the ensemble (Sound) or can
// release no label within the cap: a single label, or an nzc-svt session,
// costing more than the cap.
func Check(p mechanism.Params, teachers, classes int, capEps, capDelta float64) (Plan, error) {
	p = p.Trim()
	p.Teachers, p.Classes = teachers, classes
	if err := Sound(p, teachers, classes); err != nil {
		return Plan{}, err
	}
	plan, err := student.PlanQueries(p, capEps, capDelta, MaxLabels)
	if errors.Is(err, student.ErrPlan) {
		fix := "more teachers per hospital (nzc init --teachers) or a larger cap lets labels through"
		if p.Mechanism == mechanism.NZC {
			fix = "the paper's constant c makes every label cost more than any cap: use confident-gnmax or gnmax sized for the ensemble (nzc init writes confident-gnmax)"
		} else if p.Mechanism.Sessions() {
			fix = "plan the session for the ensemble and the cap (nzc-student plan), or use more teachers per hospital (nzc init --teachers)"
			if s, err := Preset(p.Mechanism, teachers, classes); err == nil {
				fix = fmt.Sprintf("the preset session planned for %d teachers is %s (mechanism.threshold, scale, distance_scale, max_refusals)", teachers, s)
			} else {
				fix = fmt.Sprintf("%v; use confident-gnmax or gnmax sized for the ensemble, or more teachers per hospital (nzc init --teachers)", err)
			}
		}
		return Plan{}, fmt.Errorf("%w: %v; with %d teachers, %s", ErrCannotWork, err, teachers, fix)
	}
	if err != nil {
		return Plan{}, err
	}
	out := Plan{Mechanism: p, Teachers: teachers, Classes: classes, CapEpsilon: capEps, CapDelta: capDelta,
		Labels: plan.Queries, Sessions: plan.Sessions, Epsilon: plan.Epsilon,
		UnanimousWrong: wrong(p, classes, teachers), UnanimousAnswered: answered(p, teachers)}
	for m := 1; m <= teachers; m++ {
		if wrong(p, classes, m) <= 1-Agreement {
			out.Lead = m
			break
		}
	}
	return out, nil
}

// Suggest returns the smallest ensemble per hospital, above teachers and at
// most ledger's limit, for which the preset of kind, sized for hospitals
// such ensembles, plans at least FewLabels labels within the cap, and that
// plan; false when none does.
func Suggest(kind mechanism.Kind, hospitals, teachers, classes int, capEps, capDelta float64) (int, Plan, bool) {
	try := func(t int) (Plan, bool) {
		p, err := Preset(kind, hospitals*t, classes)
		if err != nil {
			return Plan{}, false
		}
		plan, err := Check(p, hospitals*t, classes, capEps, capDelta)
		return plan, err == nil && !plan.Few()
	}
	const most = 1 << 14 // teachers per hospital: far beyond any hospital's data
	if _, ok := try(most); !ok || hospitals < 1 {
		return 0, Plan{}, false
	}
	lo, hi := max(teachers, 0), most // !ok(lo) is assumed, ok(hi)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if _, ok := try(mid); ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	plan, _ := try(hi)
	return hi, plan, true
}

// wrong estimates the probability that p releases a query whose top class
// leads every other by lead votes as another class, on classes (see the
// package docs); 0 for a mechanism that
// releases the exact argmax.
func wrong(p mechanism.Params, classes, lead int) float64 {
	m := float64(lead)
	var tail float64
	switch p.Mechanism {
	case mechanism.NZCSVT:
		return 0
	case mechanism.GNMax:
		tail = gaussTail(m, p.Sigma)
	case mechanism.ConfidentGNMax:
		tail = gaussTail(m, p.Sigma2)
	case mechanism.LNMax:
		tail = laplaceTail(m, p.Scale)
	case mechanism.NZC:
		m += p.Constant
		if p.Noise == mechanism.NoiseGaussian {
			tail = gaussTail(m, p.Sigma)
		} else {
			tail = laplaceTail(m, p.Scale)
		}
	default:
		return 0 // a mechanism registered elsewhere: unknown
	}
	return min(1, float64(classesOr10(classes)-1)*tail)
}

// gaussTail is P(X-Y ≥ m) for two continuous Gaussian draws of σ.
func gaussTail(m, sigma float64) float64 {
	if !(sigma > 0) {
		return 0
	}
	return 0.5 * math.Erfc(m/(2*sigma))
}

// laplaceTail is P(X-Y ≥ m) for two continuous Laplace draws of scale b.
func laplaceTail(m, b float64) float64 {
	if !(b > 0) {
		return 0
	}
	return 0.5 * math.Exp(-m/b) * (1 + m/(2*b))
}

// answered is the probability that a unanimous query of teachers is
// answered (see Plan.UnanimousAnswered).
func answered(p mechanism.Params, teachers int) float64 {
	switch {
	case p.Mechanism.Sessions():
		return 0
	case p.Mechanism == mechanism.ConfidentGNMax && p.Sigma1 > 0:
		return 0.5 * math.Erfc((p.Threshold-float64(teachers))/(p.Sigma1*math.Sqrt2))
	}
	return 1
}

// strconv4 spells x with four significant digits, as configurations hold
// sized parameters.
func strconv4(x float64) string { return fmt.Sprintf("%.4g", x) }

// sized is the preset of p's mechanism for the ensemble.
func sized(p mechanism.Params, teachers, classes int) mechanism.Params {
	s, err := Preset(p.Mechanism, teachers, classes)
	if err != nil {
		return p
	}
	return s
}

// QuorumEnsemble is the fewest teachers that vote on a batch when only
// quorum of hospitals vote: the smallest quorum of the listed sizes and
// size for each of the hospitals not listed.
func QuorumEnsemble(hospitals, quorum, size int, listed map[string]int) int {
	all := make([]int, 0, max(hospitals, len(listed)))
	for _, n := range listed {
		all = append(all, n)
	}
	for range max(0, hospitals-len(listed)) {
		all = append(all, size)
	}
	slices.Sort(all)
	k := 0
	for _, n := range all[:min(quorum, len(all))] {
		k += n
	}
	return k
}

// UnanimousAnswered is the probability that p answers a query on which all
// of teachers agree (Plan.UnanimousAnswered).
func UnanimousAnswered(p mechanism.Params, teachers int) float64 {
	return answered(p.Trim(), teachers)
}

// Ensemble is the number of teachers that vote on a batch when every one
// of hospitals votes: the listed sizes, and size for each hospital not
// listed (hospitals 0: the listed ones alone).
func Ensemble(hospitals, size int, listed map[string]int) int {
	k := 0
	for _, n := range listed {
		k += n
	}
	return k + size*max(0, hospitals-len(listed))
}
