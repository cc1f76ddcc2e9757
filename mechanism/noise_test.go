package mechanism

import (
	"crypto/rand"
	"errors"
	"math"
	"math/big"
	"testing"
)

// lapPMF returns P[X = x] for the discrete Laplace of scale b.
func lapPMF(b float64) func(x int) float64 {
	r := math.Exp(-1 / b)
	norm := (1 - r) / (1 + r)
	return func(x int) float64 { return norm * math.Exp(-math.Abs(float64(x))/b) }
}

// gaussPMF returns P[X = x] for the discrete Gaussian N_Z(0, σ²).
func gaussPMF(sigma float64) func(x int) float64 {
	var z float64
	r := int(40*sigma) + 2
	for x := -r; x <= r; x++ {
		z += math.Exp(-float64(x*x) / (2 * sigma * sigma))
	}
	return func(x int) float64 { return math.Exp(-float64(x*x)/(2*sigma*sigma)) / z }
}

type sampleFunc func(src Source) (*big.Int, error)

// checkDistribution draws n samples and checks the PMF (χ² over [−r, r]
// with both tails pooled), the mean and the variance. Mean and variance use
// a two-sided z-test at z = 5.5 (probability 3.8e-8 under the normal
// approximation, which the exponentially light tails make accurate at these
// sample sizes); with the χ² test the false-failure probability is below
// 1e-6 in all.
func checkDistribution(t *testing.T, what string, draw sampleFunc, pmf func(int) float64, r, n int, seed uint64) {
	t.Helper()
	src := seeded(seed)
	obs := make([]int, 2*r+3) // [tail<−r] [−r..r] [tail>r]
	probs := make([]float64, len(obs))
	var mean, m2, m4 float64
	inner := 0.0
	for x := -r; x <= r; x++ {
		p := pmf(x)
		probs[x+r+1] = p
		inner += p
		mean += float64(x) * p
		m2 += float64(x*x) * p
		m4 += float64(x*x) * float64(x*x) * p
	}
	for x := r + 1; x <= 100*r+1000; x++ {
		p := pmf(x)
		m2 += 2 * float64(x*x) * p
		m4 += 2 * float64(x*x) * float64(x*x) * p
	}
	probs[0] = (1 - inner) / 2
	probs[len(probs)-1] = (1 - inner) / 2
	var sum, sumSq float64
	for range n {
		v, err := draw(src)
		if err != nil {
			t.Fatal(err)
		}
		if !v.IsInt64() {
			t.Fatalf("%s: sample %v out of range", what, v)
		}
		x := int(v.Int64())
		switch {
		case x < -r:
			obs[0]++
		case x > r:
			obs[len(obs)-1]++
		default:
			obs[x+r+1]++
		}
		sum += float64(x)
		sumSq += float64(x) * float64(x)
	}
	chiSquare(t, what, obs, probs)
	fn := float64(n)
	gotMean := sum / fn
	if se := math.Sqrt(m2 / fn); math.Abs(gotMean) > 5.5*se {
		t.Errorf("%s: mean %v, want 0 ± %v", what, gotMean, 5.5*se)
	}
	gotVar := sumSq/fn - gotMean*gotMean
	if se := math.Sqrt((m4 - m2*m2) / fn); math.Abs(gotVar-m2) > 5.5*se+1e-12 {
		t.Errorf("%s: variance %v, want %v ± %v", what, gotVar, m2, 5.5*se)
	}
}

func TestDiscreteLaplaceDistribution(t *testing.T) {
	for i, b := range []float64{0.3, 1, 2.5, 10} {
		d, err := NewDiscreteLaplace(b)
		if err != nil {
			t.Fatal(err)
		}
		r := int(4*b) + 3
		checkDistribution(t, "Lap_Z("+fstr(b)+")", d.Sample, lapPMF(b), r, 50000, uint64(100+i))
	}
}

func TestDiscreteGaussianDistribution(t *testing.T) {
	for i, s := range []float64{0.4, 1, 1.5, 6.25} {
		d, err := NewDiscreteGaussian(s)
		if err != nil {
			t.Fatal(err)
		}
		r := int(3*s) + 2
		checkDistribution(t, "N_Z(0,"+fstr(s)+"²)", d.Sample, gaussPMF(s), r, 50000, uint64(200+i))
	}
}

// At the paper's scale 1e-10, P[X ≠ 0] = 2e^{−1e10}/(1+e^{−1e10}): zero in
// any number of draws; likewise for σ = 1e-10. This also checks that the
// samplers terminate quickly on such parameters.
func TestTinyNoiseIsZero(t *testing.T) {
	l, _ := NewDiscreteLaplace(1e-10)
	g, _ := NewDiscreteGaussian(1e-10)
	src := seeded(7)
	for range 2000 {
		for _, d := range []sampleFunc{l.Sample, g.Sample} {
			v, err := d(src)
			if err != nil {
				t.Fatal(err)
			}
			if v.Sign() != 0 {
				t.Fatalf("noise of scale 1e-10 gave %v", v)
			}
		}
	}
}

// Huge scales are sampled exactly too (the arithmetic is in math/big).
func TestHugeScale(t *testing.T) {
	l, _ := NewDiscreteLaplace(1e30)
	g, _ := NewDiscreteGaussian(1e30)
	src := seeded(8)
	big30 := new(big.Int).Exp(big.NewInt(10), big.NewInt(25), nil)
	for _, d := range []sampleFunc{l.Sample, g.Sample} {
		n := 0
		for range 50 {
			v, err := d(src)
			if err != nil {
				t.Fatal(err)
			}
			if new(big.Int).Abs(v).Cmp(big30) > 0 {
				n++
			}
		}
		// P[|X| ≤ 1e25] < 1e-4 per draw, so at least 40 of 50 large draws
		// fail with probability below C(50,11)·1e-44 < 1e-33.
		if n < 40 {
			t.Fatalf("only %d of 50 draws exceed 1e25 at scale 1e30", n)
		}
	}
}

func TestBernoulliExp(t *testing.T) {
	for i, g := range []struct{ num, den int64 }{{0, 1}, {1, 2}, {1, 1}, {37, 10}, {5, 3}} {
		s := newSampler(seeded(uint64(300 + i)))
		p := math.Exp(-float64(g.num) / float64(g.den))
		obs := make([]int, 2)
		for range 40000 {
			ok, err := s.bernoulliExp(big.NewInt(g.num), big.NewInt(g.den))
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				obs[1]++
			} else {
				obs[0]++
			}
		}
		chiSquare(t, "Bernoulli(exp(−"+fstr(float64(g.num)/float64(g.den))+"))", obs, []float64{1 - p, p})
	}
}

func TestNoiseRejectsBadScale(t *testing.T) {
	for _, b := range []float64{0, -1, math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, err := NewDiscreteLaplace(b); !errors.Is(err, ErrBadNoise) {
			t.Errorf("NewDiscreteLaplace(%v) = %v, want ErrBadNoise", b, err)
		}
		if _, err := NewDiscreteGaussian(b); !errors.Is(err, ErrBadNoise) {
			t.Errorf("NewDiscreteGaussian(%v) = %v, want ErrBadNoise", b, err)
		}
	}
}

type failingSource struct{}

func (failingSource) Read([]byte) (int, error) { return 0, errors.New("no entropy") }

func TestSourceFailureIsReported(t *testing.T) {
	l, _ := NewDiscreteLaplace(1)
	if _, err := l.Sample(failingSource{}); !errors.Is(err, ErrSource) {
		t.Fatalf("error = %v, want ErrSource", err)
	}
}

// crypto/rand.Reader is a Source.
func TestCryptoSource(t *testing.T) {
	g, _ := NewDiscreteGaussian(3)
	if _, err := g.Sample(rand.Reader); err != nil {
		t.Fatal(err)
	}
}
