package experiment

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/mechanism/budget"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/data/synth"
	"github.com/nzcfed/nzc/ml/metrics"
	"github.com/nzcfed/nzc/ml/model"
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

// A session that ends after fewer answers than the plan's MinAnswers —
// none at all, or a few whose student could rank nothing — leaves the rest
// of the cap to GNMax on the next queries in the query order, as GNMax
// alone would ask them; the votes are made so that the session refuses
// the query after its first answers.
func TestPlannerSwitchesInQueryOrder(t *testing.T) {
	const k, classes, n = 100, 4, 300
	tests := []struct {
		name       string
		agree      int // the first queries the teachers agree on
		minAnswers int
	}{
		{"session answers nothing", 0, 0},
		{"session answers nothing, a floor", 0, 20},
		{"session answers three, under the floor", 3, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := plannerConfig(t)
			cfg.SessionRefusals, cfg.Draws = 1, 1
			cfg.Plan.MinAnswers = tt.minAnswers
			queries := blobs(3, n)
			hist := make([][]int, n)
			for q := range hist {
				hist[q] = make([]int, classes)
				hist[q][queries.Y[q]] = k
			}
			// Query agree splits the teachers evenly between two classes.
			split := hist[tt.agree]
			clear(split)
			split[0], split[1] = k/2, k/2
			pool := make([]int, n)
			for i := range pool {
				pool[i] = i
			}
			spec, err := model.Preset(cfg.StudentModel, queries.Shape, classes)
			if err != nil {
				t.Fatal(err)
			}
			st := &students{cfg: cfg, spec: spec, bootSpec: spec, queries: queries, holdout: blobs(4, 50), now: time.Now, log: slog.New(slog.DiscardHandler)}
			p, err := cfg.planSessionParams(mechanism.NZCSVT, k, classes)
			if err != nil {
				t.Fatal(err)
			}
			gn := ParamsFor(cfg.Mechanisms["gnmax"], k, classes)
			session := func() (Row, []int, []bool, error) {
				return st.bootstrap(context.Background(), "nzc-svt", p, source(1, "session"), k, classes, hist, pool)
			}
			row, full, err := st.planned(context.Background(), p, gn, session, source(1, "gnmax"), hist, pool)
			if err != nil {
				t.Fatal(err)
			}
			spent, _ := p.Charge(mechanism.DefaultGrid(), 0, 0)
			want, _, err := budget.Rest(spent, gn, cfg.Plan.Cap, cfg.Delta, n)
			if err != nil || want == 0 {
				t.Fatalf("the rest of the cap buys %d GNMax answers (%v): the test needs some", want, err)
			}
			if row.fallback != want || row.Answered != tt.agree+want {
				t.Fatalf("%d answers, %d of them GNMax's; want %d session answers and the %d GNMax answers the cap buys", row.Answered, row.fallback, tt.agree, want)
			}
			// Answered: the agreed queries, then, past the refused one,
			// the next want queries in order.
			for q, l := range full {
				answered := q < tt.agree || (q > tt.agree && q <= tt.agree+want)
				if (l != metrics.Refused) != answered {
					t.Fatalf("query %d labelled %d; want the %d queries after the refused query %d answered, in order", q, l, want, tt.agree)
				}
			}
		})
	}
}

// A planned row whose session is one a bootstrapped row already drew
// continues that release, draw for draw, instead of drawing another.
func TestPlannerContinuesSession(t *testing.T) {
	cfg := plannerConfig(t)
	cfg.SessionRefusals, cfg.Queries, cfg.Draws = 1, []int{500}, 2
	cfg.SessionEpsilons = []float64{cfg.Plan.SessionEpsilon}
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := cfg.sessionParams(mechanism.NZCSVT, cfg.Plan.SessionEpsilon, 100, 4)
	if err != nil {
		t.Fatal(err)
	}
	si := slices.IndexFunc(rep.Rows, func(r Row) bool { return r.Aggregator == "nzc-svt" && r.Params == p.String() })
	pi := slices.IndexFunc(rep.Rows, func(r Row) bool { return r.Aggregator == Planner })
	if si < 0 || pi < 0 {
		t.Fatalf("no session row of %s or no planned row in %+v", p, rep.Rows)
	}
	for d, sd := range rep.Rows[si].Draws {
		pd := rep.Rows[pi].Draws[d]
		if pd.Answered-pd.Fallback != sd.Answered {
			t.Fatalf("draw %d: the planned row's session answered %d, the session row's %d", d, pd.Answered-pd.Fallback, sd.Answered)
		}
	}
}

// Draws of a session that refuses once (K = 1) release prefixes of one
// sequence of exact pluralities, so their ranking students are trained
// once and shared: the run time of five draws grows by their students,
// not by their rankers.
func TestSessionDrawsShareRankers(t *testing.T) {
	const k, classes, n, draws = 100, 4, 300, 3
	cfg := plannerConfig(t)
	cfg.Bootstrap, cfg.BootstrapRounds = 10, 2
	queries := blobs(3, n)
	hist := make([][]int, n)
	pool := make([]int, n)
	for q := range hist {
		hist[q] = make([]int, classes)
		hist[q][queries.Y[q]] = k
		pool[q] = q
	}
	spec, err := model.Preset(cfg.StudentModel, queries.Shape, classes)
	if err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	st := &students{cfg: cfg, spec: spec, bootSpec: spec, queries: queries, now: time.Now, log: slog.New(slog.NewTextHandler(&logged, nil))}
	p, err := cfg.sessionParams(mechanism.NZCSVT, 2, k, classes)
	if err != nil {
		t.Fatal(err)
	}
	for d := range draws {
		row, _, _, err := st.bootstrap(context.Background(), "nzc-svt", p, source(uint64(d), "draw"), k, classes, hist, pool)
		if err != nil {
			t.Fatal(err)
		}
		if row.Answered != n {
			t.Fatalf("draw %d answered %d of %d unanimous queries", d, row.Answered, n)
		}
	}
	rounds := cfg.BootstrapRounds + 1
	if got := strings.Count(logged.String(), "shared with an earlier session"); got != rounds*(draws-1) || len(st.boot) != rounds {
		t.Fatalf("%d rankers trained, %d shared; want %d trained once and shared by the other %d draws", len(st.boot), got, rounds, draws-1)
	}
}

// A plan that asks GNMax first releases, when students cross-validated
// on its first labels disagree with them (teachers that vote for a class
// unrelated to the image), exactly as many GNMax answers as GNMax alone
// buys within the cap, on the same first queries; when they agree
// (teachers that all vote the image's class of well-separated blobs), the
// session opens on the rest. Either way its ε is within the cap.
func TestPlannerProbe(t *testing.T) {
	const k, classes, n = 100, 4, 300
	for _, tt := range []struct {
		name    string
		vote    func(q, truth int) int // the class every teacher votes for
		session bool
	}{
		{"labels unrelated to the images: gnmax on", func(q, _ int) int { return (q * 7 / 3) % classes }, false},
		{"unanimous teachers on separated blobs: the session", func(_, truth int) int { return truth }, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := plannerConfig(t)
			cfg.SessionRefusals, cfg.Plan.Agreement, cfg.SelfTraining.Rounds, cfg.StudentTrain.LearnRate = 1, 0.5, 0, 0.05
			queries := synth.Blobs{Classes: classes, Dim: 8, Spread: 4, CentreSeed: [2]uint64{5, 5}}.Make(3, n)
			hist := make([][]int, n)
			pool := make([]int, n)
			for q := range hist {
				hist[q] = make([]int, classes)
				hist[q][tt.vote(q, queries.Y[q])] = k
				pool[q] = q
			}
			spec, err := model.Preset(cfg.StudentModel, queries.Shape, classes)
			if err != nil {
				t.Fatal(err)
			}
			var logged strings.Builder
			// The students that judge the first labels: linear, as the
			// blobs are.
			boot := model.Spec{Kind: model.KindSoftmax, Input: queries.Shape, Classes: classes}
			st := &students{cfg: cfg, spec: spec, bootSpec: boot, queries: queries, now: time.Now, log: slog.New(slog.NewTextHandler(&logged, nil))}
			p, err := cfg.planSessionParams(mechanism.NZCSVT, k, classes)
			if err != nil {
				t.Fatal(err)
			}
			gn := ParamsFor(cfg.Mechanisms["gnmax"], k, classes)
			row, full, err := st.probed(context.Background(), "nzc-svt", p, gn, source(1, "session"), source(1, "gnmax"), k, classes, hist, pool)
			if err != nil {
				t.Fatal(err)
			}
			alone, _, err := budget.Rest(mechanism.Charge{RDP: mechanism.DefaultGrid().Zero()}, gn, cfg.Plan.Cap, cfg.Delta, n)
			if err != nil {
				t.Fatal(err)
			}
			if row.Epsilon > cfg.Plan.Cap || row.Aggregator != Planner {
				t.Fatalf("%s row of ε %v under a cap of %v", row.Aggregator, row.Epsilon, cfg.Plan.Cap)
			}
			if opened := row.Answered > row.fallback; opened != tt.session {
				t.Fatalf("%d answers, %d of them GNMax's: session opened %v, want %v\n%s", row.Answered, row.fallback, opened, tt.session, logged.String())
			}
			if tt.session {
				return
			}
			if row.Answered != alone {
				t.Fatalf("%d GNMax answers, GNMax alone buys %d within the cap", row.Answered, alone)
			}
			for q, l := range full {
				if (l != metrics.Refused) != (q < alone) {
					t.Fatalf("query %d labelled %d: want the first %d queries answered, as GNMax alone asks them", q, l, alone)
				}
			}
		})
	}
}

// A plan that asks GNMax first and continues GNMax spends what GNMax
// alone spends at the cap: as many answers, the same ε (GNMax composes
// with itself without loss); the session's branch fits the cap too.
func TestProbeHardBranchIsGNMaxAlone(t *testing.T) {
	g := mechanism.DefaultGrid()
	for _, tt := range []struct {
		k             int
		capEps, share float64
	}{
		{250, 1, 0.4},
		{250, 1, 0.5},
		{50, 5, 0.4},
		{100, 4, 0.5},
	} {
		gn := ParamsFor(DefaultMechanisms()[string(mechanism.GNMax)], tt.k, 10)
		p, err := mechanism.NZCSVT.PlanSession(tt.share*tt.capEps, mechanism.PresetSessionDelta, 1, tt.k, 10)
		if err != nil {
			t.Fatal(err)
		}
		const delta, pool = 1e-5, 8000
		first, more, easy, hard, err := probe(p, gn, tt.capEps, delta, pool)
		if err != nil {
			t.Fatal(err)
		}
		alone, _, err := budget.Rest(mechanism.Charge{RDP: g.Zero()}, gn, tt.capEps, delta, pool)
		if err != nil {
			t.Fatal(err)
		}
		ch, err := gn.Charge(g, alone, 0)
		if err != nil {
			t.Fatal(err)
		}
		want, err := budget.Epsilon(ch, delta)
		if err != nil {
			t.Fatal(err)
		}
		if first+more != alone || math.Abs(hard-want) > 1e-12 || first == 0 {
			t.Errorf("k=%d cap %v, session %v of it: %d+%d GNMax answers at ε %v; GNMax alone %d at ε %v", tt.k, tt.capEps, tt.share, first, more, hard, alone, want)
		}
		if easy > tt.capEps || hard > tt.capEps {
			t.Errorf("k=%d cap %v: branches of ε %v and %v", tt.k, tt.capEps, easy, hard)
		}
	}
}
