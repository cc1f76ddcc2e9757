package budget

import (
	"errors"
	"math"
	"testing"

	"github.com/nzcfed/nzc/mechanism"
)

func session(t *testing.T, eps float64) mechanism.Charge {
	t.Helper()
	p, err := mechanism.PlanSession(eps, mechanism.PresetSessionDelta, 1, 250, 10)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := p.Charge(mechanism.DefaultGrid(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// After a session of ε 0.5, the rest of a cap of 1 buys GNMax queries;
// one more would pass the cap, and a cap the session alone uses buys none.
func TestRest(t *testing.T) {
	gn, err := mechanism.Preset(mechanism.GNMax)
	if err != nil {
		t.Fatal(err)
	}
	gn = gn.ForEnsemble(250, 10)
	g := mechanism.DefaultGrid()
	tests := []struct {
		name     string
		spent    mechanism.Charge
		capEps   float64
		wantSome bool
	}{
		{"nothing spent", mechanism.Charge{RDP: g.Zero()}, 1, true},
		{"half spent on a session", session(t, 0.5), 1, true},
		{"all spent on a session", session(t, 1), 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, eps, err := Rest(tt.spent, gn, tt.capEps, 1e-5, 9000)
			if err != nil {
				t.Fatal(err)
			}
			if (n > 0) != tt.wantSome || eps > tt.capEps {
				t.Fatalf("%d queries at ε %v within a cap of %v", n, eps, tt.capEps)
			}
			more, err := gn.Charge(g, n+1, 0)
			if err != nil {
				t.Fatal(err)
			}
			both, err := Compose(tt.spent, more)
			if err != nil {
				t.Fatal(err)
			}
			if e, _ := Epsilon(both, 1e-5); e <= tt.capEps {
				t.Fatalf("%d queries planned, but %d cost ε %v, within the cap %v", n, n+1, e, tt.capEps)
			}
		})
	}
	if _, _, err := Rest(session(t, 1), gn, 0.5, 1e-5, 10); !errors.Is(err, ErrBudget) {
		t.Fatalf("a session above the cap: %v, want ErrBudget", err)
	}
	if _, _, err := Rest(mechanism.Charge{RDP: g.Zero()}, gn, math.Inf(1), 1e-5, 10); !errors.Is(err, ErrBudget) {
		t.Fatalf("an infinite cap: %v, want ErrBudget", err)
	}
}
