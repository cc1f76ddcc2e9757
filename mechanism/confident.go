package mechanism

import (
	"errors"
	"math"
	"math/big"
)

// ConfidentGNMax is PATE 2018's Confident-GNMax: GNMax(σ2) if
// max(n) + N_Z(0, σ1²) ≥ T, else refuse.
const ConfidentGNMax Kind = "confident-gnmax"

// confidentDef is PATE 2018's Confident-GNMax: GNMax(σ2) if
// max(n) + N_Z(0, σ1²) ≥ T, else a refusal.
type confidentDef struct{}

func (confidentDef) Kind() Kind { return ConfidentGNMax }

// Preset is PATE 2018's MNIST T = 200, σ1 = 150, σ2 = 40.
func (confidentDef) Preset() Params {
	return Params{Mechanism: ConfidentGNMax, Threshold: 200, Sigma1: 150, Sigma2: 40}
}

func (confidentDef) Keys(Params) []string { return []string{keySigma1, keySigma2, keyThreshold} }

func (confidentDef) Check(p Params) error {
	err := errors.Join(positive("sigma1", p.Sigma1), positive("sigma2", p.Sigma2))
	if math.IsNaN(p.Threshold) || math.IsInf(p.Threshold, 0) {
		return errors.Join(err, &ParamError{Param: "threshold", Value: fstr(p.Threshold), Reason: "must be a finite number"})
	}
	return err
}

// ForEnsemble scales T, σ1 and σ2, measured in votes.
func (confidentDef) ForEnsemble(p Params, f float64) Params {
	p.Threshold *= f
	p.Sigma1 *= f
	p.Sigma2 *= f
	return p
}

func (confidentDef) Describe(p Params) string {
	return "T=" + f4(p.Threshold) + ", σ1=" + f4(p.Sigma1) + ", σ2=" + f4(p.Sigma2)
}

func (confidentDef) New(p Params) (Mechanism, error) {
	g1, err := NewDiscreteGaussian(p.Sigma1)
	if err != nil {
		return nil, err
	}
	g2, err := NewDiscreteGaussian(p.Sigma2)
	return &confident{p: p, test: g1, answer: g2}, err
}

// QueryCost is RDP α/(2σ1²) for the test, on every query, plus α/σ2² when
// the query is answered.
func (confidentDef) QueryCost(g Grid, p Params) (QueryCost, error) {
	test := gaussianRDP(g, p.Sigma1, 0.5)
	ans, err := test.Compose(gaussianRDP(g, p.Sigma2, 1))
	if err != nil {
		return QueryCost{}, err
	}
	inf := math.Inf(1)
	return QueryCost{Answered: roundUp(ans), Refused: test, PureAnswered: inf, PureRefused: inf}, nil
}

type confident struct {
	p            Params
	test, answer DiscreteGaussian
}

func (m *confident) Params() Params { return m.p }

func (m *confident) Answer(src Source, h Histogram) (Outcome, error) {
	if err := m.p.check(h); err != nil {
		return Outcome{}, err
	}
	s := newSampler(src)
	var z big.Int
	if err := m.test.sampleInto(s, &z); err != nil {
		return Outcome{}, err
	}
	z.Add(&z, big.NewInt(int64(h[h.Top()])))
	// max(n) + Z ≥ T, compared exactly.
	if new(big.Float).SetInt(&z).Cmp(big.NewFloat(m.p.Threshold)) < 0 {
		return Refusal(), nil
	}
	l, err := noisyArgmax(s, m.answer, h, -1, nil)
	if err != nil {
		return Outcome{}, err
	}
	return Answer(l), nil
}
