package experiment

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/mechanism/budget"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/data/synth"
)

// plannerConfig is a small experiment whose 100 teachers agree on some
// queries, with one planned row under a cap of ε 4 whose session is
// planned at ε 2.
func plannerConfig(t *testing.T) Config {
	t.Helper()
	cfg := synthetic(t)
	cfg.Teachers, cfg.SweepTeachers = []int{100}, nil
	cfg.Aggregators, cfg.SweepAggregators, cfg.CompareAggregators = []string{"nzc-svt"}, nil, nil
	cfg.Bootstrap, cfg.BootstrapRounds = 10, 0
	easy := synth.Blobs{Classes: 4, Dim: 8, Spread: 0.5, CentreSeed: [2]uint64{5, 5}}
	cfg.Data = &data.Split{Train: easy.Make(1, 3000), Test: easy.Make(2, 700)}
	cfg.TeacherTrain.MinSteps, cfg.TeacherTrain.LearnRate = 200, 0.05
	cfg.Plan = PlanConfig{Cap: 4, SessionEpsilon: 2}
	return cfg
}

// A session that ends before the pool is asked leaves the rest of its cap
// to GNMax on the queries the student is surest of; when the session used
// the whole cap nothing follows it. Either way the row's ε is the plan's
// worst branch, within the cap.
func TestPlannerSwitches(t *testing.T) {
	tests := []struct {
		name     string
		refusals int // K of the planned session
		queries  int
		plan     PlanConfig
		switches bool
	}{
		// K = 1: the session ends at the first query its teachers split on.
		{"session ends early", 1, 500, PlanConfig{Cap: 4, SessionEpsilon: 2}, true},
		// The same session, but it used the whole cap: nothing is left.
		{"no budget left", 1, 500, PlanConfig{Cap: 2, SessionEpsilon: 2}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := plannerConfig(t)
			cfg.SessionRefusals, cfg.Queries, cfg.Plan = tt.refusals, []int{tt.queries}, tt.plan
			rep, err := Run(context.Background(), cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(rep.Rows, func(r Row) bool { return r.Aggregator == Planner })
			if i < 0 {
				t.Fatalf("no planned row in %+v", rep.Rows)
			}
			r := rep.Rows[i]
			d := r.Draws[0]
			if switched := d.Fallback > 0; switched != tt.switches {
				t.Fatalf("%d GNMax answers of %d (%s): switched %v, want %v", d.Fallback, d.Answered, r.Params, switched, tt.switches)
			}
			if tt.switches && d.Answered <= d.Fallback {
				t.Fatalf("%d answers, %d of them GNMax's: the session answered nothing", d.Answered, d.Fallback)
			}
			// The ε is the session and every GNMax answer the cap allows.
			p, err := cfg.sessionParams(mechanism.NZCSVT, cfg.Plan.SessionEpsilon, 100, 4)
			if err != nil {
				t.Fatal(err)
			}
			spent, err := p.Charge(mechanism.DefaultGrid(), 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, want, err := budget.Rest(spent, ParamsFor(cfg.Mechanisms["gnmax"], 100, 4), cfg.Plan.Cap, cfg.Delta, tt.queries)
			if err != nil {
				t.Fatal(err)
			}
			if r.Epsilon != want || r.Epsilon > cfg.Plan.Cap || (tt.switches && r.Epsilon <= cfg.Plan.SessionEpsilon) {
				t.Fatalf("planned row ε %v, want the plan's %v within the cap %v and above the session's %v", r.Epsilon, want, cfg.Plan.Cap, cfg.Plan.SessionEpsilon)
			}
		})
	}
	for _, bad := range []PlanConfig{{Cap: 1, SessionEpsilon: 2}, {Cap: -1, SessionEpsilon: 0.5}, {Cap: 4}} {
		cfg := plannerConfig(t)
		cfg.Plan = bad
		if err := cfg.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("plan %+v: %v, want ErrConfig", bad, err)
		}
	}
}
