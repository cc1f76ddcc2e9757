package mechanism

import (
	"errors"
	"fmt"
	"math"
	"math/big"
)

// NZC is the source paper's immutable noisy argmax: argmax(n + c·e_top + Z).
const NZC Kind = "nzc"

// Noise names the noise distribution of the nzc mechanism.
type Noise string

// The noises. Both are integer-valued and sampled exactly.
const (
	NoiseLaplace  Noise = "laplace"  // discrete Laplace, scale b
	NoiseGaussian Noise = "gaussian" // discrete Gaussian, σ
)

// nzcDef is the source paper's immutable noisy argmax,
// argmax(n + c·e_top + Z), with discrete Laplace (scale b) or discrete
// Gaussian (σ) noise Z.
type nzcDef struct{}

func (nzcDef) Kind() Kind { return NZC }

// Preset is the paper's c = 1e100, γ = 1e10, i.e. Laplace scale 1e-10.
func (nzcDef) Preset() Params {
	return Params{Mechanism: NZC, Noise: NoiseLaplace, Scale: 1e-10, Constant: 1e100}
}

// Keys: the noise decides whether the scale is b or σ.
func (nzcDef) Keys(p Params) []string {
	if p.Noise == NoiseGaussian {
		return []string{keyConstant, keyNoise, keySigma}
	}
	return []string{keyConstant, keyNoise, keyScale}
}

func (nzcDef) Check(p Params) error {
	var err error
	switch p.Noise {
	case NoiseLaplace:
		err = positive("scale", p.Scale)
	case NoiseGaussian:
		err = positive("sigma", p.Sigma)
	default:
		err = &ParamError{Param: "noise", Value: string(p.Noise), Reason: "must be laplace or gaussian"}
	}
	if c := p.Constant; math.IsNaN(c) || math.IsInf(c, 0) || c < 0 || c != math.Trunc(c) {
		return errors.Join(err, &ParamError{Param: "constant", Value: fstr(c), Reason: "must be a finite whole number ≥ 0 (votes and noise are integers)"})
	}
	return err
}

// ForEnsemble keeps the paper's parameters, as the paper did.
func (nzcDef) ForEnsemble(p Params, _ float64) Params { return p }

func (nzcDef) Describe(p Params) string {
	if p.Noise == NoiseGaussian {
		return fmt.Sprintf("c=%s, Gaussian σ=%s", f4(p.Constant), f4(p.Sigma))
	}
	return fmt.Sprintf("c=%s, Laplace b=%s", f4(p.Constant), f4(p.Scale))
}

func (nzcDef) New(p Params) (Mechanism, error) {
	m := &nzcMech{p: p, c: new(big.Int)}
	new(big.Float).SetFloat64(p.Constant).Int(m.c)
	var err error
	if p.Noise == NoiseLaplace {
		m.noise, err = NewDiscreteLaplace(p.Scale)
	} else {
		m.noise, err = NewDiscreteGaussian(p.Sigma)
	}
	return m, err
}

// QueryCost: the ℓ1 sensitivity of n + c·e_top is 2c+2, so Laplace noise
// costs pure ε = 2(c+1)/b; its ℓ2² sensitivity is 2(c+1)², so Gaussian
// noise costs RDP α(c+1)²/σ². A refusal never happens.
func (nzcDef) QueryCost(g Grid, p Params) (QueryCost, error) {
	c1 := up(p.Constant + 1)
	if p.Noise == NoiseLaplace {
		eps := up(up(2*c1) / p.Scale)
		return QueryCost{Answered: PureDP(g, eps), Refused: g.Zero(), PureAnswered: eps, PureRefused: 0}, nil
	}
	r := up(c1 / p.Sigma)
	r2 := up(r * r)
	return QueryCost{Answered: g.Eval(func(a float64) float64 { return up(a * r2) }), Refused: g.Zero(), PureAnswered: math.Inf(1), PureRefused: 0}, nil
}

type nzcMech struct {
	p     Params
	c     *big.Int
	noise intNoise
}

func (m *nzcMech) Params() Params { return m.p }

func (m *nzcMech) Answer(src Source, h Histogram) (Outcome, error) {
	if err := m.p.check(h); err != nil {
		return Outcome{}, err
	}
	l, err := noisyArgmax(newSampler(src), m.noise, h, h.Top(), m.c)
	if err != nil {
		return Outcome{}, err
	}
	return Answer(l), nil
}
