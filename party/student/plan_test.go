package student

import (
	"errors"
	"testing"

	"github.com/nzcfed/nzc/mechanism"
)

func TestPlanQueries(t *testing.T) {
	g := mechanism.DefaultGrid()
	svt, err := mechanism.PlanSession(1, 4e-6, 1, 250, 10)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name              string
		p                 mechanism.Params
		target, delta     float64
		max               int
		queries, sessions int
		err               bool
	}{
		{"gnmax σ=40 at ε 2", mechanism.Params{Mechanism: mechanism.GNMax, Sigma: 40, Teachers: 250, Classes: 10}, 2, 1e-5, 9000, -1, 0, false},
		{"gnmax capped by the pool", mechanism.Params{Mechanism: mechanism.GNMax, Sigma: 40, Teachers: 250, Classes: 10}, 1000, 1e-5, 50, 50, 0, false},
		{"lnmax b=20 at ε 0.05: not one query", mechanism.Params{Mechanism: mechanism.LNMax, Scale: 20, Teachers: 250, Classes: 10}, 0.05, 1e-5, 100, 0, 0, true},
		{"two sessions of ε 1 in 2.1", svt, 2.1, 1e-5, 9000, 9000, 2, false},
		// Sessions are pure DP, and the gate takes their summed pure ε
		// where it is below the conversion (2.01 here).
		{"two sessions of ε 1 in 2", svt, 2, 1e-5, 9000, 9000, 2, false},
		{"one session of ε 1 in 1.05", svt, 1.05, 1e-5, 9000, 9000, 1, false},
		{"no session of ε 1 in 0.9", svt, 0.9, 1e-5, 9000, 0, 0, true},
		{"bad target", svt, 0, 1e-5, 9000, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := PlanQueries(tt.p, tt.target, tt.delta, tt.max)
			if tt.err {
				if !errors.Is(err, ErrPlan) {
					t.Fatalf("plan %+v, err %v: want ErrPlan", plan, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if plan.Epsilon > tt.target || (tt.queries >= 0 && plan.Queries != tt.queries) || plan.Sessions != tt.sessions {
				t.Fatalf("plan %+v: want ε ≤ %v, %d queries, %d sessions", plan, tt.target, tt.queries, tt.sessions)
			}
			if tt.p.Mechanism == mechanism.NZCSVT || plan.Queries == tt.max {
				return
			}
			// The plan is the largest: one more query goes over.
			ch, _ := tt.p.Charge(g, plan.Queries+1, 0)
			if c, _ := ch.RDP.FilterEpsilon(tt.delta); c.Epsilon <= tt.target {
				t.Fatalf("%d queries cost ε %v, still within %v: the plan (%d) is not the largest", plan.Queries+1, c.Epsilon, tt.target, plan.Queries)
			}
		})
	}
}
