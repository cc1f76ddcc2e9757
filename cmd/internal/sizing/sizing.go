// Package sizing says what a federation's mechanism allows for the ensemble
// that votes on each batch: how many labels fit a hospital's cap, whatever
// the votes, and whether the mechanism can release a label at all. nzc init
// sizes the mechanism with it, nzc-aggregator checks its configuration with
// it at start.
package sizing

import (
	"errors"
	"fmt"

	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/party/student"
)

// ErrCannotWork reports a mechanism that cannot label anything for the
// ensemble it is given.
var ErrCannotWork = errors.New("the mechanism cannot work for this federation")

// MaxLabels is the most labels a plan counts.
const MaxLabels = 1_000_000

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
}

// String says what the plan allows, in one line.
func (p Plan) String() string {
	what := fmt.Sprintf("%d labels", p.Labels)
	if p.Sessions > 0 {
		what = fmt.Sprintf("%d session(s) of up to %d queries", p.Sessions, p.Labels)
	}
	return fmt.Sprintf("%s (%s) for %d teachers on %d classes: %s within a hospital's cap ε=%g, δ=%g, whatever the votes (worst case ε %.3g)",
		p.Mechanism.Mechanism, p.Mechanism, p.Teachers, p.Classes, what, p.CapEpsilon, p.CapDelta, p.Epsilon)
}

// Preset returns the preset of mechanism k sized for an ensemble of
// teachers voting on classes (mechanism.Params.ForEnsemble).
func Preset(k mechanism.Kind, teachers, classes int) (mechanism.Params, error) {
	p, err := mechanism.Preset(k)
	if err != nil {
		return mechanism.Params{}, err
	}
	return p.ForEnsemble(teachers, classes), nil
}

// Reachable refuses, with ErrCannotWork and what to change, a mechanism
// whose threshold an ensemble of teachers cannot reach: confident-gnmax
// with T at least the number of teachers, which refuses almost every query
// whatever the hospitals' caps.
func Reachable(p mechanism.Params, teachers, classes int) error {
	p = p.Trim()
	if p.Mechanism != mechanism.ConfidentGNMax || p.Threshold < float64(teachers) {
		return nil
	}
	s := sized(p, teachers, classes)
	return fmt.Errorf("%w: confident-gnmax's threshold T=%g is not below the %d teachers that vote on a batch, so almost every query would be refused; set mechanism.threshold, sigma1 and sigma2 for %d teachers (nzc init sizes them: T=%g, σ1=%g, σ2=%g)",
		ErrCannotWork, p.Threshold, teachers, teachers, s.Threshold, s.Sigma1, s.Sigma2)
}

// Check plans p for an ensemble of teachers voting on classes within a cap
// of (capEps, capDelta), and refuses, with ErrCannotWork and what to
// change, a mechanism that can release no label: a confident-gnmax
// threshold the ensemble's top count cannot reach, or a single label
// costing more than the cap.
func Check(p mechanism.Params, teachers, classes int, capEps, capDelta float64) (Plan, error) {
	p = p.Trim()
	p.Teachers, p.Classes = teachers, classes
	if err := Reachable(p, teachers, classes); err != nil {
		return Plan{}, err
	}
	plan, err := student.PlanQueries(p, capEps, capDelta, MaxLabels)
	if errors.Is(err, student.ErrPlan) {
		return Plan{}, fmt.Errorf("%w: %v; with %d teachers, more teachers per hospital (nzc init --teachers) or a larger cap lets labels through", ErrCannotWork, err, teachers)
	}
	if err != nil {
		return Plan{}, err
	}
	return Plan{Mechanism: p, Teachers: teachers, Classes: classes, CapEpsilon: capEps, CapDelta: capDelta,
		Labels: plan.Queries, Sessions: plan.Sessions, Epsilon: plan.Epsilon}, nil
}

// sized is the preset of p's mechanism for the ensemble.
func sized(p mechanism.Params, teachers, classes int) mechanism.Params {
	s, err := Preset(p.Mechanism, teachers, classes)
	if err != nil {
		return p
	}
	return s
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
