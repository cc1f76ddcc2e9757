// Package mechanismtest holds a mechanism defined outside package mechanism,
// for tests that show a registered mechanism works through the ledger's
// cost derivation and the parties without any change to them.
package mechanismtest

import (
	"math"
	"math/big"
	"strconv"
	"sync"
	"testing"

	"github.com/nzcfed/nzc/mechanism"
)

// Toy is the kind of the toy mechanism: a Laplace noisy max that answers
// only when the noisy top count clears a threshold. With noise scale b, the
// test max(n) + Lap_Z(b) ≥ T has ℓ1 sensitivity 1 (pure ε 1/b, every
// query) and the answer argmax(n + Lap_Z(b)) sensitivity 2 (2/b more when
// answered).
const Toy mechanism.Kind = "toy-confident-lnmax"

// ToyDef defines the toy mechanism. It reads the parameters scale (b) and
// threshold (T).
type ToyDef struct{}

var registerOnce = sync.OnceValue(func() error { return mechanism.Register(ToyDef{}) })

// Register registers the toy mechanism, once per process, and fails t if
// it cannot.
func Register(t testing.TB) {
	t.Helper()
	if err := registerOnce(); err != nil {
		t.Fatal(err)
	}
}

func (ToyDef) Kind() mechanism.Kind { return Toy }

func (ToyDef) Preset() mechanism.Params {
	return mechanism.Params{Mechanism: Toy, Scale: 20, Threshold: 150}
}

func (ToyDef) Keys(mechanism.Params) []string { return []string{"scale", "threshold"} }

func (ToyDef) Check(p mechanism.Params) error {
	if math.IsNaN(p.Scale) || math.IsInf(p.Scale, 0) || p.Scale <= 0 {
		return &mechanism.ParamError{Param: "scale", Value: strconv.FormatFloat(p.Scale, 'g', -1, 64), Reason: "must be a finite number greater than 0"}
	}
	if math.IsNaN(p.Threshold) || math.IsInf(p.Threshold, 0) {
		return &mechanism.ParamError{Param: "threshold", Value: strconv.FormatFloat(p.Threshold, 'g', -1, 64), Reason: "must be a finite number"}
	}
	return nil
}

// ForEnsemble scales the threshold, measured in votes.
func (ToyDef) ForEnsemble(p mechanism.Params, f float64) mechanism.Params {
	p.Threshold *= f
	return p
}

func (ToyDef) Describe(p mechanism.Params) string {
	return "T=" + strconv.FormatFloat(p.Threshold, 'g', 4, 64) + ", Laplace b=" + strconv.FormatFloat(p.Scale, 'g', 4, 64)
}

func (ToyDef) New(p mechanism.Params) (mechanism.Mechanism, error) {
	l, err := mechanism.NewDiscreteLaplace(p.Scale)
	return &toy{p: p, noise: l}, err
}

// QueryCost is pure ε 1/b for a refusal and 3/b for an answer, rounded
// up.
func (ToyDef) QueryCost(g mechanism.Grid, p mechanism.Params) (mechanism.QueryCost, error) {
	refused := math.Nextafter(1/p.Scale, math.Inf(1))
	answered := math.Nextafter(3/p.Scale, math.Inf(1))
	return mechanism.QueryCost{Answered: mechanism.PureDP(g, answered), Refused: mechanism.PureDP(g, refused),
		PureAnswered: answered, PureRefused: refused}, nil
}

type toy struct {
	p     mechanism.Params
	noise mechanism.DiscreteLaplace
}

func (m *toy) Params() mechanism.Params { return m.p }

func (m *toy) Answer(src mechanism.Source, h mechanism.Histogram) (mechanism.Outcome, error) {
	if err := h.Validate(m.p.Classes, m.p.Teachers); err != nil {
		return mechanism.Outcome{}, err
	}
	z, err := m.noise.Sample(src)
	if err != nil {
		return mechanism.Outcome{}, err
	}
	z.Add(z, big.NewInt(int64(h[h.Top()])))
	if new(big.Float).SetInt(z).Cmp(big.NewFloat(m.p.Threshold)) < 0 {
		return mechanism.Refusal(), nil
	}
	best, arg := new(big.Int), -1
	for i, n := range h {
		v, err := m.noise.Sample(src)
		if err != nil {
			return mechanism.Outcome{}, err
		}
		v.Add(v, big.NewInt(int64(n)))
		if arg < 0 || v.Cmp(best) > 0 {
			best, arg = v, i
		}
	}
	return mechanism.Answer(arg), nil
}
