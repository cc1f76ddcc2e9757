package mechanism

import (
	"fmt"
	"math"
)

// PlanSession returns the nzc-svt parameters of one session for an
// ensemble of teachers and classes whose whole cost is at most eps (pure)
// with its own additive δ at most delta, allowing maxRefusals refusals (K).
// Of the ways to split eps between the threshold's noise (1/b_ρ) and the
// distances' (2K/b_ν), it takes the one that allows the lowest threshold T,
// searched over splits of eps in steps of 1/40, so that the most queries on
// which the teachers agree are answered; ties go to the larger b_ρ. The
// returned parameters' cost (Params.Charge) is at most (eps, delta). It
// fails with ErrBadParams when no threshold below the largest possible
// distance to instability (⌊teachers/2⌋) meets delta: the session would
// answer nothing.
func PlanSession(eps, delta float64, maxRefusals, teachers, classes int) (Params, error) {
	if !(eps > 0) || math.IsInf(eps, 0) || !(delta > 0 && delta < 1) || maxRefusals < 1 || teachers < 2 {
		return Params{}, fmt.Errorf("%w: plan an nzc-svt session of ε %v, δ %v, K %d for %d teachers: want ε > 0, δ in (0,1), K ≥ 1, at least 2 teachers",
			ErrBadParams, eps, delta, maxRefusals, teachers)
	}
	g := DefaultGrid()
	maxD := teachers / 2
	var best Params
	found := false
	for i := 1; i < 40; i++ {
		f := float64(i) / 40
		p := Params{Mechanism: NZCSVT, Teachers: teachers, Classes: classes, MaxRefusals: maxRefusals,
			// Round the scales up a little so the rounded-up cost stays
			// within eps.
			Scale:         1 / (f * eps) * (1 + 1e-9),
			DistanceScale: 2 * float64(maxRefusals) / ((1 - f) * eps) * (1 + 1e-9)}
		// δ falls as T grows: bisect for the lowest T that meets delta.
		ok := func(t int) bool {
			p.Threshold = float64(t)
			ch, err := p.Charge(g, 0, 0)
			return err == nil && ch.Delta <= delta && ch.PureEpsilon <= eps
		}
		if !ok(maxD) {
			continue
		}
		lo, hi := 0, maxD // ok(hi), lowest T ≥ 1
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			if mid >= 1 && ok(mid) {
				hi = mid
			} else {
				lo = mid
			}
		}
		p.Threshold = float64(hi)
		if !found || p.Threshold < best.Threshold {
			best, found = p, true
		}
	}
	if !found {
		return Params{}, fmt.Errorf("%w: no nzc-svt session of ε %v with δ ≤ %v and K = %d exists for %d teachers: its threshold would exceed the largest distance to instability (%d); raise ε or δ, or use more teachers",
			ErrBadParams, eps, delta, maxRefusals, teachers, maxD)
	}
	return best, nil
}

// The own δ and the refusal bound K of the preset's sessions.
const (
	PresetSessionDelta    = 5e-6
	PresetSessionRefusals = 1
)

// PlanPresetSession plans nzc-svt's preset session — pure ε = 1, its own δ
// at most 5e-6, K = 1 — for an ensemble of the given size: a session's
// threshold and noise are planned for its ensemble rather than scaled, since
// its δ depends on how far the threshold sits from the largest distance the
// ensemble allows. Teachers and Classes are left unset.
func PlanPresetSession(teachers, classes int) (Params, error) {
	p, err := PlanSession(1, PresetSessionDelta, PresetSessionRefusals, teachers, classes)
	if err != nil {
		return Params{}, err
	}
	p.Teachers, p.Classes = 0, 0
	return p, nil
}
