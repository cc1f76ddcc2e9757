package experiment

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/mechanism/budget"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/ensemble"
	"github.com/nzcfed/nzc/ml/metrics"
	"github.com/nzcfed/nzc/ml/model"
	"github.com/nzcfed/nzc/ml/selection"
)

// tunePlans parses NZC_TUNE_PLAN: comma-separated policies f/K/m or
// f/K/m/a, the session's share f of the cap, its refusal bound K, the
// fewest session answers whose student ranks the GNMax queries and, with
// a, GNMax first and the session only when students cross-validated on
// its labels agree with that share of them (PlanConfig.Agreement).
func tunePlans(t *testing.T, list string, capEps float64) []PlanConfig {
	t.Helper()
	var plans []PlanConfig
	for _, p := range strings.Split(list, ",") {
		var f, agree float64
		var k, m int
		n, err := fmt.Sscanf(p, "%g/%d/%d/%g", &f, &k, &m, &agree)
		if n < 3 || (err != nil && n != 3) || !(f > 0 && f <= 1) {
			t.Fatalf("NZC_TUNE_PLAN %q: want f/K/m or f/K/m/a with 0 < f ≤ 1", p)
		}
		plans = append(plans, PlanConfig{Cap: capEps, SessionEpsilon: f * capEps, Refusals: k, MinAnswers: m, Agreement: agree})
	}
	return plans
}

// tuneEnv is the float in the variable name, or def.
func tuneEnv(t *testing.T, name string, def float64) float64 {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v > 0) {
		t.Fatalf("%s %q: want a positive number", name, s)
	}
	return v
}

// TestTunePlan measures planner policies (PlanConfig) against the single
// mechanisms at the same ε, on the tuning share only: the tuning
// ensemble (Config.Tuning) answers its own pool's first 8,000 images and
// every student is scored on the pool's last 1,000; no release teacher,
// student query or held-out image is read. At the cap NZC_TUNE_CAP
// (default 250/k for k tuning teachers: the ε = 1 of 250 teachers, scaled
// as the mechanisms' parameters scale) it releases, NZC_TUNE_DRAWS times each (default 2, noise
// seeded for the comparison): GNMax, LNMax and Confident-GNMax on as many
// queries of the balanced order as the cap buys whatever the votes, one
// bootstrapped nzc-svt session of the whole cap, and each policy f/K/m
// of NZC_TUNE_PLAN; with the clean votes' student beside them. It is a
// measurement, not a check, and runs only when asked; NZC_TUNE_DATASET
// chooses the data set (mnist-hard: the harder one), and
// NZC_TUNE_STUDENT_PASSES, when set, the students' passes over their
// unlabelled queries (cheaper students for a first comparison):
//
//	scripts/fetch-data.sh
//	NZC_TUNE_DATASET=mnist-hard NZC_TUNE_PLAN=0.25/1/20,0.5/1/20 go test -run TestTunePlan -v -timeout 3h ./experiment
func TestTunePlan(t *testing.T) {
	list := os.Getenv("NZC_TUNE_PLAN")
	if list == "" {
		t.Skip("a measurement: set NZC_TUNE_PLAN to comma-separated policies f/K/m")
	}
	ctx := context.Background()
	cfg, split := tunePreset(t)
	cfg.Data, cfg.CacheDir = split, "../.nzc-cache/teachers"
	const classes, scored = 10, 1000
	_, tuneTrain, tunePool := cfg.shares()
	k := cfg.tuningTeachers()
	// The mechanisms' parameters scale with the ensemble (ParamsFor): σ and
	// the distances a session tests are k/250 of the release's, so the
	// cap that buys the tuning ensemble what ε = 1 buys 250 teachers is
	// 250/k (5 for 50 teachers).
	capEps := tuneEnv(t, "NZC_TUNE_CAP", float64(ReferenceTeachers)/float64(k))
	plans := tunePlans(t, list, capEps)
	tSpec, _ := model.Preset(cfg.TeacherModel, tuneTrain.Shape, classes)
	start := time.Now()
	preds, err := teacherPredictions(ctx, cfg, tuneTrain, tunePool, tSpec, cfg.TeacherTrain, k, classes, time.Now, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d tuning teachers trained or loaded in %v", k, time.Since(start).Round(time.Second))
	nq := tunePool.Len() - scored
	queries, holdout := tunePool.Slice(0, nq), tunePool.Slice(nq, tunePool.Len())
	qpreds := make([][]int, len(preds))
	mean := 0.0
	for i, p := range preds {
		qpreds[i] = p[:nq]
		a, _ := metrics.Accuracy(p, tunePool.Y)
		mean += a / float64(len(preds))
	}
	hist, err := ensemble.Histograms(qpreds, nq, classes)
	if err != nil {
		t.Fatal(err)
	}
	clean := ensemble.Plurality(hist)
	cleanAcc, _ := metrics.Accuracy(clean, queries.Y)
	t.Logf("%s: tuning teachers %.2f %% each on average, their clean vote %.2f %% on the pool's queries", cfg.Dataset, 100*mean, 100*cleanAcc)

	tc := cfg
	tc.Data = &data.Split{Train: tuneTrain, Test: tunePool}
	tc.Teachers, tc.Holdout, tc.Tuning = []int{k}, scored, Tuning{}
	tc.Draws, tc.SeededNoise = int(tuneEnv(t, "NZC_TUNE_DRAWS", 2)), true
	tc.Plan, tc.SessionEpsilons = PlanConfig{}, nil
	sess, err := mechanism.NZCSVT.PlanSession(capEps, mechanism.PresetSessionDelta, tc.sessionRefusals(), k, classes)
	if err != nil {
		t.Fatal(err)
	}
	if v := os.Getenv("NZC_TUNE_STUDENT_PASSES"); v != "" {
		// Cheaper students for a first comparison: fewer passes over the
		// unlabelled queries (the preset's: 30).
		if tc.Consistency.Epochs, err = strconv.Atoi(v); err != nil || tc.Consistency.Epochs < 1 {
			t.Fatalf("NZC_TUNE_STUDENT_PASSES %q: want a positive count", v)
		}
	}
	tc.Mechanisms = DefaultMechanisms()
	// The bootstrapped row scales the aggregator's threshold to the
	// ensemble (ParamsFor); the session is planned for it already.
	sess.Threshold *= float64(ReferenceTeachers) / float64(k)
	tc.Mechanisms[string(mechanism.NZCSVT)] = sess
	tc.Aggregators = []string{string(mechanism.NZCSVT)}
	order, err := selection.Order(ctx, tc.Selection, queries)
	if err != nil {
		t.Fatal(err)
	}
	sSpec, _ := model.Preset(tc.StudentModel, tuneTrain.Shape, classes)
	bSpec := sSpec
	if tc.BootstrapModel != "" {
		bSpec, _ = model.Preset(tc.BootstrapModel, tuneTrain.Shape, classes)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	st := &students{cfg: tc, spec: sSpec, bootSpec: bSpec, queries: queries, holdout: holdout, now: time.Now, log: log}
	rep := &Report{}
	g := mechanism.DefaultGrid()
	for _, agg := range []string{"gnmax", "lnmax", "confident-gnmax"} {
		p := ParamsFor(tc.Mechanisms[agg], k, classes)
		n, _, err := budget.Rest(mechanism.Charge{RDP: g.Zero()}, p, capEps, tc.Delta, nq)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Logf("%s: no query fits ε %v", agg, capEps)
			continue
		}
		if err := st.releaseRow(rep, agg, tc.Selection.Strategy, k, classes, hist, order[:n]); err != nil {
			t.Fatal(err)
		}
	}
	start = time.Now()
	// NZC_TUNE_PLANS_ONLY=1 leaves out the session of the whole cap.
	if os.Getenv("NZC_TUNE_PLANS_ONLY") == "" {
		if err := st.bootstrapRows(ctx, rep, k, classes, hist, order); err != nil {
			t.Fatal(err)
		}
	}
	for _, pc := range plans {
		st.cfg.Plan = pc
		if err := st.plannedRows(ctx, rep, k, classes, hist, order); err != nil {
			t.Fatal(err)
		}
		rep.Rows[len(rep.Rows)-1].Params = fmt.Sprintf("f=%v K=%d m=%d a=%v: %s", pc.SessionEpsilon/pc.Cap, pc.Refusals, pc.MinAnswers, pc.Agreement, rep.Rows[len(rep.Rows)-1].Params)
	}
	t.Logf("sessions and plans released in %v", time.Since(start).Round(time.Second))
	st.add(slot{row: len(rep.Rows), draw: -1}, "clean votes", clean)
	rep.Rows = append(rep.Rows, Row{Aggregator: CleanVotes, Params: "the tuning ensemble's plurality", Queries: nq, Answered: nq, LabelAccuracy: cleanAcc})
	start = time.Now()
	if err := st.trainAll(ctx, rep.Rows); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d students trained in %v", len(st.jobs), time.Since(start).Round(time.Second))
	for i := range rep.Rows {
		r := &rep.Rows[i]
		r.summarize()
		var draws []string
		for _, d := range r.Draws {
			draws = append(draws, fmt.Sprintf("%d(+%d gnmax) %.1f%%", d.Answered, d.Fallback, 100*d.StudentAccuracy))
		}
		t.Logf("%-16s ε %.3f  student %.2f %% (worst %.2f)  answered %d, labels %.1f %%  [%s]  %s",
			r.Aggregator, r.Epsilon, 100*r.StudentAccuracy, 100*r.StudentAccuracyWorst, r.Answered, 100*r.LabelAccuracy, strings.Join(draws, "; "), r.Params)
	}
}
