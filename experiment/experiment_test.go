package experiment

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/data/synth"
	"github.com/nzcfed/nzc/ml/ensemble"
	"github.com/nzcfed/nzc/ml/metrics"
	"github.com/nzcfed/nzc/ml/model"
	"github.com/nzcfed/nzc/ml/selection"
)

// blobs makes a 4-class problem of Gaussian clusters in 8 dimensions.
func blobs(seed uint64, n int) *data.Dataset {
	return synth.Blobs{Classes: 4, Dim: 8, Spread: 1.5, CentreSeed: [2]uint64{5, 5}}.Make(seed, n)
}

func synthetic(t *testing.T) Config {
	t.Helper()
	cfg, err := Preset(PresetQuick)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Dataset = "blobs"
	cfg.Data = &data.Split{Train: blobs(1, 3000), Test: blobs(2, 700)}
	cfg.Teachers = []int{30, 3}
	cfg.SweepTeachers = []int{1}
	cfg.Queries = []int{100, 500}
	cfg.Holdout = 200
	cfg.TeacherModel, cfg.StudentModel = model.KindSoftmax, model.KindSoftmax
	cfg.TeacherTrain = model.TrainConfig{Optimizer: model.Adam, LearnRate: 0.01, BatchSize: 16, Epochs: 2, MinSteps: 20, Cosine: true}
	cfg.StudentTrain = model.TrainConfig{Optimizer: model.Adam, LearnRate: 0.01, BatchSize: 16, Epochs: 5, MinSteps: 50, Cosine: true}
	cfg.CacheDir = t.TempDir()
	// One seeded draw: the tests compare runs; TestRunDraws draws more.
	cfg.Draws, cfg.SeededNoise = 1, true
	cfg.Tuning = Tuning{Train: 600, Pool: 200, Teachers: 10}
	return cfg
}

func TestRunSynthetic(t *testing.T) {
	cfg := synthetic(t)
	cfg.StudentWorkers = 3
	// Views of examples that are not images are the examples themselves:
	// the report states them, the accuracies are those without.
	cfg.StudentViews = model.Views{Shift: 1}
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Primary ensemble: lnmax, gnmax and confident-gnmax at 100 and 500, nzc
	// and nzc-svt at 500, nzc-svt in the pool's order; the other full
	// ensemble: the five aggregators at 500; plus ground truth. No row
	// publishes the release ensembles' clean votes.
	if want := (6 + 2 + 1) + 5 + 1; len(rep.Rows) != want {
		t.Fatalf("%d rows, want %d", len(rep.Rows), want)
	}
	if len(rep.Ensembles) != 2 || rep.Teachers != 30 {
		t.Fatalf("ensembles %+v, primary %d", rep.Ensembles, rep.Teachers)
	}
	// The release ensembles carry no statistic of their votes; the tuning
	// ensemble (10 teachers) and the plot-only one (1) do, on the tuning
	// pool, disjoint from the release.
	for _, e := range rep.Ensembles {
		if e.CleanVotesLabelAccuracy != 0 || e.GapCounts != nil {
			t.Errorf("release ensemble of %d publishes its votes: %+v", e.Teachers, e)
		}
	}
	tr := rep.Tuning
	if tr == nil || tr.TrainExamples != [2]int{2400, 2800} || tr.PoolExamples != [2]int{2800, 3000} || tr.Disjoint == "" || len(tr.Diagnostics) != 2 ||
		tr.Diagnostics[0].Teachers != 10 || tr.Diagnostics[1].Teachers != 1 || tr.Diagnostics[0].CleanVotesLabelAccuracy < 0.3 || len(tr.Diagnostics[0].GapCounts) != 11 {
		t.Fatalf("tuning %+v: want the share 2400–3000 with diagnostics of 10 and 1 teachers", tr)
	}
	byKey := map[string]Row{}
	for _, r := range rep.Rows {
		if r.Aggregator == "lnmax" && r.Queries == 100 {
			continue
		}
		byKey[r.Aggregator+"/"+itoa(r.Teachers)] = r
	}
	nzc, gt := byKey["nzc/30"], byKey[GroundTruth+"/0"]
	// c = 1e100 swamps the noise: nzc releases exactly the clean labels,
	// while its true cost is astronomical.
	if nzc.LabelAccuracy < 0.85 {
		t.Fatalf("nzc label accuracy %.3f, want the clean votes' ≥ 0.85 on this easy problem", nzc.LabelAccuracy)
	}
	if nzc.Epsilon < 1e100 || nzc.EpsilonClaimed == nil || *nzc.EpsilonClaimed != 0 {
		t.Fatalf("nzc must be charged its true cost beside the claimed 0: %+v", nzc)
	}
	if gt.StudentAccuracy < 0.85 || !math.IsInf(gt.Epsilon, 1) {
		t.Fatalf("ground truth row %+v", gt)
	}
	for _, r := range rep.Rows {
		// Every row's ε is the proven one at the experiment's δ, or inf.
		private := r.Aggregator != CleanVotes && r.Aggregator != GroundTruth
		if private && (r.EpsilonSource != proven || r.Delta != cfg.Delta) {
			t.Errorf("%s: ε %v from %q at δ %v, want the proven ε at δ %v", r.Aggregator, r.Epsilon, r.EpsilonSource, r.Delta, cfg.Delta)
		}
		if compared := r.Aggregator == "nzc-svt" && r.Selection == "sequential" && r.Teachers == 30; r.Selection != string(cfg.Selection.Strategy) && !compared {
			t.Errorf("%s: selection %q, want %q", r.Aggregator, r.Selection, cfg.Selection.Strategy)
		}
		if r.Answered > r.Queries {
			t.Errorf("%s: %d answered of %d", r.Aggregator, r.Answered, r.Queries)
		}
		// The smooth-sensitivity rows carry their private estimate, never
		// the unperturbed value computed from the raw votes.
		released := r.Aggregator == "gnmax" || r.Aggregator == "confident-gnmax"
		if r.EpsilonDataDependent != 0 || r.EpsilonReleaseNoiseSD != 0 {
			t.Errorf("%s: publishes the raw votes' data-dependent ε %v ± %v", r.Aggregator, r.EpsilonDataDependent, r.EpsilonReleaseNoiseSD)
		}
		if got := r.EstimateSmoothSensitivity > 0 && !r.EstimateSeeded; got != released {
			t.Errorf("%s: smooth-sensitivity estimate %v (seeded %v)", r.Aggregator, r.EstimateSmoothSensitivity, r.EstimateSeeded)
		}
	}

	// JSON: the documented keys, unbounded ε as "inf", and it decodes back.
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"student_self_training":{"rounds":1`, `"dataset":"blobs"`, `"teachers":30`, `"epsilon":"inf"`, `"epsilon_claimed":0`, `"teacher_mean_accuracy"`, `"tuning":{`, `"diagnostics":[`, `"estimate_smooth_sensitivity"`, `"selection":"typical"`, `"student_views":{"shift":1}`} {
		if !bytes.Contains(js, []byte(key)) {
			t.Errorf("JSON lacks %s", key)
		}
	}
	var back Report
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Rows) != len(rep.Rows) || !math.IsInf(back.Rows[len(back.Rows)-1].Epsilon, 1) {
		t.Fatal("JSON does not round-trip")
	}

	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| nzc |") || !strings.Contains(md.String(), "| ground truth |") {
		t.Fatalf("markdown table lacks rows:\n%s", md.String())
	}
	dir := t.TempDir()
	names, err := rep.WritePlots(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Fatalf("%s is not a PNG: %v", n, err)
		}
	}

	// Deterministic: the same configuration gives the same table (teachers
	// come from the cache), whether the students train three at a time or
	// one after another.
	cfg.StudentWorkers = 1
	again, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The smooth-sensitivity estimates draw cryptographic noise unless
	// asked for a seed: they alone differ.
	for _, rows := range [][]Row{rep.Rows, again.Rows} {
		for i := range rows {
			rows[i].EstimateSmoothSensitivity = 0
		}
	}
	a, _ := json.Marshal(rep.Rows)
	b, _ := json.Marshal(again.Rows)
	if !bytes.Equal(a, b) {
		t.Fatal("a second run with the same seed gave a different table")
	}
}

// A student that cannot finish fails the whole set, and no row gets a
// student accuracy.
func TestTrainAllStopsOnError(t *testing.T) {
	cfg := synthetic(t)
	cfg.StudentWorkers = 2
	queries := cfg.Data.Test.Slice(0, 500)
	st := &students{cfg: cfg, queries: queries, holdout: cfg.Data.Test.Slice(500, 700), now: time.Now, log: slog.New(slog.DiscardHandler)}
	st.spec, _ = model.Preset(cfg.StudentModel, queries.Shape, 4)
	rows := make([]Row, 3)
	for i := range rows {
		n := 100 * (i + 1)
		st.add(slot{row: i, draw: -1}, itoa(i), scatter(500, identity(n), slices.Clone(queries.Y[:n])))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := st.trainAll(ctx, rows)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("trainAll with a cancelled context: %v, want context.Canceled", err)
	}
	for i, r := range rows {
		if r.StudentAccuracy != 0 {
			t.Errorf("row %d got student accuracy %v from a failed run", i, r.StudentAccuracy)
		}
	}
}

func identity(n int) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = i
	}
	return o
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestValidate(t *testing.T) {
	base := synthetic(t)
	tests := []struct {
		name string
		edit func(c *Config)
	}{
		{"no data", func(c *Config) { c.Data = nil }},
		{"too many teachers", func(c *Config) { c.Teachers = []int{1 << 20} }},
		{"too many queries", func(c *Config) { c.Queries = []int{600} }},
		{"unknown aggregator", func(c *Config) { c.Aggregators = []string{"magic"} }},
		{"bad delta", func(c *Config) { c.Delta = 0 }},
		{"bad model", func(c *Config) { c.StudentModel = "transformer" }},
		{"holdout", func(c *Config) { c.Holdout = 700 }},
		{"student workers", func(c *Config) { c.StudentWorkers = -1 }},
		{"self-training confidence", func(c *Config) { c.SelfTraining = ensemble.SelfTraining{Rounds: 1, Confidence: 2} }},
		{"consistency ratio", func(c *Config) { c.Consistency = model.Consistency{Weight: 1, Threshold: 0.9, Ratio: 0, Epochs: 1} }},
		{"student views", func(c *Config) { c.StudentViews = model.Views{Shift: -1} }},
		{"selection", func(c *Config) { c.Selection.Strategy = "best" }},
		{"compared selection", func(c *Config) { c.CompareSelections = []selection.Strategy{"best"} }},
		{"compared aggregator that does not run", func(c *Config) { c.Aggregators = []string{"gnmax"} }},
	}
	for _, tt := range tests {
		c := base
		tt.edit(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", tt.name, err)
		}
	}
	if _, err := Preset("nope"); !errors.Is(err, ErrConfig) {
		t.Fatalf("unknown preset: %v", err)
	}
}

// The paper's claims go beside the rows that reproduce the paper's: same
// aggregator, parameters, ensemble and number of queries.
func TestPaperClaims(t *testing.T) {
	rep := &Report{Dataset: "mnist", Rows: []Row{
		{Aggregator: "lnmax", Params: "Laplace b=20", Teachers: 250, Queries: 100},
		{Aggregator: "lnmax", Params: "Laplace b=20", Teachers: 250, Queries: 9000},
		{Aggregator: "lnmax", Params: "Laplace b=5", Teachers: 250, Queries: 100},
		{Aggregator: "lnmax", Params: "Laplace b=20", Teachers: 250, Queries: 640},
		{Aggregator: "gnmax", Params: "σ=40", Teachers: 250, Queries: 100},
	}}
	rep.AddPaperClaims()
	for i, want := range []float64{2.04, math.NaN(), math.NaN(), math.NaN(), math.NaN()} {
		got := rep.Rows[i].EpsilonClaimed
		if math.IsNaN(want) != (got == nil) || (got != nil && *got != want) {
			t.Errorf("row %d (%s %s, %d queries): claimed %v, want %v", i, rep.Rows[i].Aggregator, rep.Rows[i].Params, rep.Rows[i].Queries, got, want)
		}
	}
	var md strings.Builder
	if err := rep.WriteMarkdown(&md, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(md.String(), "\n")
	for i, want := range []string{"| 63.5 | — | 2.04 |", "| 93.4 | 93.02 | >8.03 |", "| — | — | — |", "| — | — | — |", "| — | — | — |"} {
		if !strings.HasSuffix(lines[6+i], want) {
			t.Errorf("markdown row %d: %q does not end with %q", i, lines[6+i], want)
		}
	}
}

// A row's ε is the proven one at the experiment's total δ: a mechanism's
// own δ is taken out of it, and at or above it there is no guarantee.
func TestProvenEpsilon(t *testing.T) {
	g := mechanism.DefaultGrid()
	tests := []struct {
		name     string
		ownDelta float64
		inf      bool
	}{
		{"no own δ", 0, false},
		{"own δ below", 1e-6, false},
		{"own δ equal", 1e-5, true},
		{"own δ above", 1.01e-5, true},
	}
	base, err := provenEpsilon(mechanism.Charge{RDP: mechanism.PureDP(g, 1), PureEpsilon: math.Inf(1)}, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := provenEpsilon(mechanism.Charge{RDP: mechanism.PureDP(g, 1), Delta: tt.ownDelta, PureEpsilon: 1}, 1e-5)
			if err != nil {
				t.Fatal(err)
			}
			if math.IsInf(e, 1) != tt.inf || (!tt.inf && e != min(base, 1)) {
				t.Fatalf("ε = %v (pure ε 1, own δ %v, total 1e-5; with no own δ %v)", e, tt.ownDelta, base)
			}
		})
	}
}

// Rows of earlier results.json files read with the proven ε as their ε.
func TestLegacyRow(t *testing.T) {
	old := `{"aggregator":"gnmax","params":"σ=40","teachers":250,"queries":100,"answered":100,"epsilon":0.864,` +
		`"epsilon_data_independent":1.478,"delta":1e-05,"epsilon_source":"smooth-sensitivity release at order 20","epsilon_data_dependent":0.791}`
	var r Row
	if err := json.Unmarshal([]byte(old), &r); err != nil {
		t.Fatal(err)
	}
	if r.Epsilon != 1.478 || r.EstimateSmoothSensitivity != 0.864 || !r.EstimateSeeded || r.EpsilonSource != proven || r.EpsilonDataDependent != 0.791 {
		t.Fatalf("legacy row read as %+v", r)
	}
	b, _ := json.Marshal(r)
	var again Row
	if err := json.Unmarshal(b, &again); err != nil || !reflect.DeepEqual(again, r) {
		t.Fatalf("re-encoded row %s reads as %+v, want %+v (%v)", b, again, r, err)
	}
}

// A bootstrapped session asks in the selection order, then in a student's
// confidence order, and costs what the session costs.
func TestRunBootstrap(t *testing.T) {
	cfg := synthetic(t)
	cfg.Teachers, cfg.SweepTeachers = []int{100}, nil
	cfg.Aggregators, cfg.SweepAggregators, cfg.CompareAggregators = []string{"nzc-svt"}, nil, nil
	cfg.Bootstrap = 10
	// A low threshold, so that the session answers on this small problem
	// and survives many refusals (its δ then guarantees nothing; the test is about the orders).
	svt := cfg.Mechanisms["nzc-svt"]
	svt.Threshold, svt.MaxRefusals = 20, 100
	cfg.Mechanisms = maps.Clone(cfg.Mechanisms)
	cfg.Mechanisms["nzc-svt"] = svt
	for _, tc := range []struct {
		rounds, students int
		confident        selection.ConfidentConfig
		selection        string
	}{
		{0, 0, selection.ConfidentConfig{Shift: 1}, "typical, then confident after 10"},
		{2, 1, selection.ConfidentConfig{Shift: 1, Floor: 0.9, Spread: 5}, "typical, then confident after 10, retrained 2 times as the answers doubled"},
		{1, 2, selection.ConfidentConfig{Shift: 1, Floor: 0.9}, "typical, then confident after 10, retrained 1 times as the answers doubled, 2 students judging together"},
	} {
		cfg.BootstrapRounds, cfg.Confident, cfg.BootstrapEpochs, cfg.BootstrapStudents = tc.rounds, tc.confident, tc.rounds, tc.students
		rep, err := Run(context.Background(), cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		var plain, boot *Row
		for i, r := range rep.Rows {
			switch {
			case r.Aggregator == "nzc-svt" && r.Selection == string(cfg.Selection.Strategy):
				plain = &rep.Rows[i]
			case r.Aggregator == "nzc-svt" && r.Selection == tc.selection:
				boot = &rep.Rows[i]
			}
		}
		if plain == nil || boot == nil {
			t.Fatalf("rows %+v: want nzc-svt in the selection order and bootstrapped (%s)", rep.Rows, tc.selection)
		}
		t.Logf("in order: %d answered, %.3f; %s: %d answered, %.3f", plain.Answered, plain.StudentAccuracy, tc.selection, boot.Answered, boot.StudentAccuracy)
		if boot.Epsilon != plain.Epsilon || boot.Queries != 500 || boot.Answered > boot.Queries || boot.Answered < 10 {
			t.Fatalf("bootstrapped row %+v, in order %+v: want the same ε, 500 queries and at least 10 answers", boot, plain)
		}
		if boot.LabelAccuracy < 0.8 {
			t.Fatalf("bootstrapped row %+v: labels no better than chance", boot)
		}
		if want := max(tc.students, 1); max(rep.BootstrapStudents, 1) != want {
			t.Fatalf("report states %d bootstrap students, want %d", rep.BootstrapStudents, want)
		}
	}
	for _, bad := range []func(*Config){
		func(c *Config) { c.Bootstrap = -1 },
		func(c *Config) { c.BootstrapRounds = -1 },
		func(c *Config) { c.Confident.Floor = 1 },
		func(c *Config) { c.BootstrapEpochs = -1 },
		func(c *Config) { c.BootstrapStudents = -1 },
		func(c *Config) { c.BootstrapStudents = 17 },
		func(c *Config) { c.BootstrapLabelledEpochs = -1 },
	} {
		c := cfg
		bad(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Fatalf("%+v: %v, want ErrConfig", c, err)
		}
	}
}

// Each session ε listed adds a bootstrapped row whose one session is
// planned at that ε, charged that ε, and drawn from its own noise.
func TestRunSessionEpsilons(t *testing.T) {
	cfg := synthetic(t)
	cfg.Teachers, cfg.SweepTeachers = []int{100}, nil
	cfg.Aggregators, cfg.SweepAggregators, cfg.CompareAggregators = []string{"nzc-svt"}, nil, nil
	cfg.Bootstrap, cfg.BootstrapRounds = 10, 0
	cfg.SessionEpsilons = []float64{2, 4}
	// Better-separated classes and longer training, so that the teachers
	// agree on some queries and a session of ε 2 answers them.
	easy := synth.Blobs{Classes: 4, Dim: 8, Spread: 0.5, CentreSeed: [2]uint64{5, 5}}
	cfg.Data = &data.Split{Train: easy.Make(1, 3000), Test: easy.Make(2, 700)}
	cfg.TeacherTrain.MinSteps, cfg.TeacherTrain.LearnRate = 200, 0.05
	// With SessionRefusals 0 the sessions allow the preset's one refusal.
	for _, tc := range []struct{ refusals, k int }{{0, mechanism.PresetSessionRefusals}, {2, 2}} {
		cfg.SessionRefusals = tc.refusals
		rep, err := Run(context.Background(), cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		boot := "typical, then confident after 10"
		got := map[string]Row{}
		for _, r := range rep.Rows {
			if r.Aggregator == "nzc-svt" && r.Selection == boot {
				got[r.Params] = r
			}
		}
		if len(got) != 3 {
			t.Fatalf("refusals %d: bootstrapped rows %v: want the preset's session and one at each of ε 2 and 4", tc.refusals, slices.Collect(maps.Keys(got)))
		}
		for _, e := range cfg.SessionEpsilons {
			p, err := mechanism.PlanSession(e, mechanism.PresetSessionDelta, tc.k, 100, 4)
			if err != nil {
				t.Fatal(err)
			}
			r, ok := got[p.String()]
			if !ok {
				t.Fatalf("refusals %d: no row with the session planned at ε %v (%s)", tc.refusals, e, p)
			}
			if r.Epsilon > e || r.Epsilon < e*0.99 || r.Answered < 1 || r.Queries != 500 {
				t.Fatalf("refusals %d, ε %v: row %+v, want ε %v and answers to some of 500 queries", tc.refusals, e, r, e)
			}
		}
	}
	cfg.SessionRefusals = 0
	negative := cfg
	negative.SessionRefusals = -1
	if err := negative.Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("-1 refusals per session: %v, want ErrConfig", err)
	}
	for _, bad := range [][]float64{{0.05}, {-1}} {
		c := cfg
		c.SessionEpsilons = bad
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Fatalf("session ε %v: %v, want ErrConfig", bad, err)
		}
		// Without a bootstrapped session nothing is planned, so nothing is
		// refused.
		c.Bootstrap = 0
		if err := c.Validate(); err != nil {
			t.Fatalf("session ε %v without a bootstrap: %v", bad, err)
		}
	}
}

// The reference lines (clean votes, ground truth) stay on the plot even
// when every row's student is below them.
func TestPlotShowsReferenceLines(t *testing.T) {
	rep := &Report{Teachers: 250, Rows: []Row{
		{Aggregator: "gnmax", Selection: "balanced", Teachers: 250, Queries: 100, StudentAccuracy: 0.95, Epsilon: 1.5},
		{Aggregator: "gnmax", Selection: "balanced", Teachers: 250, Queries: 640, StudentAccuracy: 0.96, Epsilon: 4},
		{Aggregator: CleanVotes, Teachers: 250, StudentAccuracy: 0.979, Epsilon: math.Inf(1)},
		{Aggregator: GroundTruth, StudentAccuracy: 0.985, Epsilon: math.Inf(1)},
	}}
	p, err := rep.plotAccuracyEpsilon()
	if err != nil {
		t.Fatal(err)
	}
	if p.Y.Max < 98.5 || p.Y.Min > 95 {
		t.Fatalf("y axis [%v, %v] leaves out the ground truth's 98.5 %% or a row's 95 %%", p.Y.Min, p.Y.Max)
	}
}

// A bootstrap round whose labels an earlier round already had gets the
// same students again, not trained anew: networks of equal weights, each
// its own copy.
func TestRankersShared(t *testing.T) {
	cfg := synthetic(t)
	cfg.BootstrapStudents = 2
	queries := blobs(3, 300)
	spec := model.Spec{Kind: model.KindSoftmax, Input: queries.Shape, Classes: queries.Classes}
	var logged bytes.Buffer
	s := &students{cfg: cfg, spec: spec, bootSpec: spec, queries: queries, now: time.Now, log: slog.New(slog.NewTextHandler(&logged, nil))}
	shared := func() int { return strings.Count(logged.String(), "shared with an earlier session") }
	labels := make([]int, queries.Len())
	for i := range labels {
		labels[i] = metrics.Refused
		if i < 40 {
			labels[i] = queries.Y[i]
		}
	}
	first, err := s.rankers(context.Background(), 0, labels)
	if err != nil {
		t.Fatal(err)
	}
	if shared() != 0 {
		t.Fatal("the first round's students were shared with nothing")
	}
	again, err := s.rankers(context.Background(), 0, slices.Clone(labels))
	if err != nil {
		t.Fatal(err)
	}
	if shared() != 1 {
		t.Fatal("the same labels trained the students again")
	}
	if len(first) != 2 || len(again) != 2 {
		t.Fatalf("%d and %d students, want 2 each", len(first), len(again))
	}
	if slices.Equal(first[0].Parameters()[0], first[1].Parameters()[0]) {
		t.Fatal("the two students of a round have the same weights: their seeds do not differ")
	}
	for j := range first {
		if first[j] == again[j] {
			t.Fatal("a shared student is the same object, not a copy")
		}
		for i, p := range first[j].Parameters() {
			if !slices.Equal(p, again[j].Parameters()[i]) {
				t.Fatalf("student %d: shared weights differ from the trained ones", j)
			}
		}
	}
	labels[40] = queries.Y[40]
	other, err := s.rankers(context.Background(), 1, labels)
	if err != nil {
		t.Fatal(err)
	}
	if shared() != 1 || slices.Equal(other[0].Parameters()[0], first[0].Parameters()[0]) {
		t.Fatal("other labels gave the same students")
	}

	// BootstrapLabelledEpochs trains the ranking students longer on their
	// labels, and only them.
	ctx := context.Background()
	longer := *s
	longer.cfg.BootstrapLabelledEpochs = 10 * cfg.StudentTrain.Epochs
	longer.boot = nil
	for _, boot := range []bool{true, false} {
		a, err := s.fit(ctx, spec, "as configured", labels, boot, 0)
		if err != nil {
			t.Fatal(err)
		}
		b, err := longer.fit(ctx, spec, "longer", labels, boot, 0)
		if err != nil {
			t.Fatal(err)
		}
		if same := slices.Equal(a.Parameters()[0], b.Parameters()[0]); same == boot {
			t.Errorf("bootstrap student %v: weights equal %v with %d labelled passes instead of %d", boot, same, longer.cfg.BootstrapLabelledEpochs, cfg.StudentTrain.Epochs)
		}
	}
}
