package mechanism

import (
	"errors"
	"testing"
)

func TestPlanSession(t *testing.T) {
	g := DefaultGrid()
	tests := []struct {
		name        string
		eps, delta  float64
		k, teachers int
		ok          bool
		maxT        float64 // the plan's threshold is at most this
	}{
		{"ε 1, 250 teachers", 1, 5e-6, 1, 250, true, 40},
		{"ε 2, K 2", 2, 5e-6, 2, 250, true, 35},
		{"ε 0.5", 0.5, 5e-6, 1, 250, true, 81},
		{"ε 0.25 is out of reach with 250 teachers", 0.25, 5e-6, 1, 250, false, 0},
		{"5 teachers", 1, 1e-5, 1, 5, false, 0},
		{"bad ε", 0, 1e-5, 1, 250, false, 0},
		{"bad δ", 1, 1, 1, 250, false, 0},
		{"bad K", 1, 1e-5, 0, 250, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := PlanSession(tt.eps, tt.delta, tt.k, tt.teachers, 10)
			if !tt.ok {
				if !errors.Is(err, ErrBadParams) {
					t.Fatalf("plan %+v, err %v: want ErrBadParams", p, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ch, err := p.Charge(g, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if ch.PureEpsilon > tt.eps || ch.Delta > tt.delta || p.Threshold > tt.maxT || p.MaxRefusals != tt.k {
				t.Fatalf("plan %+v costs ε %v, δ %v: want ε ≤ %v, δ ≤ %v, T ≤ %v", p, ch.PureEpsilon, ch.Delta, tt.eps, tt.delta, tt.maxT)
			}
			// One lower threshold with the same noise misses δ: the plan
			// takes the lowest.
			q := p
			q.Threshold--
			if c, _ := q.Charge(g, 0, 0); c.Delta <= tt.delta {
				t.Fatalf("threshold %v also meets δ (%v): the plan is not the lowest", q.Threshold, c.Delta)
			}
		})
	}
}
