// Package budget plans what a student asks within a privacy cap from what
// has been released only: answers and refusals are outputs, so planning
// on them costs nothing. A student opens one nzc-svt session, whose cost
// is fixed when it opens; when the session ends early (at its refusal
// bound, before the student has the labels it wants), Rest says how many
// queries of a per-query mechanism (GNMax) the rest of the cap still buys,
// composed with what was spent as the ledger composes an account.
package budget

import (
	"errors"
	"fmt"
	"math"

	"github.com/nzcfed/nzc/mechanism"
)

// ErrBudget reports a cap, δ or spending that leaves nothing to plan.
var ErrBudget = errors.New("budget: nothing fits the cap")

// Epsilon is the proven ε at total δ of a charge, as the ledger's gate
// takes an account: the filter conversion of its RDP curve at δ minus its
// additive δ, or its pure ε where that is smaller; +Inf when its own δ
// reaches delta.
func Epsilon(ch mechanism.Charge, delta float64) (float64, error) {
	if !(ch.Delta < delta) {
		return math.Inf(1), nil
	}
	conv, err := ch.RDP.FilterEpsilon(delta - ch.Delta)
	if err != nil {
		return 0, err
	}
	return min(conv.Epsilon, ch.PureEpsilon), nil
}

// Compose is the charge of a then b: their curves composed, their additive
// δ and pure ε added.
func Compose(a, b mechanism.Charge) (mechanism.Charge, error) {
	rdp, err := a.RDP.Compose(b.RDP)
	if err != nil {
		return mechanism.Charge{}, err
	}
	return mechanism.Charge{RDP: rdp, Delta: a.Delta + b.Delta, PureEpsilon: a.PureEpsilon + b.PureEpsilon}, nil
}

// Rest returns how many queries of p, at most max, fit within the cap at
// total δ after spent, whatever the votes (every query charged as if
// answered), and the proven ε of spent and those queries together. It
// reads no vote: spent is the data-independent charge of what was
// released. Zero queries fit when spent alone uses the cap.
func Rest(spent mechanism.Charge, p mechanism.Params, capEps, delta float64, max int) (int, float64, error) {
	if !(capEps > 0) || math.IsInf(capEps, 0) || !(delta > 0 && delta < 1) || max < 0 {
		return 0, 0, fmt.Errorf("%w: cap ε %v, δ %v, %d queries: want ε > 0, δ in (0,1), 0 or more queries", ErrBudget, capEps, delta, max)
	}
	if p.Mechanism.Sessions() {
		return 0, 0, fmt.Errorf("%w: %s is planned by the session, not by the query", ErrBudget, p.Mechanism)
	}
	g := spent.RDP.Grid()
	total := func(n int) (float64, error) {
		ch, err := p.Charge(g, n, 0)
		if err != nil {
			return 0, err
		}
		if n == 0 {
			ch = mechanism.Charge{RDP: g.Zero()}
		}
		both, err := Compose(spent, ch)
		if err != nil {
			return 0, err
		}
		return Epsilon(both, delta)
	}
	e0, err := total(0)
	if err != nil {
		return 0, 0, err
	}
	if e0 > capEps {
		return 0, e0, fmt.Errorf("%w: what was spent already costs ε %v, above the cap %v", ErrBudget, e0, capEps)
	}
	lo, hi := 0, max+1 // total(lo) ≤ cap; hi is past the limit or over the cap
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		e, err := total(mid)
		if err != nil {
			return 0, 0, err
		}
		if e <= capEps {
			lo = mid
		} else {
			hi = mid
		}
	}
	e, err := total(lo)
	return lo, e, err
}
