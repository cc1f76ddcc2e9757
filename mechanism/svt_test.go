package mechanism

import (
	"errors"
	"math"
	"slices"
	"testing"
)

// sumTailBrute returns P[ρ + ν ≥ t] for discrete Laplace ρ (scale br) and
// ν (scale bn) by summing the joint mass over a window wide enough that
// what it leaves out is below 1e-30 of the result.
func sumTailBrute(br, bn float64, t int) float64 {
	pr, pn := lapPMF(br), lapPMF(bn)
	r := int(80*max(br, bn)) + t + 10
	var s float64
	for x := -r; x <= r; x++ {
		for y := t - x; y <= r; y++ {
			s += pr(x) * pn(y)
		}
	}
	return s
}

// lapSumTail is an upper bound on P[ρ + ν ≥ t] within a relative 1e-8,
// for equal and unequal scales, small and large thresholds.
func TestLapSumTail(t *testing.T) {
	for _, c := range []struct {
		br, bn float64
		t      int
	}{
		{2, 12, 1},
		{3, 3, 1},
		{3, 3, 41},
		{2.857, 3.077, 41},
		{5.714, 6.154, 82},
		{0.3, 0.7, 5},
		{1, 40, 20},
		{40, 1, 20},
		{10, 10.000001, 60},
	} {
		want := sumTailBrute(c.br, c.bn, c.t)
		got := lapSumTail(c.br, c.bn, float64(c.t))
		if !(got >= want) || !relClose(got, want, 1e-8) {
			t.Errorf("P[ρ+ν ≥ %d], scales %v and %v: %v, want %v (an upper bound within 1e-8)", c.t, c.br, c.bn, got, want)
		}
	}
}

// At thresholds far beyond any ensemble's the bound stays a probability
// and falls as the threshold rises.
func TestLapSumTailHuge(t *testing.T) {
	for _, tt := range []float64{1<<20 + 2, 1e9} {
		got := lapSumTail(1e6, 2e6, tt)
		if !(got > 0 && got <= 1) {
			t.Fatalf("t %v: %v, want a probability", tt, got)
		}
		// Moving the threshold up never raises the bound.
		if lower := lapSumTail(1e6, 2e6, tt/2); lower < got {
			t.Fatalf("t %v: %v above the bound at t/2 (%v)", tt, got, lower)
		}
	}
}

// The session's δ is the smaller of its two bounds, and δ_sum lets the
// threshold sit far lower: at the preset's noise, T = 40 meets 5e-6 where
// the split bound needs T = 71.
func TestSessionDeltaBounds(t *testing.T) {
	g := DefaultGrid()
	p := Params{Mechanism: NZCSVT, Teachers: 250, Scale: 1 / (0.35 * 1) * (1 + 1e-9), MaxRefusals: 1}
	p.DistanceScale = 2 / 0.65 * (1 + 1e-9)
	for _, c := range []struct {
		threshold float64
		below     bool // δ ≤ 5e-6
	}{{39, false}, {40, true}, {71, true}} {
		p.Threshold = c.threshold
		ch, err := p.Charge(g, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		sum := lapSumTail(p.Scale, p.DistanceScale, c.threshold+1)
		if ch.Delta > sum*(1+1e-12) {
			t.Errorf("T %v: δ %v above δ_sum %v", c.threshold, ch.Delta, sum)
		}
		if (ch.Delta <= 5e-6) != c.below {
			t.Errorf("T %v: δ %v, want ≤ 5e-6: %v", c.threshold, ch.Delta, c.below)
		}
	}
	// With many refusals and a small b_ν, K·δ_sum can exceed the split
	// bound, which grows with K only through the ν term: the smaller one
	// is charged.
	q := Params{Mechanism: NZCSVT, Teachers: 250, Scale: 2, DistanceScale: 0.5, MaxRefusals: 1000, Threshold: 20}
	ch, err := q.Charge(g, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	tail := func(b, j float64) float64 { return math.Exp(-j/b) / (1 + math.Exp(-1/b)) }
	split := math.Inf(1)
	for m := 1.0; m <= 21; m++ {
		pm := tail(0.5, 22-m)
		split = min(split, tail(2, m)+1000*pm/(1-pm))
	}
	if sum := 1000 * sumTailBrute(2, 0.5, 21); !(split < sum) || !relClose(ch.Delta, split, 1e-9) {
		t.Errorf("K = 1000, b_ν = 0.5: δ %v, want the split bound %v (K·δ_sum = %v)", ch.Delta, split, sum)
	}
}

// The privacy argument for abstaining teachers (svtSession, "Absent
// hospitals"), checked exhaustively on small ensembles: on every histogram
// of at most n votes — some teachers abstaining — one teacher changing its
// vote, starting or stopping to vote moves the distance to instability by
// at most 1 (sensitivity Δ = 1, whoever votes), and a distance of at least
// 1 keeps the argmax.
func TestDistanceSensitivityWithAbstentions(t *testing.T) {
	for classes := 2; classes <= 4; classes++ {
		for n := 1; n <= 8; n++ {
			var each func(h Histogram, i, left int)
			each = func(h Histogram, i, left int) {
				if i == len(h) {
					checkNeighbours(t, h, n)
					return
				}
				for v := 0; v <= left; v++ {
					h[i] = v
					each(h, i+1, left-v)
				}
			}
			each(make(Histogram, classes), 0, n)
		}
	}
}

// checkNeighbours checks h's neighbours within an ensemble of n teachers.
func checkNeighbours(t *testing.T, h Histogram, n int) {
	t.Helper()
	d, top := h.Distance(n), h.Top()
	total := 0
	for _, c := range h {
		total += c
	}
	var neighbours []Histogram
	for a := range h {
		if h[a] > 0 {
			stop := slices.Clone(h) // a teacher stops voting
			stop[a]--
			neighbours = append(neighbours, stop)
			for b := range h {
				if b != a {
					move := slices.Clone(stop) // a teacher changes its vote
					move[b]++
					neighbours = append(neighbours, move)
				}
			}
		}
		if total < n {
			start := slices.Clone(h) // an abstaining teacher votes
			start[a]++
			neighbours = append(neighbours, start)
		}
	}
	for _, m := range neighbours {
		dm := m.Distance(n)
		if dm > d+1 || dm < d-1 {
			t.Errorf("n = %d: Distance(%v) = %d, Distance(%v) = %d: more than 1 apart", n, h, d, m, dm)
		}
		if d >= 1 && m.Top() != top {
			t.Errorf("n = %d: Distance(%v) = %d but its neighbour %v has argmax %d, not %d", n, h, d, m, m.Top(), top)
		}
	}
}

// A session over n teachers answers histograms with fewer votes (the
// teachers of absent hospitals abstain) with their exact argmax when they
// are stable, and refuses one with more votes than its ensemble, changing
// nothing.
func TestSessionCountsAbsentTeachersAsAbstaining(t *testing.T) {
	p := Params{Mechanism: NZCSVT, Teachers: 600, Classes: 3, Scale: 1, Threshold: 100, MaxRefusals: 1}
	s, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	src := seeded(5)
	// 400 of 600 teachers vote, unanimously: distance 200, twice the
	// threshold; a refusal needs ν − ρ ≤ −100, seeded noise.
	for _, h := range []Histogram{{0, 400, 0}, {0, 0, 200}, {600, 0, 0}} {
		o, err := s.Answer(src, h)
		if err != nil || o.Refused || o.Label != h.Top() {
			t.Fatalf("%v: %+v, %v; want the exact argmax %d", h, o, err, h.Top())
		}
	}
	if _, err := s.Answer(src, Histogram{601, 0, 0}); !errors.Is(err, ErrTooManyVotes) || s.Refusals() != 0 {
		t.Fatalf("601 votes in a session of 600 teachers: %v (refusals %d), want ErrTooManyVotes and nothing changed", err, s.Refusals())
	}
}
