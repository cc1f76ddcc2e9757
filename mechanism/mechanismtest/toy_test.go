package mechanismtest_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/mechanism/mechanismtest"
)

// A registered mechanism is one of the set: listed, validated, encoded for
// the ledger, priced and built through Params alone.
func TestRegisteredMechanism(t *testing.T) {
	mechanismtest.Register(t)
	if !slices.Contains(mechanism.Kinds(), mechanismtest.Toy) || mechanismtest.Toy.Sessions() {
		t.Fatalf("kinds %v: want the toy, answering per query", mechanism.Kinds())
	}
	if err := mechanism.Register(mechanismtest.ToyDef{}); !errors.Is(err, mechanism.ErrRegistered) {
		t.Errorf("registering the toy again: %v, want ErrRegistered", err)
	}
	if err := mechanism.Register(badKeys{}); !errors.Is(err, mechanism.ErrBadParams) || slices.Contains(mechanism.Kinds(), badKeys{}.Kind()) {
		t.Errorf("registering a mechanism that reads an unknown parameter: %v, want ErrBadParams and no registration", err)
	}
	p, err := mechanism.Preset(mechanismtest.Toy)
	if err != nil {
		t.Fatal(err)
	}
	p = p.ForEnsemble(125, 3)
	if p.Threshold != 75 || p.String() != "T=75, Laplace b=20" {
		t.Errorf("preset for 125 teachers: %+v (%s), want T = 75", p, p)
	}
	kvs := p.LedgerParams()
	var keys []string
	for _, kv := range kvs {
		keys = append(keys, kv.Key)
	}
	if !slices.Equal(keys, []string{"classes", "scale", "teachers", "threshold"}) {
		t.Errorf("ledger keys %v", keys)
	}
	back, err := mechanism.ParseLedgerParams(mechanismtest.Toy, kvs)
	if err != nil || back != p {
		t.Errorf("ledger round trip: %+v, %v; want %+v", back, err, p)
	}
	for name, bad := range map[string]mechanism.Params{
		"another mechanism's parameter": {Mechanism: mechanismtest.Toy, Teachers: 3, Scale: 1, Sigma: 2},
		"its own check":                 {Mechanism: mechanismtest.Toy, Teachers: 3, Scale: -1},
		"no teachers":                   {Mechanism: mechanismtest.Toy, Scale: 1},
	} {
		if err := bad.Validate(); !errors.Is(err, mechanism.ErrBadParams) {
			t.Errorf("%s: %v, want ErrBadParams", name, err)
		}
	}
	ch, err := p.Charge(mechanism.DefaultGrid(), 2, 1)
	if err != nil || ch.PureEpsilon < 7.0/20 || ch.PureEpsilon > 7.0/20+1e-12 || ch.Delta != 0 {
		t.Errorf("charge of 2 answers and 1 refusal: %+v, %v; want pure ε 7/20", ch, err)
	}
	p.Scale = 1
	m, err := mechanism.New(p)
	if err != nil {
		t.Fatal(err)
	}
	// 125 votes for class 1 against T = 75: refused only if noise of scale
	// 1 takes 51 votes off, wrong only if it overturns a lead of 125
	// (probability below 1e-20 per query; the source is seeded besides).
	res, err := mechanism.AnswerBatch(m, rand.NewChaCha8([32]byte{3}), []mechanism.Histogram{{0, 125, 0}, {0, 125, 0}, {0, 125, 0}})
	if err != nil || res.Processed != 3 || res.Stopped {
		t.Fatalf("batch: %+v, %v", res, err)
	}
	for _, o := range res.Outcomes {
		if o.Refused || o.Label != 1 {
			t.Errorf("outcome %v, want class 1", o)
		}
	}
	if _, err := mechanism.Open(p); err == nil || !strings.Contains(err.Error(), "not in sessions") {
		t.Errorf("opening a session of a per-query mechanism: %v", err)
	}
}

// badKeys reads a parameter Params does not have, which no ledger entry
// could record.
type badKeys struct{ mechanismtest.ToyDef }

func (badKeys) Kind() mechanism.Kind { return "toy-bad-keys" }

func (badKeys) Preset() mechanism.Params {
	return mechanism.Params{Mechanism: "toy-bad-keys", Scale: 1}
}

func (badKeys) Keys(mechanism.Params) []string { return []string{"scale", "zeta"} }
