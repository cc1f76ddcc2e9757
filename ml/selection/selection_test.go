package selection

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/data/synth"
)

func pool() *data.Dataset {
	return synth.Blobs{Classes: 4, Dim: 6, Spread: 1, CentreSeed: [2]uint64{1, 2}}.Make(3, 800)
}

func TestOrderIsAPermutation(t *testing.T) {
	p := pool()
	for _, s := range Strategies() {
		t.Run(string(s), func(t *testing.T) {
			cfg := Config{Strategy: s, Seed: 4}
			a, err := Order(context.Background(), cfg, p)
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Sorted(slices.Values(a)); !slices.Equal(got, identity(p.Len())) {
				t.Fatal("not a permutation of the pool")
			}
			b, _ := Order(context.Background(), cfg, p)
			if !slices.Equal(a, b) {
				t.Fatal("two orders with one seed differ")
			}
			// The pool's labels are never read.
			q := *p
			q.Y = make([]int, len(p.Y))
			c, _ := Order(context.Background(), cfg, &q)
			if !slices.Equal(a, c) {
				t.Fatal("the order depends on the labels")
			}
		})
	}
	if s, _ := Order(context.Background(), Config{Strategy: Sequential}, p); !slices.Equal(s, identity(p.Len())) {
		t.Fatal("sequential is not the pool's order")
	}
}

func identity(n int) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = i
	}
	return o
}

// Typical asks first about examples clearly in one class, between no two
// (which it does not know: it finds them by clustering), from every class.
func TestTypicalAsksClearExamplesFirst(t *testing.T) {
	p := pool()
	dim := p.Dim()
	centre := make([][]float64, p.Classes)
	count := make([]int, p.Classes)
	for k := range centre {
		centre[k] = make([]float64, dim)
	}
	for i, y := range p.Y {
		count[y]++
		for j, v := range p.Row(i) {
			centre[y][j] += float64(v)
		}
	}
	for k := range centre {
		for j := range centre[k] {
			centre[k][j] /= float64(count[k])
		}
	}
	dist := func(i, k int) float64 {
		s := 0.0
		for j, v := range p.Row(i) {
			d := float64(v) - centre[k][j]
			s += d * d
		}
		return math.Sqrt(s)
	}
	// ambiguity: distance to the own class's centre over the distance to
	// the nearest other class's centre.
	ambiguity := func(i int) float64 {
		other := math.Inf(1)
		for k := range centre {
			if k != p.Y[i] {
				other = min(other, dist(i, k))
			}
		}
		return dist(i, p.Y[i]) / other
	}
	mean := func(idx []int) float64 {
		s := 0.0
		for _, i := range idx {
			s += ambiguity(i)
		}
		return s / float64(len(idx))
	}
	for _, s := range []Strategy{Typical, Random} {
		o, err := Order(context.Background(), Config{Strategy: s, Clusters: 4, Seed: 1}, p)
		if err != nil {
			t.Fatal(err)
		}
		first, last := mean(o[:160]), mean(o[640:])
		t.Logf("%s: mean ambiguity, first fifth %.3f, last fifth %.3f", s, first, last)
		if s == Typical && first > 0.6*last {
			t.Fatalf("typical: first fifth %.3f, last fifth %.3f: want the first at most 0.6 of the last", first, last)
		}
		if s == Random && (first < 0.8*last || first > 1.25*last) {
			t.Fatalf("random: first fifth %.3f, last fifth %.3f: want about equal", first, last)
		}
		if s == Typical {
			seen := map[int]int{}
			for _, i := range o[:80] {
				seen[p.Y[i]]++
			}
			for k := range p.Classes {
				if seen[k] < 5 {
					t.Fatalf("typical: class %d has %d of the first 80 queries, want ≥ 5 (%v)", k, seen[k], seen)
				}
			}
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"typical", Config{Strategy: Typical}, true},
		{"unknown", Config{Strategy: "best"}, false},
		{"empty", Config{}, false},
		{"negative clusters", Config{Strategy: Typical, Clusters: -1}, false},
		{"too many iterations", Config{Strategy: Typical, Iterations: 1001}, false},
		{"balanced", Config{Strategy: Balanced, Components: 3}, true},
		{"negative components", Config{Strategy: Balanced, Components: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrConfig)) {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
			if _, err := Order(context.Background(), tt.cfg, pool()); (err == nil) != tt.ok {
				t.Fatalf("Order: %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

// Balanced gives every cluster its share of the first queries even when
// one class is far more compact than the others, which Typical's global
// clarity order puts first.
func TestBalancedSharesTheFirstQueries(t *testing.T) {
	p := pool()
	// Shrink class 0 towards its mean: its examples become the clearest.
	dim := p.Dim()
	mean := make([]float64, dim)
	n0 := 0
	for i, y := range p.Y {
		if y == 0 {
			n0++
			for j, v := range p.Row(i) {
				mean[j] += float64(v)
			}
		}
	}
	for i, y := range p.Y {
		if y != 0 {
			continue
		}
		r := p.Row(i)
		for j := range r {
			m := mean[j] / float64(n0)
			r[j] = float32(m + 0.2*(float64(r[j])-m))
		}
	}
	share := func(o []int) map[int]int {
		s := map[int]int{}
		for _, i := range o[:80] {
			s[p.Y[i]]++
		}
		return s
	}
	typ, err := Order(context.Background(), Config{Strategy: Typical, Clusters: 8, Seed: 1}, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []int{0, 3} { // all features; a projection on 3 components
		bal, err := Order(context.Background(), Config{Strategy: Balanced, Clusters: 8, Components: c, Seed: 1}, p)
		if err != nil {
			t.Fatal(err)
		}
		ts, bs := share(typ), share(bal)
		t.Logf("components %d: first 80 by class, typical %v, balanced %v", c, ts, bs)
		if ts[0] < 40 {
			t.Fatalf("typical put %d of class 0 among the first 80: the test's data do not separate the strategies", ts[0])
		}
		for k := range p.Classes {
			if bs[k] < 12 || bs[k] > 30 {
				t.Fatalf("balanced: class %d has %d of the first 80 queries, want 12..30 (%v)", k, bs[k], bs)
			}
		}
	}
}
