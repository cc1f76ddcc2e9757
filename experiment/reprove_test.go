package experiment

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/nzcfed/nzc/mechanism"
)

// An earlier run's rows are shown at today's proof: a confident-GNMax row
// recorded at the cost of the answers it gave gets the worst case over its
// queries, an
// nzc-svt row of 5 teachers whose own δ exceeds the experiment's gets inf,
// and rows whose parameters are not a preset's, or that are not private,
// keep what they were written with.
func TestReprove(t *testing.T) {
	g := mechanism.DefaultGrid()
	conf := mechanism.Params{Mechanism: mechanism.ConfidentGNMax, Threshold: 200, Sigma1: 150, Sigma2: 40}.ForEnsemble(250, 0)
	ch, err := conf.Charge(g, 61, 39)
	if err != nil {
		t.Fatal(err)
	}
	tight, _ := ch.RDP.Epsilon(1e-5)
	all, err := conf.Charge(g, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	worst, _ := all.RDP.FilterEpsilon(1e-5)
	rep := &Report{Rows: []Row{
		{Aggregator: "confident-gnmax", Params: conf.String(), Teachers: 250, Queries: 100, Answered: 61, Epsilon: tight.Epsilon, Delta: 1e-5, EpsilonSource: proven},
		{Aggregator: "nzc-svt", Params: "T=2, K=2, b_ρ=2, b_ν=4", Teachers: 5, Queries: 9000, Answered: 2, Epsilon: 1.503, Delta: 1.00001, EpsilonSource: proven},
		{Aggregator: "gnmax", Params: "σ=33", Teachers: 250, Queries: 10, Answered: 10, Epsilon: 0.7, Delta: 1e-5, EpsilonSource: proven},
		{Aggregator: "clean votes", Params: "noiseless plurality", Teachers: 250, Queries: 10, Answered: 10, Epsilon: math.Inf(1), EpsilonSource: notPrivate},
	}}
	n, err := rep.Reprove(1e-5)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("%d rows recomputed, want 2", n)
	}
	if got := rep.Rows[0].Epsilon; got != worst.Epsilon || !(got > tight.Epsilon) {
		t.Fatalf("confident-gnmax: ε %v, want the worst case over its 100 queries %v (above the realized %v)", got, worst.Epsilon, tight.Epsilon)
	}
	if got := rep.Rows[1]; !math.IsInf(got.Epsilon, 1) || got.Delta != 1e-5 {
		t.Fatalf("nzc-svt of 5 teachers: ε %v at δ %v, want inf at 1e-5", got.Epsilon, got.Delta)
	}
	if rep.Rows[2].Epsilon != 0.7 || !math.IsInf(rep.Rows[3].Epsilon, 1) {
		t.Fatalf("rows that cannot be recomputed changed: %+v %+v", rep.Rows[2], rep.Rows[3])
	}
}

// An earlier report loses every statistic of the release ensembles' raw
// votes no mechanism charged for; its releases and a tuning ensemble's
// diagnostics stay.
func TestRedact(t *testing.T) {
	rep := &Report{
		CleanVotesLabelAccuracy: 0.97,
		Ensembles: []Ensemble{
			{Teachers: 250, TeacherMeanAccuracy: 0.8, CleanVotesLabelAccuracy: 0.97, GapCounts: []int{1, 2}, TableRows: true},
			{Teachers: 10, TeacherMeanAccuracy: 0.9, CleanVotesLabelAccuracy: 0.95},
		},
		Rows: []Row{
			{Aggregator: "gnmax", Params: "σ=40", Teachers: 250, Queries: 100, Answered: 100, EpsilonDataDependent: 0.7, EpsilonReleaseNoiseSD: 0.2, EstimateSmoothSensitivity: 0.9},
			{Aggregator: CleanVotes, Teachers: 250, Queries: 100, Answered: 100, LabelAccuracy: 0.97},
			{Aggregator: GroundTruth, Queries: 100, Answered: 100, LabelAccuracy: 1},
		},
		Tuning: &TuningReport{Diagnostics: []Ensemble{{Teachers: 50, CleanVotesLabelAccuracy: 0.9, GapCounts: []int{3}}}},
	}
	if n := rep.Redact(); n != 5 {
		t.Errorf("%d removed, want 5", n)
	}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Clean     *float64 `json:"clean_votes_label_accuracy"`
		Ensembles []map[string]any
		Rows      []map[string]any
	}
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatal(err)
	}
	if got.Clean != nil || len(got.Ensembles) != 1 || got.Ensembles[0]["gap_counts"] != nil || got.Ensembles[0]["clean_votes_label_accuracy"] != nil {
		t.Fatalf("release ensembles' votes still published: %s", js)
	}
	if len(got.Rows) != 2 || got.Rows[0]["epsilon_data_dependent"] != nil || got.Rows[0]["estimate_smooth_sensitivity"] != 0.9 || got.Rows[1]["aggregator"] != GroundTruth {
		t.Fatalf("rows after redaction: %s", js)
	}
	if d := rep.Tuning.Diagnostics[0]; d.CleanVotesLabelAccuracy != 0.9 || len(d.GapCounts) != 1 {
		t.Fatalf("the tuning ensemble's diagnostics were removed: %+v", d)
	}
}
