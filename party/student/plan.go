package student

import (
	"errors"
	"fmt"
	"math"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
)

// Plan is how many queries a student may ask of an aggregator's mechanism
// within a target ε per hospital, whatever the teachers' votes are.
type Plan struct {
	Mechanism mechanism.Params `json:"mechanism"`
	// TargetEpsilon and Delta are the budget planned for.
	TargetEpsilon float64 `json:"target_epsilon"`
	Delta         float64 `json:"delta"`
	// Queries is how many queries to ask (in sessions: in all, over every
	// session; each session answers until its K-th refusal).
	Queries int `json:"queries"`
	// Sessions is the number of sessions (0 for per-query
	// mechanisms).
	Sessions int `json:"sessions,omitempty"`
	// Epsilon is the worst-case ε of the plan at Delta, as the ledger's
	// gate takes it: the conversion (mechanism.Curve.FilterEpsilon), or
	// for sessions their summed pure ε where that is smaller; at
	// most TargetEpsilon.
	Epsilon float64 `json:"epsilon"`
}

// ErrPlan reports a budget in which no query can be asked.
var ErrPlan = errors.New("no query fits the budget")

// PlanQueries plans the largest number of queries, at most maxQueries, whose
// worst-case charge stays within target at δ (every query answered; for
// confident-gnmax an answer costs at least a refusal). For a mechanism that
// answers in sessions (nzc-svt) it plans whole sessions: as many as fit,
// each of which may take every query (maxQueries in all) until its K
// refusals are used. The charges are composed as the ledger composes an
// account's (RDP, the additive δs of sessions added, converted by
// FilterEpsilon), so a plan the ledger's gate would refuse is never
// returned. Data-independent: it reads no vote.
func PlanQueries(p mechanism.Params, target, delta float64, maxQueries int) (Plan, error) {
	if !(target > 0) || math.IsInf(target, 0) || !(delta > 0 && delta < 1) || maxQueries < 1 {
		return Plan{}, fmt.Errorf("%w: target ε %v, δ %v, %d queries: want ε > 0, δ in (0,1), at least one query", ErrPlan, target, delta, maxQueries)
	}
	if err := p.Validate(); err != nil {
		return Plan{}, err
	}
	g := mechanism.DefaultGrid()
	plan := Plan{Mechanism: p, TargetEpsilon: target, Delta: delta}
	// eps is the worst-case ε of n queries (or n sessions).
	eps := func(n int) (float64, error) {
		one, err := p.Charge(g, 1, 0)
		if err != nil {
			return 0, err
		}
		var ch mechanism.Charge
		if p.Mechanism.Sessions() {
			ch = mechanism.Charge{RDP: mechanism.PureDP(g, float64(n)*one.PureEpsilon), Delta: float64(n) * one.Delta, PureEpsilon: float64(n) * one.PureEpsilon}
		} else if ch, err = p.Charge(g, n, 0); err != nil {
			return 0, err
		}
		if !(ch.Delta < delta) {
			return math.Inf(1), nil
		}
		conv, err := ch.RDP.FilterEpsilon(delta - ch.Delta)
		if err != nil {
			return 0, err
		}
		if p.Mechanism.Sessions() {
			// An account of pure-DP charges is gated on the smaller of the
			// conversion and the summed pure ε.
			return min(conv.Epsilon, ledger.PureSum(n, one.PureEpsilon)), nil
		}
		return conv.Epsilon, nil
	}
	limit := maxQueries
	if p.Mechanism.Sessions() {
		limit = 1000 // sessions
	}
	fits := func(n int) (bool, float64, error) {
		e, err := eps(n)
		return err == nil && e <= target, e, err
	}
	ok, e, err := fits(1)
	if err != nil {
		return Plan{}, err
	}
	if !ok {
		what := "one query"
		if p.Mechanism.Sessions() {
			what = "one session"
		}
		return Plan{}, fmt.Errorf("%w: %s of %s costs ε %v at δ %v, above the target %v; raise the target or ask the aggregator for more noise", ErrPlan, what, p.Mechanism, e, delta, target)
	}
	lo, hi := 1, limit+1 // fits(lo); !fits(hi) or hi beyond the limit
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, _, err := fits(mid)
		if err != nil {
			return Plan{}, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	_, plan.Epsilon, _ = fits(lo)
	if p.Mechanism.Sessions() {
		plan.Sessions, plan.Queries = lo, maxQueries
	} else {
		plan.Queries = lo
	}
	return plan, nil
}
