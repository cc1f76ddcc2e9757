package audit

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/nzcfed/nzc/mechanism"
)

// An nzc-svt session's δ bounds one event: that it answers a query whose
// argmax one teacher could change (distance to instability 0), so that the
// exact label it releases is not protected by the ε of its refusals
// (mechanism.Session, proof step (3)). UnstableAudit runs sessions against
// query strategies and bounds the probability of that event from below:
// an accounted δ under the lower bound would prove the accounting wrong.

// Strategy picks an nzc-svt session's queries by their distance to
// instability, from what the session has released so far.
type Strategy struct {
	Name string
	// Next returns the distance of the next query after answered answers
	// and refused refusals, or false to stop asking.
	Next func(answered, refused int) (distance int, ok bool)
}

// Strategies returns the query strategies an nzc-svt session is audited
// against, for its threshold T:
//
//   - only unstable queries: for K = 1 the event's probability is then
//     exactly P[ρ + ν ≥ ⌊T⌋+1], the bound the session is charged, so the
//     audit is sharp;
//   - 20 queries far above the threshold, then only unstable ones;
//   - queries at the threshold until 3 are answered (which makes a low
//     threshold noise likely), then only unstable ones: the strategy that
//     tries to ask its unstable queries when ρ is low.
func Strategies(p mechanism.Params) []Strategy {
	t := int(math.Floor(p.Threshold))
	// Twenty noise scales above the threshold, or as far as the ensemble
	// allows.
	far := t + 20*int(math.Ceil(max(p.Scale, p.DistanceScale)))
	far = distanceHist(p.Teachers, far).Distance(p.Teachers)
	return []Strategy{
		{Name: "unstable queries only", Next: func(int, int) (int, bool) { return 0, true }},
		{Name: fmt.Sprintf("20 queries at distance %d, then unstable ones", far), Next: func(a, _ int) (int, bool) {
			if a < 20 {
				return far, true
			}
			return 0, true
		}},
		{Name: fmt.Sprintf("queries at distance %d until 3 are answered, then unstable ones", t), Next: func(a, _ int) (int, bool) {
			if a < 3 {
				return t, true
			}
			return 0, true
		}},
	}
}

// UnstableResult is the audit of one strategy.
type UnstableResult struct {
	Strategy string `json:"strategy"`
	// Trials sessions were run; in Released of them an unstable query was
	// answered.
	Trials   int `json:"sessions"`
	Released int `json:"released"`
	// Lower and Upper bound the event's probability (Clopper–Pearson, each
	// holding with probability at least Confidence).
	Confidence float64 `json:"confidence"`
	Lower      float64 `json:"probability_lower_bound"`
	Upper      float64 `json:"probability_upper_bound"`
	// DeltaAccounted is the δ the session is charged.
	DeltaAccounted float64 `json:"delta_accounted"`
	// OK is DeltaAccounted ≥ Lower.
	OK bool `json:"ok"`
}

// maxSessionQueries ends a trial whose strategy keeps being answered: a
// bound on the work, far beyond what any strategy here needs.
const maxSessionQueries = 10_000

// UnstableAudit runs trials nzc-svt sessions of p under the strategy and
// counts those that answer an unstable query. accountant (nil: Accounted)
// gives the session's charged δ. Against the sharp strategy (K = 1, only
// unstable queries) a correct accounting fails with probability
// 1 − confidence, so choose a confidence close to 1 (nzc audit: 1 − 1e-6).
func UnstableAudit(ctx context.Context, src mechanism.Source, p mechanism.Params, s Strategy, trials int, confidence float64,
	accountant func(p mechanism.Params, delta float64) (eps, d float64, err error)) (UnstableResult, error) {
	if p.Mechanism != mechanism.NZCSVT {
		return UnstableResult{}, fmt.Errorf("%w: the unstable-answer audit is for nzc-svt sessions, not %s", ErrBadConfig, p.Mechanism)
	}
	if trials < 1 || !(confidence > 0 && confidence < 1) || s.Next == nil {
		return UnstableResult{}, ErrBadConfig
	}
	if accountant == nil {
		accountant = Accounted
	}
	res := UnstableResult{Strategy: s.Name, Trials: trials, Confidence: confidence}
	var err error
	if _, res.DeltaAccounted, err = accountant(p, 0); err != nil {
		return res, err
	}
	for i := range trials {
		if i%1000 == 0 {
			if err := ctx.Err(); err != nil {
				return res, err
			}
		}
		bad, err := unstableOnce(src, p, s)
		if err != nil {
			return res, err
		}
		if bad {
			res.Released++
		}
	}
	alpha := 1 - confidence
	res.Lower = ClopperPearsonLower(res.Released, trials, alpha)
	res.Upper = ClopperPearsonUpper(res.Released, trials, alpha)
	res.OK = res.DeltaAccounted >= res.Lower
	return res, nil
}

// unstableOnce runs one session under s and reports whether it answered an
// unstable query.
func unstableOnce(src mechanism.Source, p mechanism.Params, s Strategy) (bool, error) {
	sess, err := mechanism.Open(p)
	if err != nil {
		return false, err
	}
	answered, refused := 0, 0
	for range maxSessionQueries {
		d, ok := s.Next(answered, refused)
		if !ok {
			return false, nil
		}
		o, err := sess.Answer(src, distanceHist(p.Teachers, d))
		switch {
		case errors.Is(err, mechanism.ErrSessionExhausted):
			return false, nil
		case err != nil:
			return false, err
		case o.Refused:
			refused++
		case d == 0:
			return true, nil
		default:
			answered++
		}
	}
	return false, nil
}
