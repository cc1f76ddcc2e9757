package mechanism

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Helpers for the statistical tests. Every statistical test in this package
// uses a fixed seed and a rejection region whose probability under the
// null hypothesis is at most 1e-6, so a correct implementation fails it
// with probability at most 1e-6 (and, the seed being fixed, either always
// or never).

const falseFailure = 1e-6

func seeded(seed uint64) *rand.ChaCha8 {
	var s [32]byte
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	return rand.NewChaCha8(s)
}

// gammaQ returns the regularised upper incomplete gamma function Q(a, x).
func gammaQ(a, x float64) float64 {
	if x <= 0 {
		return 1
	}
	lg, _ := math.Lgamma(a)
	if x < a+1 { // series for P
		sum, del, ap := 1/a, 1/a, a
		for range 10000 {
			ap++
			del *= x / ap
			sum += del
			if math.Abs(del) < math.Abs(sum)*1e-16 {
				break
			}
		}
		return 1 - sum*math.Exp(-x+a*math.Log(x)-lg)
	}
	// Lentz's continued fraction for Q
	const tiny = 1e-300
	b := x + 1 - a
	c := 1 / tiny
	d := 1 / b
	h := d
	for i := 1; i < 10000; i++ {
		an := -float64(i) * (float64(i) - a)
		b += 2
		d = an*d + b
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = b + an/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < 1e-16 {
			break
		}
	}
	return math.Exp(-x+a*math.Log(x)-lg) * h
}

// chi2Critical returns x with P[χ²_dof ≥ x] = p.
func chi2Critical(dof int, p float64) float64 {
	lo, hi := 0.0, float64(dof)+100*math.Sqrt(float64(dof))+200
	for range 200 {
		mid := (lo + hi) / 2
		if gammaQ(float64(dof)/2, mid/2) > p {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

func TestChi2Critical(t *testing.T) {
	// Known quantiles: P[χ²_1 ≥ 10.8276] = 0.001, P[χ²_10 ≥ 29.5883] = 0.001.
	for _, c := range []struct {
		dof  int
		p, x float64
	}{{1, 1e-3, 10.8276}, {10, 1e-3, 29.5883}, {4, 0.05, 9.48773}} {
		if got := chi2Critical(c.dof, c.p); math.Abs(got-c.x) > 1e-3 {
			t.Errorf("chi2Critical(%d, %v) = %v, want %v", c.dof, c.p, got, c.x)
		}
	}
}

// chiSquare tests observed counts against probabilities (summing to 1):
// bins with expected count below 5 are pooled. It fails t when the
// statistic exceeds the 1−falseFailure quantile.
func chiSquare(t *testing.T, what string, observed []int, probs []float64) {
	t.Helper()
	n := 0
	for _, o := range observed {
		n += o
	}
	var stat float64
	bins := 0
	var poolO, poolE float64
	for i, o := range observed {
		e := probs[i] * float64(n)
		if e < 5 {
			poolO += float64(o)
			poolE += e
			continue
		}
		stat += (float64(o) - e) * (float64(o) - e) / e
		bins++
	}
	if poolE > 0 {
		if poolE < 1e-9 {
			if poolO > 0 {
				t.Fatalf("%s: %v outcomes where the expected count is %v", what, poolO, poolE)
			}
		} else {
			stat += (poolO - poolE) * (poolO - poolE) / poolE
			bins++
		}
	}
	if bins < 2 {
		// One bin: every outcome must be in it.
		return
	}
	if crit := chi2Critical(bins-1, falseFailure); stat > crit {
		t.Fatalf("%s: χ² = %.2f over %d bins exceeds the critical value %.2f (p = %g); observed %v", what, stat, bins, crit, falseFailure, observed)
	}
}
