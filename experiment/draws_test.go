package experiment

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// drawsConfig is the synthetic experiment with the primary ensemble only
// and three draws of every private row.
func drawsConfig(t *testing.T) Config {
	t.Helper()
	cfg := synthetic(t)
	cfg.Teachers, cfg.SweepTeachers, cfg.Queries = []int{30}, nil, []int{300}
	cfg.Aggregators, cfg.SweepAggregators = []string{"nzc", "gnmax", "confident-gnmax"}, nil
	cfg.CompareAggregators, cfg.CompareSelections = nil, nil
	cfg.Draws = 3
	return cfg
}

func rowOf(t *testing.T, rep *Report, agg string) Row {
	t.Helper()
	i := slices.IndexFunc(rep.Rows, func(r Row) bool { return r.Aggregator == agg })
	if i < 0 {
		t.Fatalf("no %s row in %+v", agg, rep.Rows)
	}
	return rep.Rows[i]
}

// Every private row is several independent releases from crypto/rand,
// each with its student, summarised by mean, spread and worst; rows that
// are not releases have no draws.
func TestRunDraws(t *testing.T) {
	cfg := drawsConfig(t)
	cfg.SeededNoise = false
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Noise != "crypto/rand" || rep.Draws != 3 {
		t.Fatalf("report noise %q, %d draws; want crypto/rand, 3", rep.Noise, rep.Draws)
	}
	for _, r := range rep.Rows {
		if r.Aggregator == GroundTruth {
			if len(r.Draws) != 0 || r.Noise != "" {
				t.Errorf("%s: %d draws, noise %q; want none", r.Aggregator, len(r.Draws), r.Noise)
			}
			continue
		}
		if len(r.Draws) != 3 || r.Noise != "crypto/rand" {
			t.Fatalf("%s: %d draws, noise %q; want 3 from crypto/rand", r.Aggregator, len(r.Draws), r.Noise)
		}
		var sum, worst float64 = 0, 1
		for _, d := range r.Draws {
			sum += d.StudentAccuracy
			worst = min(worst, d.StudentAccuracy)
			if float64(d.Epsilon) != r.Epsilon {
				t.Errorf("%s: a draw's ε %v, the row's %v: the proven ε does not depend on the draw", r.Aggregator, d.Epsilon, r.Epsilon)
			}
		}
		if math.Abs(r.StudentAccuracyMean-sum/3) > 1e-12 || r.StudentAccuracy != r.StudentAccuracyMean || r.StudentAccuracyWorst != worst {
			t.Errorf("%s: mean %v (row %v), worst %v; draws %+v", r.Aggregator, r.StudentAccuracyMean, r.StudentAccuracy, r.StudentAccuracyWorst, r.Draws)
		}
	}
	// σ = 40 against 30 votes: each draw labels most of the 300 queries
	// at random, so two draws with equal label accuracy and answers happen
	// with probability far below 1e-9.
	g := rowOf(t, rep, "gnmax").Draws
	if g[0] == g[1] && g[1] == g[2] {
		t.Fatalf("three gnmax draws from crypto/rand are identical: %+v", g)
	}
	// nzc with c = 1e100 releases the clean votes whatever its noise: its
	// draws released the same labels and share one student.
	n := rowOf(t, rep, "nzc").Draws
	if n[0] != n[1] || n[1] != n[2] {
		t.Fatalf("nzc draws %+v differ", n)
	}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"noise":"crypto/rand"`, `"draws":[{`, `"student_accuracy_mean"`, `"student_accuracy_worst"`, `"student_accuracy_std"`} {
		if !strings.Contains(string(js), key) {
			t.Errorf("results.json lacks %s", key)
		}
	}
}

// A seeded run is reproducible, says so, and its first draw is the single
// draw of a seeded run of one.
func TestRunDrawsSeeded(t *testing.T) {
	cfg := drawsConfig(t)
	a, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Draws = 1
	one, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Noise != "seeded:1" || rowOf(t, a, "gnmax").Noise != "seeded:1" {
		t.Fatalf("seeded run labelled %q / %q, want seeded:1", a.Noise, rowOf(t, a, "gnmax").Noise)
	}
	for _, agg := range []string{"gnmax", "confident-gnmax"} {
		ra, rb, r1 := rowOf(t, a, agg), rowOf(t, b, agg), rowOf(t, one, agg)
		if !reflect.DeepEqual(ra.Draws, rb.Draws) {
			t.Fatalf("%s: the same seed drew %+v and %+v", agg, ra.Draws, rb.Draws)
		}
		if ra.Draws[0] != r1.Draws[0] {
			t.Fatalf("%s: first of three draws %+v, the single draw %+v", agg, ra.Draws[0], r1.Draws[0])
		}
		if ra.Draws[0] == ra.Draws[1] && ra.Draws[1] == ra.Draws[2] {
			t.Fatalf("%s: three seeded draws are one: %+v", agg, ra.Draws)
		}
	}
}

// With BaselineDraws, the rows that are not a session's make that many
// draws and the sessions' rows Draws; the report and its table say so.
func TestRunBaselineDraws(t *testing.T) {
	cfg := plannerConfig(t)
	cfg.Queries = []int{300}
	cfg.Aggregators = []string{"gnmax", "nzc-svt"}
	cfg.Draws, cfg.BaselineDraws = 2, 1
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Draws != 2 || rep.BaselineDraws != 1 {
		t.Fatalf("report: %d draws, %d baseline draws; want 2 and 1", rep.Draws, rep.BaselineDraws)
	}
	sessions := 0
	for _, r := range rep.Rows {
		want := 1
		if strings.Contains(r.Selection, "confident") {
			want, sessions = 2, sessions+1
		}
		if r.Aggregator == GroundTruth {
			want = 0
		}
		if len(r.Draws) != want {
			t.Errorf("%s (%s): %d draws, want %d", r.Aggregator, r.Selection, len(r.Draws), want)
		}
	}
	if sessions != 2 {
		t.Fatalf("%d bootstrapped and planned rows, want 2", sessions)
	}
	var md strings.Builder
	if err := rep.WriteMarkdown(&md, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "made 1 draw(s) each") {
		t.Fatalf("the table does not say the comparison rows made one draw:\n%s", md.String())
	}
}

// The ensembles after the primary one run only SecondaryAggregators, when
// set; an aggregator there that does not run is refused.
func TestSecondaryAggregators(t *testing.T) {
	cfg := synthetic(t)
	cfg.Aggregators = []string{"nzc", "gnmax", "lnmax"}
	for _, tt := range []struct {
		secondary []string
		want      []string
	}{
		{nil, []string{"nzc", "gnmax", "lnmax"}},
		{[]string{"nzc"}, []string{"nzc"}},
	} {
		cfg.SecondaryAggregators = tt.secondary
		var got []string
		for _, r := range plannedRuns(cfg, cfg.Teachers[1], []int{100, 500}) {
			got = append(got, r.agg)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("secondary %v: the second ensemble runs %v, want %v", tt.secondary, got, tt.want)
		}
		if n := len(plannedRuns(cfg, cfg.Teachers[0], []int{100, 500})); n < 3 {
			t.Errorf("secondary %v: the primary ensemble runs %d releases, want every aggregator", tt.secondary, n)
		}
	}
	cfg.SecondaryAggregators = []string{"nzc-svt"}
	if err := cfg.Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("a secondary aggregator that does not run: %v, want ErrConfig", err)
	}
}
