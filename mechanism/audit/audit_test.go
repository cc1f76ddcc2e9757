package audit

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nzcfed/nzc/mechanism"
)

func seeded(seed uint64) *rand.ChaCha8 {
	var s [32]byte
	s[0] = byte(seed)
	return rand.NewChaCha8(s)
}

func TestClopperPearson(t *testing.T) {
	// Values of the exact one-sided bounds (scipy.stats.beta.ppf).
	for _, c := range []struct {
		k, n         int
		alpha        float64
		lower, upper float64
	}{
		{5, 100, 0.025, 0.0164319, 0.1128349},
		{0, 1000, 0.05, 0, 0.0029912},
		{50, 50, 0.05, 0.9418449, 1},
		{1, 10, 0.01, 0.0010045, 0.5043527},
	} {
		lo, hi := ClopperPearsonLower(c.k, c.n, c.alpha), ClopperPearsonUpper(c.k, c.n, c.alpha)
		if math.Abs(lo-c.lower) > 2e-6 || math.Abs(hi-c.upper) > 2e-6 {
			t.Errorf("CP(%d/%d, α=%v) = [%v, %v], want [%v, %v]", c.k, c.n, c.alpha, lo, hi, c.lower, c.upper)
		}
	}
}

// A small audit of every default case: the accounted ε is never below the
// lower bound, and the paper's nzc claim (ε≈0) is refuted. The bounds hold
// with probability ≥ 0.95 each, and the seed is fixed.
func TestSmallAudit(t *testing.T) {
	cfg := Config{Trials: 3000, Confidence: 0.95, Delta: 1e-5}
	src := seeded(1)
	for _, c := range DefaultCases(20) {
		r, err := Run(context.Background(), src, c, nil, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK {
			t.Errorf("%s %+v: accounted ε %v below the empirical lower bound %v (%s)", c.Params.Mechanism, c.Params, r.EpsilonAccounted, r.EpsilonLowerBound, r.Witness)
		}
		if c.PaperClaim != nil && !(r.EpsilonLowerBound > 5) {
			t.Errorf("paper settings %+v: lower bound %v does not refute ε≈0", c.Params, r.EpsilonLowerBound)
		}
	}
}

// The audit has power: an lnmax with scale 0.25 (true ε = 8) run on gap
// pairs shows ε well above 1, so an accounting that charged 1 would fail.
func TestAuditDetectsUndercharging(t *testing.T) {
	c := Case{Params: mechanism.Params{Mechanism: mechanism.LNMax, Teachers: 20, Scale: 0.25}}
	r, err := Run(context.Background(), seeded(2), c, WorstCasePairs(20), Config{Trials: 3000, Confidence: 0.95, Delta: 0}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !(r.EpsilonLowerBound > 2) || !r.OK {
		t.Fatalf("lower bound %v, accounted %v", r.EpsilonLowerBound, r.EpsilonAccounted)
	}
}

func TestBadConfig(t *testing.T) {
	c := DefaultCases(20)[3]
	for _, cfg := range []Config{{Trials: 0, Confidence: 0.9}, {Trials: 1, Confidence: 1}, {Trials: 1, Confidence: 0.9, Delta: -1}} {
		if _, err := Run(context.Background(), seeded(1), c, WorstCasePairs(20), cfg, nil); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}
