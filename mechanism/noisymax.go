package mechanism

import "math"

// The noisy max mechanisms.
const (
	// LNMax is PATE 2017's Laplace noisy max: argmax(n + Lap_Z(b)).
	LNMax Kind = "lnmax"
	// GNMax is PATE 2018's Gaussian noisy max: argmax(n + N_Z(0, σ²)).
	GNMax Kind = "gnmax"
)

// lnmaxDef is PATE 2017's Laplace noisy max, argmax(n + Lap_Z(b)).
type lnmaxDef struct{}

func (lnmaxDef) Kind() Kind { return LNMax }

// Preset is the paper's Laplace scale 20.
func (lnmaxDef) Preset() Params { return Params{Mechanism: LNMax, Scale: 20} }

func (lnmaxDef) Keys(Params) []string { return []string{keyScale} }

func (lnmaxDef) Check(p Params) error { return positive("scale", p.Scale) }

// ForEnsemble keeps the paper's parameters, as the paper did.
func (lnmaxDef) ForEnsemble(p Params, _ float64) Params { return p }

func (lnmaxDef) Describe(p Params) string { return "Laplace b=" + f4(p.Scale) }

func (lnmaxDef) New(p Params) (Mechanism, error) {
	l, err := NewDiscreteLaplace(p.Scale)
	return &noisyMax{p: p, noise: l}, err
}

// QueryCost is pure ε = 2/b (ℓ1 sensitivity 2).
func (lnmaxDef) QueryCost(g Grid, p Params) (QueryCost, error) {
	eps := up(2 / p.Scale)
	return QueryCost{Answered: PureDP(g, eps), Refused: g.Zero(), PureAnswered: eps, PureRefused: 0}, nil
}

// gnmaxDef is PATE 2018's Gaussian noisy max, argmax(n + N_Z(0, σ²)).
type gnmaxDef struct{}

func (gnmaxDef) Kind() Kind { return GNMax }

// Preset is PATE 2018's MNIST σ = 40.
func (gnmaxDef) Preset() Params { return Params{Mechanism: GNMax, Sigma: 40} }

func (gnmaxDef) Keys(Params) []string { return []string{keySigma} }

func (gnmaxDef) Check(p Params) error { return positive("sigma", p.Sigma) }

// ForEnsemble scales σ, measured in votes.
func (gnmaxDef) ForEnsemble(p Params, f float64) Params {
	p.Sigma *= f
	return p
}

func (gnmaxDef) Describe(p Params) string { return "σ=" + f4(p.Sigma) }

func (gnmaxDef) New(p Params) (Mechanism, error) {
	g, err := NewDiscreteGaussian(p.Sigma)
	return &noisyMax{p: p, noise: g}, err
}

// QueryCost is RDP α/σ² (ℓ2² sensitivity 2).
func (gnmaxDef) QueryCost(g Grid, p Params) (QueryCost, error) {
	return QueryCost{Answered: gaussianRDP(g, p.Sigma, 1), Refused: g.Zero(), PureAnswered: math.Inf(1), PureRefused: 0}, nil
}

// noisyMax answers argmax(n + Z) for lnmax and gnmax.
type noisyMax struct {
	p     Params
	noise intNoise
}

func (m *noisyMax) Params() Params { return m.p }

func (m *noisyMax) Answer(src Source, h Histogram) (Outcome, error) {
	if err := m.p.check(h); err != nil {
		return Outcome{}, err
	}
	l, err := noisyArgmax(newSampler(src), m.noise, h, -1, nil)
	if err != nil {
		return Outcome{}, err
	}
	return Answer(l), nil
}
