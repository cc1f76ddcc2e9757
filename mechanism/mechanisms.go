package mechanism

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
)

// Kind names an aggregation mechanism.
type Kind string

// The mechanisms.
const (
	// NZC is the source paper's immutable noisy argmax: argmax(n + c·e_top + Z).
	NZC Kind = "nzc"
	// LNMax is PATE 2017's Laplace noisy max: argmax(n + Lap_Z(b)).
	LNMax Kind = "lnmax"
	// GNMax is PATE 2018's Gaussian noisy max: argmax(n + N_Z(0, σ²)).
	GNMax Kind = "gnmax"
	// ConfidentGNMax is PATE 2018's Confident-GNMax: GNMax(σ2) if
	// max(n) + N_Z(0, σ1²) ≥ T, else refuse.
	ConfidentGNMax Kind = "confident-gnmax"
	// NZCSVT releases the exact argmax when a noisy distance to instability
	// clears a noisy threshold, else refuses; a session stops after K
	// refusals. See Session.
	NZCSVT Kind = "nzc-svt"
)

// Kinds lists every mechanism.
func Kinds() []Kind { return []Kind{NZC, LNMax, GNMax, ConfidentGNMax, NZCSVT} }

// Noise names the noise distribution of the nzc mechanism.
type Noise string

// The noises. Both are integer-valued and sampled exactly.
const (
	NoiseLaplace  Noise = "laplace"  // discrete Laplace, scale b
	NoiseGaussian Noise = "gaussian" // discrete Gaussian, σ
)

// ErrBadParams reports mechanism parameters that are missing or out of range.
// It comes wrapped in a *ParamError naming the parameter.
var ErrBadParams = errors.New("mechanism: bad mechanism parameters")

// ErrSessionExhausted reports an nzc-svt session that has refused its K
// queries and may answer no more; open a new session (and pay for it).
var ErrSessionExhausted = errors.New("mechanism: the nzc-svt session has used all its refusals; open a new session")

// ParamError reports a bad parameter.
type ParamError struct {
	Param  string // the parameter's name, as in the CLI flag
	Value  string
	Reason string
}

func (e *ParamError) Error() string {
	return fmt.Sprintf("mechanism: parameter %s = %s: %s", e.Param, e.Value, e.Reason)
}

func (e *ParamError) Unwrap() error { return ErrBadParams }

// Params are a mechanism and its parameters. Only the fields of the chosen
// mechanism may be set; the others must be zero.
type Params struct {
	// Mechanism is the configuration key "name" (mechanism.name in a
	// party's configuration); the ledger records it beside the parameters.
	Mechanism Kind `mapstructure:"name" yaml:"name" json:"mechanism" help:"nzc, lnmax, gnmax, confident-gnmax or nzc-svt"`
	// Teachers is the number of teachers that vote; histograms may hold at
	// most this many votes. Classes, when positive, is the number of classes
	// every histogram must have. A federation learns both from the
	// hospitals, so they are no configuration keys.
	Teachers int `mapstructure:"-" yaml:"-" json:"teachers"`
	Classes  int `mapstructure:"-" yaml:"-" json:"classes,omitempty"`

	Noise       Noise   `mapstructure:"noise" yaml:"noise,omitempty" json:"noise,omitempty" help:"laplace or gaussian (nzc only)"`
	Scale       float64 `mapstructure:"scale" yaml:"scale,omitempty" json:"scale,omitempty" help:"discrete Laplace scale b (nzc with laplace noise, lnmax); nzc-svt: the threshold noise b_ρ"`
	Sigma       float64 `mapstructure:"sigma" yaml:"sigma,omitempty" json:"sigma,omitempty" help:"discrete Gaussian σ (nzc with gaussian noise, gnmax)"`
	Constant    float64 `mapstructure:"constant" yaml:"constant,omitempty" json:"constant,omitempty" help:"the paper's constant c, a whole number (nzc only)"`
	Threshold   float64 `mapstructure:"threshold" yaml:"threshold,omitempty" json:"threshold,omitempty" help:"threshold T (confident-gnmax: on the noisy top count; nzc-svt: on the noisy distance to instability)"`
	Sigma1      float64 `mapstructure:"sigma1" yaml:"sigma1,omitempty" json:"sigma1,omitempty" help:"confident-gnmax: σ1 of the threshold test"`
	Sigma2      float64 `mapstructure:"sigma2" yaml:"sigma2,omitempty" json:"sigma2,omitempty" help:"confident-gnmax: σ2 of the answer"`
	MaxRefusals int     `mapstructure:"max_refusals" yaml:"max_refusals,omitempty" json:"max_refusals,omitempty" help:"nzc-svt: K, the refusals after which a session stops"`
	// DistanceScale is nzc-svt's noise scale on the distance to instability;
	// zero means 2·K·Scale, which splits the session's ε equally between the
	// threshold and the distances.
	DistanceScale float64 `mapstructure:"distance_scale" yaml:"distance_scale,omitempty" json:"distance_scale,omitempty" help:"nzc-svt: Laplace scale b_ν on the distance to instability (0: 2·K·scale)"`
}

func fstr(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

func positive(name string, x float64) error {
	if math.IsNaN(x) || math.IsInf(x, 0) || x <= 0 {
		return &ParamError{Param: name, Value: fstr(x), Reason: "must be a finite number greater than 0"}
	}
	return nil
}

func unset(name string, x float64, k Kind) error {
	if x != 0 {
		return &ParamError{Param: name, Value: fstr(x), Reason: fmt.Sprintf("is not a parameter of %s; leave it unset", k)}
	}
	return nil
}

// Validate checks the parameters.
func (p Params) Validate() error {
	if p.Teachers <= 0 {
		return &ParamError{Param: "teachers", Value: strconv.Itoa(p.Teachers), Reason: "must be at least 1"}
	}
	if p.Classes < 0 {
		return &ParamError{Param: "classes", Value: strconv.Itoa(p.Classes), Reason: "must not be negative"}
	}
	used := map[string]bool{}
	var errs []error
	need := func(name string, x float64) {
		used[name] = true
		errs = append(errs, positive(name, x))
	}
	switch p.Mechanism {
	case NZC:
		used["noise"], used["constant"] = true, true
		switch p.Noise {
		case NoiseLaplace:
			need("scale", p.Scale)
		case NoiseGaussian:
			need("sigma", p.Sigma)
		default:
			errs = append(errs, &ParamError{Param: "noise", Value: string(p.Noise), Reason: "must be laplace or gaussian"})
		}
		c := p.Constant
		if math.IsNaN(c) || math.IsInf(c, 0) || c < 0 || c != math.Trunc(c) {
			errs = append(errs, &ParamError{Param: "constant", Value: fstr(c), Reason: "must be a finite whole number ≥ 0 (votes and noise are integers)"})
		}
	case LNMax:
		need("scale", p.Scale)
	case GNMax:
		need("sigma", p.Sigma)
	case ConfidentGNMax:
		need("sigma1", p.Sigma1)
		need("sigma2", p.Sigma2)
		used["threshold"] = true
		if math.IsNaN(p.Threshold) || math.IsInf(p.Threshold, 0) {
			errs = append(errs, &ParamError{Param: "threshold", Value: fstr(p.Threshold), Reason: "must be a finite number"})
		}
	case NZCSVT:
		need("scale", p.Scale)
		used["threshold"], used["max-refusals"], used["distance-scale"] = true, true, true
		if math.IsNaN(p.Threshold) || math.IsInf(p.Threshold, 0) || p.Threshold < 0 || p.Threshold > 1e9 {
			errs = append(errs, &ParamError{Param: "threshold", Value: fstr(p.Threshold), Reason: "must be a number between 0 and 1e9 (distances are numbers of teachers)"})
		}
		if p.MaxRefusals < 1 {
			errs = append(errs, &ParamError{Param: "max-refusals", Value: strconv.Itoa(p.MaxRefusals), Reason: "must be at least 1"})
		}
		if p.DistanceScale != 0 {
			errs = append(errs, positive("distance-scale", p.DistanceScale))
		}
	default:
		return &ParamError{Param: "mechanism", Value: string(p.Mechanism), Reason: "must be one of nzc, lnmax, gnmax, confident-gnmax, nzc-svt"}
	}
	for _, f := range []struct {
		name string
		x    float64
	}{{"scale", p.Scale}, {"sigma", p.Sigma}, {"constant", p.Constant}, {"threshold", p.Threshold}, {"sigma1", p.Sigma1}, {"sigma2", p.Sigma2}, {"distance-scale", p.DistanceScale}} {
		if !used[f.name] {
			errs = append(errs, unset(f.name, f.x, p.Mechanism))
		}
	}
	if !used["noise"] && p.Noise != "" {
		errs = append(errs, &ParamError{Param: "noise", Value: string(p.Noise), Reason: fmt.Sprintf("is not a parameter of %s; leave it unset", p.Mechanism)})
	}
	if !used["max-refusals"] && p.MaxRefusals != 0 {
		errs = append(errs, &ParamError{Param: "max-refusals", Value: strconv.Itoa(p.MaxRefusals), Reason: fmt.Sprintf("is not a parameter of %s; leave it unset", p.Mechanism)})
	}
	return errors.Join(errs...)
}

// Outcome is what a mechanism releases for one query: a label, or a refusal.
type Outcome struct {
	Label   int  // the released class; −1 when refused
	Refused bool // the mechanism declined to answer
}

// Refusal returns the outcome of a refused query.
func Refusal() Outcome { return Outcome{Label: -1, Refused: true} }

// Answer returns the outcome that releases label.
func Answer(label int) Outcome { return Outcome{Label: label} }

func (o Outcome) String() string {
	if o.Refused {
		return "refused"
	}
	return strconv.Itoa(o.Label)
}

// Mechanism answers queries. Implementations are safe for concurrent use
// except *Session, which is a sequential, stateful session.
type Mechanism interface {
	// Params returns the parameters the mechanism was built with.
	Params() Params
	// Answer validates h and releases an outcome, drawing noise from src.
	Answer(src Source, h Histogram) (Outcome, error)
}

// New builds the mechanism p describes. For nzc-svt it opens a new Session.
func New(p Params) (Mechanism, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	switch p.Mechanism {
	case NZC:
		m := &nzcMech{p: p, c: new(big.Int)}
		new(big.Float).SetFloat64(p.Constant).Int(m.c)
		var err error
		if p.Noise == NoiseLaplace {
			m.noise, err = NewDiscreteLaplace(p.Scale)
		} else {
			m.noise, err = NewDiscreteGaussian(p.Sigma)
		}
		return m, err
	case LNMax:
		l, err := NewDiscreteLaplace(p.Scale)
		return &noisyMax{p: p, noise: l}, err
	case GNMax:
		g, err := NewDiscreteGaussian(p.Sigma)
		return &noisyMax{p: p, noise: g}, err
	case ConfidentGNMax:
		g1, err := NewDiscreteGaussian(p.Sigma1)
		if err != nil {
			return nil, err
		}
		g2, err := NewDiscreteGaussian(p.Sigma2)
		return &confident{p: p, test: g1, answer: g2}, err
	case NZCSVT:
		return Open(p)
	}
	panic("unreachable: Validate accepted an unknown mechanism")
}

type intNoise interface {
	sampleInto(s *sampler, dst *big.Int) error
}

func (p Params) check(h Histogram) error { return h.Validate(p.Classes, p.Teachers) }

// noisyArgmax returns argmax_i(h_i + bonus·[i = bonusAt] + Z_i), ties to the
// lowest index, computed exactly in integers.
func noisyArgmax(s *sampler, noise intNoise, h Histogram, bonusAt int, bonus *big.Int) (int, error) {
	var best, v big.Int
	arg := -1
	for i, n := range h {
		if err := noise.sampleInto(s, &v); err != nil {
			return 0, err
		}
		v.Add(&v, big.NewInt(int64(n)))
		if i == bonusAt && bonus != nil {
			v.Add(&v, bonus)
		}
		if arg < 0 || v.Cmp(&best) > 0 {
			best.Set(&v)
			arg = i
		}
	}
	return arg, nil
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
