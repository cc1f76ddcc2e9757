package mechanism

import (
	"errors"
	"math"
	"testing"
)

// exactProbs returns P[label = i] for argmax_i(h_i + bonus·[i = at] + Z_i),
// ties to the lowest index, Z_i iid with the given PMF (truncated at ±r,
// where the omitted mass is below 1e-12).
func exactProbs(h Histogram, at, bonus int, pmf func(int) float64, r int) []float64 {
	cdf := func(x int) float64 { // P[Z ≤ x]
		s := 0.0
		for z := -r; z <= min(x, r); z++ {
			s += pmf(z)
		}
		return s
	}
	val := func(i int) int {
		if i == at {
			return h[i] + bonus
		}
		return h[i]
	}
	out := make([]float64, len(h))
	for i := range h {
		for z := -r; z <= r; z++ {
			v := val(i) + z
			p := pmf(z)
			for j := range h {
				if j == i {
					continue
				}
				if j < i { // j must be strictly below
					p *= cdf(v - val(j) - 1)
				} else {
					p *= cdf(v - val(j))
				}
			}
			out[i] += p
		}
	}
	return out
}

func frequencies(t *testing.T, m Mechanism, h Histogram, n int, seed uint64) (labels []int, refused int) {
	t.Helper()
	src := seeded(seed)
	labels = make([]int, len(h))
	for range n {
		o, err := m.Answer(src, h)
		if err != nil {
			t.Fatal(err)
		}
		if o.Refused {
			refused++
			continue
		}
		labels[o.Label]++
	}
	return labels, refused
}

func mustNew(t *testing.T, p Params) Mechanism {
	t.Helper()
	m, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Sampled label frequencies match the exact output probabilities (χ², false
// failure ≤ 1e-6 per case).
func TestLabelFrequenciesMatchExactProbabilities(t *testing.T) {
	for i, c := range []struct {
		name  string
		p     Params
		h     Histogram
		pmf   func(int) float64
		r     int
		at    int
		bonus int
	}{
		{"lnmax", Params{Mechanism: LNMax, Teachers: 10, Scale: 1.5}, Histogram{4, 3, 3}, lapPMF(1.5), 60, -1, 0},
		{"gnmax", Params{Mechanism: GNMax, Teachers: 10, Sigma: 2}, Histogram{3, 5, 2}, gaussPMF(2), 30, -1, 0},
		{"gnmax ties", Params{Mechanism: GNMax, Teachers: 10, Sigma: 0.7}, Histogram{4, 4, 2}, gaussPMF(0.7), 15, -1, 0},
		{"nzc laplace c=2", Params{Mechanism: NZC, Teachers: 10, Noise: NoiseLaplace, Scale: 2, Constant: 2}, Histogram{3, 5, 2}, lapPMF(2), 70, 1, 2},
		{"nzc gaussian c=1", Params{Mechanism: NZC, Teachers: 10, Noise: NoiseGaussian, Sigma: 1.5, Constant: 1}, Histogram{5, 5, 0}, gaussPMF(1.5), 25, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := mustNew(t, c.p)
			want := exactProbs(c.h, c.at, c.bonus, c.pmf, c.r)
			got, ref := frequencies(t, m, c.h, 20000, uint64(400+i))
			if ref != 0 {
				t.Fatalf("%d refusals from a mechanism that never refuses", ref)
			}
			chiSquare(t, c.name, got, want)
		})
	}
}

func TestConfidentGNMaxFrequencies(t *testing.T) {
	p := Params{Mechanism: ConfidentGNMax, Teachers: 10, Threshold: 6.5, Sigma1: 2, Sigma2: 1.5}
	h := Histogram{5, 3, 2}
	// P[answer] = P[5 + Z1 ≥ 6.5] = P[Z1 ≥ 2].
	pmf1 := gaussPMF(2)
	pAns := 0.0
	for z := 2; z <= 40; z++ {
		pAns += pmf1(z)
	}
	lab := exactProbs(h, -1, 0, gaussPMF(1.5), 25)
	want := []float64{lab[0] * pAns, lab[1] * pAns, lab[2] * pAns, 1 - pAns}
	got, ref := frequencies(t, mustNew(t, p), h, 20000, 500)
	chiSquare(t, "confident-gnmax", append(got, ref), want)
}

// The paper's settings: c = 1e100 with scale (or σ) 1e-10. The output is
// the exact argmax, every time.
func TestNZCPaperSettingsReleaseExactArgmax(t *testing.T) {
	for _, p := range []Params{
		{Mechanism: NZC, Teachers: 250, Noise: NoiseLaplace, Scale: 1e-10, Constant: 1e100},
		{Mechanism: NZC, Teachers: 250, Noise: NoiseGaussian, Sigma: 1e-10, Constant: 1e100},
		{Mechanism: NZC, Teachers: 250, Noise: NoiseLaplace, Scale: 40, Constant: 1e100},
	} {
		m := mustNew(t, p)
		src := seeded(9)
		for _, h := range []Histogram{{120, 121, 9}, {121, 120, 9}, {0, 0, 0}, {1, 0, 1}} {
			for range 200 {
				o, err := m.Answer(src, h)
				if err != nil {
					t.Fatal(err)
				}
				if o.Refused || o.Label != h.Top() {
					t.Fatalf("%+v on %v released %v, want the exact argmax %d", p, h, o, h.Top())
				}
			}
		}
	}
}

func TestHistogramValidation(t *testing.T) {
	for _, c := range []struct {
		h    Histogram
		want error
	}{
		{Histogram{}, ErrEmptyHistogram},
		{Histogram{1, 2}, ErrClassCount},
		{Histogram{1, -1, 2}, ErrNegativeVotes},
		{Histogram{5, 5, 1}, ErrTooManyVotes},
	} {
		err := c.h.Validate(3, 10)
		var he *HistogramError
		if !errors.Is(err, c.want) || !errors.As(err, &he) {
			t.Errorf("Validate(%v) = %v, want %v", c.h, err, c.want)
		}
		m := mustNew(t, Params{Mechanism: GNMax, Teachers: 10, Classes: 3, Sigma: 1})
		if _, err := m.Answer(seeded(1), c.h); !errors.Is(err, c.want) {
			t.Errorf("Answer(%v) = %v, want %v", c.h, err, c.want)
		}
	}
	if err := (Histogram{5, 5, 0}).Validate(3, 10); err != nil {
		t.Fatal(err)
	}
}

func TestParamValidation(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, p := range []Params{
		{Mechanism: "bogus", Teachers: 1},
		{Mechanism: GNMax, Teachers: 0, Sigma: 1},
		{Mechanism: GNMax, Teachers: 3, Sigma: 0},
		{Mechanism: GNMax, Teachers: 3, Sigma: nan},
		{Mechanism: GNMax, Teachers: 3, Sigma: inf},
		{Mechanism: GNMax, Teachers: 3, Sigma: 1, Scale: 2},
		{Mechanism: LNMax, Teachers: 3, Scale: -1},
		{Mechanism: NZC, Teachers: 3, Noise: NoiseLaplace, Scale: 1, Constant: 0.5},
		{Mechanism: NZC, Teachers: 3, Noise: NoiseLaplace, Scale: 1, Constant: -1},
		{Mechanism: NZC, Teachers: 3, Noise: NoiseLaplace, Scale: 1, Constant: inf},
		{Mechanism: NZC, Teachers: 3, Noise: "uniform", Scale: 1},
		{Mechanism: NZC, Teachers: 3, Noise: NoiseGaussian, Scale: 1},
		{Mechanism: ConfidentGNMax, Teachers: 3, Sigma1: 1, Sigma2: 0, Threshold: 1},
		{Mechanism: ConfidentGNMax, Teachers: 3, Sigma1: 1, Sigma2: 1, Threshold: nan},
		{Mechanism: NZCSVT, Teachers: 3, Scale: 1, Threshold: 1, MaxRefusals: 0},
		{Mechanism: NZCSVT, Teachers: 3, Scale: 1, Threshold: -1, MaxRefusals: 1},
		{Mechanism: NZCSVT, Teachers: 3, Scale: 1, Threshold: 1, MaxRefusals: 1, DistanceScale: -2},
		{Mechanism: LNMax, Teachers: 3, Scale: 1, MaxRefusals: 2},
	} {
		_, err := New(p)
		var pe *ParamError
		if !errors.Is(err, ErrBadParams) || !errors.As(err, &pe) {
			t.Errorf("New(%+v) = %v, want a *ParamError", p, err)
		}
	}
}

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		h    Histogram
		want int
	}{
		// Distance is one less than the number of votes that must move to
		// change the argmax; ties go to the lower index.
		{Histogram{5, 5}, 0},     // one move: {4, 6}
		{Histogram{5, 4}, 0},     // one move: {4, 5}
		{Histogram{6, 4}, 1},     // {5, 5} keeps class 0; two moves: {4, 6}
		{Histogram{4, 6}, 0},     // one move: {5, 5}, and class 0 wins the tie
		{Histogram{3, 6}, 1},     // two moves: {5, 4}
		{Histogram{10, 0, 0}, 5}, // six moves: {4, 6, 0}
		{Histogram{7}, 7},
	} {
		if got := c.h.Distance(c.h[0] + sum(c.h[1:])); got != c.want {
			t.Errorf("Distance(%v) = %d, want %d", c.h, got, c.want)
		}
	}
}

func sum(h Histogram) int {
	s := 0
	for _, n := range h {
		s += n
	}
	return s
}

// Distance is the brute-force distance: the largest d such that all
// histograms within d single-vote moves have the same argmax.
func TestDistanceMatchesBruteForce(t *testing.T) {
	const teachers = 6
	var rec func(h Histogram, i, left int)
	check := func(h Histogram) {
		top := h.Top()
		// BFS over moves (a vote moves between classes, or appears/disappears).
		type key string
		enc := func(x Histogram) key {
			b := make([]byte, len(x))
			for i, v := range x {
				b[i] = byte(v)
			}
			return key(b)
		}
		seen := map[key]bool{enc(h): true}
		frontier := []Histogram{h}
		d := 0
		for len(frontier) > 0 && d <= teachers {
			var next []Histogram
			unstable := false
			for _, x := range frontier {
				var cands []Histogram
				for a := range x {
					for b := range x {
						if a != b && x[a] > 0 {
							y := append(Histogram(nil), x...)
							y[a]--
							y[b]++
							cands = append(cands, y)
						}
					}
					if x[a] > 0 {
						y := append(Histogram(nil), x...)
						y[a]--
						cands = append(cands, y)
					}
					if sum(x) < teachers {
						y := append(Histogram(nil), x...)
						y[a]++
						cands = append(cands, y)
					}
				}
				for _, y := range cands {
					if y.Top() != top {
						unstable = true
					}
					if !seen[enc(y)] {
						seen[enc(y)] = true
						next = append(next, y)
					}
				}
			}
			if unstable {
				break
			}
			d++
			frontier = next
		}
		if got := h.Distance(teachers); got != d && !(len(frontier) == 0 && got >= d) {
			t.Errorf("Distance(%v) = %d, brute force %d", h, got, d)
		}
	}
	rec = func(h Histogram, i, left int) {
		if i == len(h) {
			check(h)
			return
		}
		for v := 0; v <= left; v++ {
			h[i] = v
			rec(h, i+1, left-v)
		}
	}
	rec(make(Histogram, 3), 0, teachers)
}

func TestSessionExhausts(t *testing.T) {
	p := Params{Mechanism: NZCSVT, Teachers: 10, Scale: 0.5, Threshold: 1000, MaxRefusals: 3}
	s, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	src := seeded(11)
	// The distance is at most 10 and the threshold 1000: refusing is certain
	// unless the noise exceeds ~990 at scale ≤ 3, probability < e^{-300}.
	for i := range 3 {
		o, err := s.Answer(src, Histogram{10, 0})
		if err != nil || !o.Refused {
			t.Fatalf("query %d: %v, %v; want a refusal", i, o, err)
		}
	}
	if _, err := s.Answer(src, Histogram{10, 0}); !errors.Is(err, ErrSessionExhausted) {
		t.Fatalf("after K refusals: %v, want ErrSessionExhausted", err)
	}
	if !s.Exhausted() || s.Refusals() != 3 {
		t.Fatal("session does not report exhaustion")
	}
}

// The refusal probability of one query matches the exact
// P[d + ν ≤ T' + ρ] (χ², false failure ≤ 1e-6).
func TestSessionRefusalProbability(t *testing.T) {
	p := Params{Mechanism: NZCSVT, Teachers: 20, Scale: 1.5, Threshold: 3.7, MaxRefusals: 1, DistanceScale: 2}
	h := Histogram{12, 5, 3} // distance: gap 7 to a higher index → 4 moves, d = 3
	d := h.Distance(20)
	if d != 3 {
		t.Fatalf("distance %d, want 3", d)
	}
	pr, pn := lapPMF(1.5), lapPMF(2)
	pRefuse := 0.0
	for rho := -80; rho <= 80; rho++ {
		for nu := -80; nu <= 80; nu++ {
			if d+nu <= 3+rho {
				pRefuse += pr(rho) * pn(nu)
			}
		}
	}
	src := seeded(12)
	obs := make([]int, 2)
	for range 20000 {
		s, _ := Open(p) // a fresh session per trial: fresh ρ
		o, err := s.Answer(src, h)
		if err != nil {
			t.Fatal(err)
		}
		if o.Refused {
			obs[1]++
		} else {
			if o.Label != 0 {
				t.Fatalf("answered %d, want the exact argmax 0", o.Label)
			}
			obs[0]++
		}
	}
	chiSquare(t, "nzc-svt refusal", obs, []float64{1 - pRefuse, pRefuse})
}
