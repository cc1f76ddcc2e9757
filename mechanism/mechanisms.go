package mechanism

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// Kind names an aggregation mechanism. Each mechanism's Kind constant is
// in its own file, beside its Def.
type Kind string

// ErrBadParams reports mechanism parameters that are missing or out of range.
// It comes wrapped in a *ParamError naming the parameter.
var ErrBadParams = errors.New("mechanism: bad mechanism parameters")

// ErrSessionExhausted reports a session that has refused its K queries and
// may answer no more; open a new session (and pay for it).
// A session's own error names its mechanism (ExhaustedError).
var ErrSessionExhausted = errors.New("mechanism: the session has used all its refusals; open a new session")

// ExhaustedError is the ErrSessionExhausted of a session of mechanism Kind.
type ExhaustedError struct{ Kind Kind }

func (e *ExhaustedError) Error() string {
	return fmt.Sprintf("mechanism: the %s session has used all its refusals; open a new session", e.Kind)
}

func (e *ExhaustedError) Unwrap() error { return ErrSessionExhausted }

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

// Validate checks the parameters: teachers and classes, the parameters of
// p's mechanism (its Def's Check), and that every parameter the mechanism
// does not read is unset.
func (p Params) Validate() error {
	if p.Teachers <= 0 {
		return &ParamError{Param: "teachers", Value: strconv.Itoa(p.Teachers), Reason: "must be at least 1"}
	}
	if p.Classes < 0 {
		return &ParamError{Param: "classes", Value: strconv.Itoa(p.Classes), Reason: "must not be negative"}
	}
	d, err := Lookup(p.Mechanism)
	if err != nil {
		return err
	}
	errs := []error{d.Check(p)}
	used := map[string]bool{}
	for _, k := range d.Keys(p) {
		used[k] = true
	}
	for _, k := range paramKeys() {
		if used[k] {
			continue
		}
		var v string
		switch f := p.field(k).(type) {
		case *float64:
			if *f != 0 {
				v = fstr(*f)
			}
		case *int:
			if *f != 0 {
				v = strconv.Itoa(*f)
			}
		case *Noise:
			v = string(*f)
		}
		if v != "" {
			errs = append(errs, &ParamError{Param: flagName(k), Value: v, Reason: fmt.Sprintf("is not a parameter of %s; leave it unset", p.Mechanism)})
		}
	}
	return errors.Join(errs...)
}

// flagName is the name a ParamError gives the parameter of ledger key k:
// the key as a command-line flag spells it.
func flagName(k string) string { return strings.ReplaceAll(k, "_", "-") }

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
// except a Session, which is sequential and stateful.
type Mechanism interface {
	// Params returns the parameters the mechanism was built with.
	Params() Params
	// Answer validates h and releases an outcome, drawing noise from src.
	Answer(src Source, h Histogram) (Outcome, error)
}

// New builds the mechanism p describes. For a mechanism that answers in
// sessions it opens a new Session.
func New(p Params) (Mechanism, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	d, err := Lookup(p.Mechanism)
	if err != nil {
		return nil, err
	}
	return d.New(p)
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
