package mechanism

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func TestNewGridRejectsBadOrders(t *testing.T) {
	for _, tc := range []struct {
		name   string
		orders []float64
	}{
		{"empty", nil},
		{"order one", []float64{1, 2}},
		{"below one", []float64{0.5}},
		{"unsorted", []float64{3, 2}},
		{"repeated", []float64{2, 2}},
		{"nan", []float64{2, math.NaN()}},
		{"inf", []float64{2, math.Inf(1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewGrid(tc.orders); !errors.Is(err, ErrBadOrders) {
				t.Fatalf("NewGrid(%v) error = %v, want ErrBadOrders", tc.orders, err)
			}
		})
	}
}

func TestDefaultGridIsValid(t *testing.T) {
	g := DefaultGrid()
	if _, err := NewGrid(g.Orders()); err != nil {
		t.Fatal(err)
	}
	if g.Len() != 153 {
		t.Fatalf("default grid has %d orders, documented 153", g.Len())
	}
}

// The conversions, checked against values computed by hand from their
// formulas for a single Gaussian mechanism on a one-order grid.
func TestConversions(t *testing.T) {
	g, _ := NewGrid([]float64{5})
	c := Gaussian(g, math.Sqrt2, 2) // RDP(5) = 5·2/(2·4) = 1.25
	if got := c.At(0); math.Abs(got-1.25) > 1e-15 {
		t.Fatalf("Gaussian RDP = %v, want 1.25", got)
	}
	delta := 1e-5
	tight, err := c.Epsilon(delta)
	if err != nil {
		t.Fatal(err)
	}
	wantTight := 1.25 + math.Log(4.0/5) - (math.Log(delta)+math.Log(5))/4
	if math.Abs(tight.Epsilon-wantTight) > 1e-12 || tight.Order != 5 {
		t.Fatalf("tight conversion = %+v, want ε=%v at α=5", tight, wantTight)
	}
	classic, _ := c.EpsilonClassic(delta)
	wantClassic := 1.25 + math.Log(1/delta)/4
	if math.Abs(classic.Epsilon-wantClassic) > 1e-12 {
		t.Fatalf("classic conversion = %v, want %v", classic.Epsilon, wantClassic)
	}
	if tight.Epsilon >= classic.Epsilon {
		t.Fatalf("tight ε %v not below classic ε %v", tight.Epsilon, classic.Epsilon)
	}
}

func TestConversionRejectsBadDelta(t *testing.T) {
	c := DefaultGrid().Zero()
	for _, d := range []float64{0, -1, 1, 2, math.NaN()} {
		if _, err := c.Epsilon(d); !errors.Is(err, ErrBadDelta) {
			t.Errorf("Epsilon(%v) error = %v, want ErrBadDelta", d, err)
		}
	}
}

func TestZeroCurveConvertsToZero(t *testing.T) {
	conv, err := DefaultGrid().Zero().Epsilon(1e-5)
	if err != nil {
		t.Fatal(err)
	}
	// With no privacy loss, ε is the conversion's own overhead, which is
	// small but not zero for δ = 1e-5 on a grid that stops at α = 1024.
	if conv.Epsilon < 0 || conv.Epsilon > 0.02 {
		t.Fatalf("zero curve converts to ε = %v", conv.Epsilon)
	}
}

func TestInfiniteCurveStaysInfinite(t *testing.T) {
	g := DefaultGrid()
	for name, c := range map[string]Curve{
		"pure inf":            PureDP(g, math.Inf(1)),
		"gaussian overflow":   Gaussian(g, 1e200, 1e-200),
		"composed with inf":   must(PureDP(g, 1).Compose(PureDP(g, math.Inf(1)))),
		"gaussian zero sigma": Gaussian(g, 1, 0),
	} {
		conv, err := c.Epsilon(1e-5)
		if err != nil {
			t.Fatal(err)
		}
		if !math.IsInf(conv.Epsilon, 1) {
			t.Errorf("%s: ε = %v, want +Inf", name, conv.Epsilon)
		}
	}
}

func TestPureDPCurve(t *testing.T) {
	g := DefaultGrid()
	for _, eps := range []float64{1e-6, 1e-3, 0.1, 1, 5, 40, 2e110} {
		c := PureDP(g, eps)
		for i := range g.Len() {
			a, v := g.Order(i), c.At(i)
			if v > eps*(1+1e-12) {
				t.Fatalf("ε=%v α=%v: RDP %v above ε", eps, a, v)
			}
			if zc := a * eps * eps / 2; v > zc*(1+1e-9)+1e-300 {
				t.Fatalf("ε=%v α=%v: RDP %v above αε²/2 = %v", eps, a, v, zc)
			}
			if i > 0 && v < c.At(i-1)*(1-1e-9) {
				t.Fatalf("ε=%v: RDP not monotone in α at %v", eps, a)
			}
		}
	}
	// Randomized response at α = 2: 1·log(p²/q + q²/p), checked directly.
	g2, _ := NewGrid([]float64{2})
	eps := 0.7
	p, q := math.Exp(eps)/(1+math.Exp(eps)), 1/(1+math.Exp(eps))
	want := math.Log(p*p/q + q*q/p)
	if got := PureDP(g2, eps).At(0); math.Abs(got-want) > 1e-13 {
		t.Fatalf("RR RDP at α=2 = %v, want %v", got, want)
	}
}

func TestComposeAndTimes(t *testing.T) {
	g := DefaultGrid()
	a := Gaussian(g, 1, 3)
	sum := a
	for range 9 {
		sum = must(sum.Compose(a))
	}
	ten := a.Times(10)
	for i := range g.Len() {
		if math.Abs(sum.At(i)-ten.At(i)) > 1e-12*ten.At(i) {
			t.Fatalf("10 compositions differ from Times(10) at α=%v", g.Order(i))
		}
	}
	other, _ := NewGrid([]float64{2, 3})
	if _, err := a.Compose(other.Zero()); !errors.Is(err, ErrGridMismatch) {
		t.Fatalf("compose across grids: %v", err)
	}
	if !a.Times(0).IsZero() {
		t.Fatal("zero-fold composition is not zero")
	}
}

func TestCurveOfValidates(t *testing.T) {
	g, _ := NewGrid([]float64{2, 3})
	if _, err := g.CurveOf([]float64{1}); !errors.Is(err, ErrGridMismatch) {
		t.Fatalf("short curve: %v", err)
	}
	if _, err := g.CurveOf([]float64{1, -1}); !errors.Is(err, ErrBadCurve) {
		t.Fatalf("negative value: %v", err)
	}
	if _, err := g.CurveOf([]float64{math.NaN(), 1}); !errors.Is(err, ErrBadCurve) {
		t.Fatalf("NaN value: %v", err)
	}
	c, err := g.CurveOf([]float64{0.5, math.Inf(1)})
	if err != nil || c.At(1) != math.Inf(1) {
		t.Fatalf("valid curve with +Inf: %v %v", c, err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestFilterEpsilonOrders checks FilterEpsilon against its formula taken
// over the orders it names: the filter orders of a grid that has some, and
// every order of one that has none.
func TestFilterEpsilonOrders(t *testing.T) {
	other, err := NewGrid([]float64{1.7, 5, 9.5})
	if err != nil {
		t.Fatal(err)
	}
	const delta = 1e-5
	for _, c := range []struct {
		name   string
		curve  Curve
		orders []float64
	}{
		{"the default grid", Gaussian(DefaultGrid(), 1, 3).Times(40), filterOrders[:]},
		{"a grid without filter orders", Gaussian(other, 1, 3).Times(40), []float64{1.7, 5, 9.5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := float64(len(c.orders))
			want := math.Inf(1)
			for i := range c.curve.grid.orders {
				a := c.curve.grid.orders[i]
				if !slices.Contains(c.orders, a) {
					continue
				}
				want = min(want, c.curve.At(i)+math.Log((a-1)/a)-(math.Log(delta/m)+math.Log(a))/(a-1))
			}
			got, err := c.curve.FilterEpsilon(delta)
			if err != nil || math.Abs(got.Epsilon-want) > 1e-12 {
				t.Fatalf("FilterEpsilon = %+v (%v), want ε %v", got, err, want)
			}
		})
	}
}
