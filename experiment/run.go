package experiment

import (
	"context"
	cryptorand "crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/nzcfed/nzc/internal/jsonnum"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/mechanism/budget"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/ensemble"
	"github.com/nzcfed/nzc/ml/metrics"
	"github.com/nzcfed/nzc/ml/model"
	"github.com/nzcfed/nzc/ml/progress"
	"github.com/nzcfed/nzc/ml/selection"
)

// Row is one line of the table: an aggregator (or clean votes, or ground
// truth) at one number of queries.
type Row struct {
	Aggregator string `json:"aggregator"`
	Params     string `json:"params"`
	// Selection names the order in which the student asked its queries
	// (selection.Strategy).
	Selection       string  `json:"selection,omitempty"`
	Teachers        int     `json:"teachers"`
	Queries         int     `json:"queries"`
	Answered        int     `json:"answered"`
	LabelAccuracy   float64 `json:"label_accuracy"`
	StudentAccuracy float64 `json:"student_accuracy"`
	// Epsilon is the row's ε: the proven, data-independent bound at the
	// total δ Delta (the experiment's δ, which includes a mechanism's own
	// additive δ). +Inf when unbounded, when the mechanism's own δ reaches
	// the experiment's δ (no guarantee at all), or when the labels are not
	// a private release (clean votes, ground truth).
	Epsilon        float64  `json:"epsilon"`
	Delta          float64  `json:"delta"`
	EpsilonClaimed *float64 `json:"epsilon_claimed"`
	// EpsilonSource says what Epsilon is.
	EpsilonSource string `json:"epsilon_source,omitempty"`
	// Estimates, never a row's ε. For gnmax and confident-gnmax:
	// EstimateSmoothSensitivity is the data-dependent ε published through
	// smooth sensitivity (PATE 2018; a private estimate, not a bound), and
	// EstimateSeeded says its noise came from the experiment's seed instead
	// of a cryptographic source, so the published value is not private.
	// EpsilonDataDependent and EpsilonReleaseNoiseSD, the unperturbed
	// data-dependent ε and the release's noise, are statistics of the raw
	// votes: they are read from reports written before such statistics
	// were kept out of them, and Redact clears them.
	EstimateSmoothSensitivity float64 `json:"estimate_smooth_sensitivity,omitempty"`
	EstimateSeeded            bool    `json:"estimate_seeded,omitempty"`
	EpsilonDataDependent      float64 `json:"epsilon_data_dependent,omitempty"`
	EpsilonReleaseNoiseSD     float64 `json:"epsilon_release_noise_sd,omitempty"`
	// Noise names where a private row's release noise came from:
	// "crypto/rand", as a deployment draws it, or "seeded:N", from the
	// experiment's seed N (reproducible, for tests and regression; such a
	// release is not private). Empty for rows that are not releases.
	Noise string `json:"noise,omitempty"`
	// Draws are the row's independent releases (Config.Draws), each with
	// its own noise and its own student. For a row with draws, Answered,
	// LabelAccuracy and StudentAccuracy are their means (Answered rounded)
	// and the estimates are the first draw's.
	Draws                []Draw  `json:"draws,omitempty"`
	StudentAccuracyMean  float64 `json:"student_accuracy_mean,omitempty"`
	StudentAccuracyStd   float64 `json:"student_accuracy_std,omitempty"`
	StudentAccuracyWorst float64 `json:"student_accuracy_worst,omitempty"`
	// fallback is how many of a planned row's answers (Config.Plan) came
	// from GNMax after its session ended, while it is drawn.
	fallback int
}

// Draw is one independent release of a row: what it answered, its labels'
// and its student's accuracy, and its proven ε (the worst case over the
// row's planned queries, as the ledger would charge it).
type Draw struct {
	Answered int `json:"answered"`
	// Fallback is how many of a planned row's answers came from GNMax
	// after its session ended (Config.Plan).
	Fallback        int     `json:"fallback,omitempty"`
	LabelAccuracy   float64 `json:"label_accuracy"`
	StudentAccuracy float64 `json:"student_accuracy"`
	// Epsilon is +Inf ("inf" in JSON) when unbounded.
	Epsilon jsonnum.Float `json:"epsilon"`
}

// summarize sets the row's figures from its draws.
func (r *Row) summarize() {
	n := float64(len(r.Draws))
	if n == 0 {
		return
	}
	var answered, label, acc float64
	worst := math.Inf(1)
	for _, d := range r.Draws {
		answered += float64(d.Answered)
		label += d.LabelAccuracy
		acc += d.StudentAccuracy
		worst = min(worst, d.StudentAccuracy)
	}
	mean := acc / n
	var ss float64
	for _, d := range r.Draws {
		ss += (d.StudentAccuracy - mean) * (d.StudentAccuracy - mean)
	}
	r.Answered, r.LabelAccuracy, r.StudentAccuracy = int(math.Round(answered/n)), label/n, mean
	r.StudentAccuracyMean, r.StudentAccuracyWorst = mean, worst
	if len(r.Draws) > 1 {
		r.StudentAccuracyStd = math.Sqrt(ss / (n - 1))
	}
}

// Ensemble summarises one ensemble size. A release ensemble (TableRows)
// reports only its teachers' mean accuracy on the student's examples; the
// statistics of raw votes are diagnostics of tuning ensembles only
// (TuningReport.Diagnostics), evaluated on the tuning pool.
type Ensemble struct {
	Teachers                int     `json:"teachers"`
	Model                   string  `json:"model,omitempty"`
	TeacherMeanAccuracy     float64 `json:"teacher_mean_accuracy"`
	CleanVotesLabelAccuracy float64 `json:"clean_votes_label_accuracy,omitempty"`
	// GapCounts[g] is the number of queries whose top-two vote gap is g
	// (for the gap plot).
	GapCounts []int `json:"gap_counts,omitempty"`
	// TableRows says whether this ensemble has rows in the table.
	TableRows bool `json:"table_rows"`
}

// Report is the outcome of an experiment. The top-level teacher fields
// describe the primary ensemble (Config.Teachers[0]).
type Report struct {
	Dataset             string  `json:"dataset"`
	Teachers            int     `json:"teachers"`
	Rows                []Row   `json:"rows"`
	TeacherMeanAccuracy float64 `json:"teacher_mean_accuracy"`
	// CleanVotesLabelAccuracy is read from reports written before the
	// release ensemble's votes were kept out of them; Redact clears it.
	CleanVotesLabelAccuracy float64    `json:"clean_votes_label_accuracy,omitempty"`
	Ensembles               []Ensemble `json:"ensembles"`
	// Plan is the planned rows' cap and session, when there are any.
	Plan *PlanConfig `json:"plan,omitempty"`
	// Tuning is the tuning share, its ensemble's diagnostics and every
	// setting's provenance (nil without a tuning share).
	Tuning       *TuningReport `json:"tuning,omitempty"`
	TeacherModel string        `json:"teacher_model"`
	// TeacherTrain is how the compared ensembles' teachers are trained
	// (absent from reports written before it was recorded).
	TeacherTrain *model.TrainConfig `json:"teacher_train,omitempty"`
	StudentModel string             `json:"student_model"`
	HeldOut      int                `json:"held_out"`
	Seed         uint64             `json:"seed"`
	// Noise is where the releases' noise came from (Row.Noise), and Draws
	// how many independent releases each private row has.
	Noise string `json:"noise,omitempty"`
	Draws int    `json:"draws,omitempty"`
	// BaselineDraws is how many releases each row that is not a session's
	// made, when fewer or more than Draws.
	BaselineDraws int `json:"baseline_draws,omitempty"`
	// StudentTrain is how every student is trained on its labels (absent
	// from reports written before it was recorded).
	StudentTrain        *model.TrainConfig    `json:"student_train,omitempty"`
	StudentSelfTraining ensemble.SelfTraining `json:"student_self_training"`
	// StudentConsistency is the consistency training of every student,
	// when on (it replaces self-training).
	StudentConsistency *model.Consistency `json:"student_consistency,omitempty"`
	// StudentViews are the copies of each held-out image every student's
	// prediction is averaged over, when there are any.
	StudentViews *model.Views `json:"student_views,omitempty"`
	// Selection is the query order of the rows that do not name another.
	Selection selection.Config `json:"selection"`
	// BootstrapConfident is how the bootstrapped session's students rank
	// the pool, when there is such a row.
	BootstrapConfident *selection.ConfidentConfig `json:"bootstrap_confident,omitempty"`
	// BootstrapEpochs is the consistency passes of those students, when
	// they differ from StudentConsistency's.
	BootstrapEpochs int `json:"bootstrap_epochs,omitempty"`
	// BootstrapLabelledEpochs is their passes over their labels, when
	// they differ from StudentTrain's.
	BootstrapLabelledEpochs int `json:"bootstrap_labelled_epochs,omitempty"`
	// BootstrapStudents is how many of those students rank the pool
	// together at each round, when more than one.
	BootstrapStudents int `json:"bootstrap_students,omitempty"`
	// BootstrapModel is those students' network, when it is not the
	// student's.
	BootstrapModel string  `json:"bootstrap_model,omitempty"`
	WallSeconds    float64 `json:"wall_seconds"`
	// CPUSeconds is the process's CPU time (user + system), when the caller
	// measured it: on a shared machine it says more than the wall time.
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
}

// source returns a deterministic noise source for one release.
func source(seed uint64, what string) mechanism.Source {
	h := sha256.New()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	h.Write([]byte(what))
	var key [32]byte
	copy(key[:], h.Sum(nil))
	return rand.NewChaCha8(key)
}

// noise returns the source of draw d of the release named stream: the
// experiment's seed when SeededNoise (draw 0 is the stream itself, so a
// seeded run of one draw repeats earlier seeded runs), else crypto/rand.
func (c *Config) noise(stream string, d int) mechanism.Source {
	if !c.SeededNoise {
		return cryptorand.Reader
	}
	if d > 0 {
		stream += fmt.Sprintf("/draw/%d", d)
	}
	return source(c.Seed, stream)
}

// noiseName is Row.Noise for this configuration.
func (c *Config) noiseName() string {
	if c.SeededNoise {
		return fmt.Sprintf("seeded:%d", c.Seed)
	}
	return "crypto/rand"
}

// Run runs the experiment. now is the clock for progress and wall time.
func Run(ctx context.Context, cfg Config, now func() time.Time) (*Report, error) {
	if now == nil {
		now = time.Now
	}
	start := now()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	train, tuneTrain, tunePool := cfg.shares()
	classes := max(train.Classes, cfg.Data.Test.Classes)
	test := cfg.Data.Test
	nq := test.Len() - cfg.Holdout
	queries := test.Slice(0, nq)
	holdout := test.Slice(nq, test.Len())
	maxQ := slices.Max(cfg.Queries)
	counts := slices.Sorted(slices.Values(cfg.Queries))
	counts = slices.Compact(counts)
	tSpec, _ := model.Preset(cfg.TeacherModel, train.Shape, classes)
	sSpec, _ := model.Preset(cfg.StudentModel, train.Shape, classes)
	teacherTrain, studentTrain := cfg.TeacherTrain, cfg.StudentTrain
	rep := &Report{Dataset: cfg.Dataset, Teachers: cfg.Teachers[0], TeacherModel: tSpec.String(), StudentModel: sSpec.String(), HeldOut: cfg.Holdout, Seed: cfg.Seed,
		Noise: cfg.noiseName(), Draws: cfg.Draws,
		TeacherTrain: &teacherTrain, StudentTrain: &studentTrain, StudentSelfTraining: cfg.SelfTraining, Selection: cfg.Selection}
	if b := cfg.baselineDraws(); b != cfg.Draws {
		rep.BaselineDraws = b
	}
	if cfg.Consistency.Enabled() {
		cc := cfg.Consistency
		rep.StudentConsistency = &cc
		rep.StudentSelfTraining = ensemble.SelfTraining{}
	}
	if v := cfg.StudentViews; v != (model.Views{}) {
		rep.StudentViews = &v
	}
	orders, err := queryOrders(ctx, cfg, queries, log)
	if err != nil {
		return nil, err
	}
	primary := orders[cfg.Selection.Strategy]

	bSpec := sSpec
	if cfg.BootstrapModel != "" {
		bSpec, _ = model.Preset(cfg.BootstrapModel, train.Shape, classes)
	}
	st := &students{cfg: cfg, spec: sSpec, bootSpec: bSpec, queries: queries, holdout: holdout, now: now, log: log}

	if tuneTrain != nil {
		tr, err := tuningDiagnostics(ctx, cfg, tSpec, tuneTrain, tunePool, classes, now, log)
		if err != nil {
			return nil, err
		}
		rep.Tuning = tr
	}
	for _, k := range cfg.Teachers {
		preds, err := teacherPredictions(ctx, cfg, train, test, tSpec, cfg.TeacherTrain, k, classes, now, log)
		if err != nil {
			return nil, err
		}
		// The teachers' votes are read by the mechanisms only.
		ens := Ensemble{Teachers: k, Model: tSpec.String(), TableRows: true}
		for _, p := range preds {
			a, _ := metrics.Accuracy(p, test.Y)
			ens.TeacherMeanAccuracy += a / float64(len(preds))
		}
		qpreds := make([][]int, len(preds))
		for t, p := range preds {
			qpreds[t] = p[:nq]
		}
		hist, err := ensemble.Histograms(qpreds, nq, classes)
		if err != nil {
			return nil, err
		}
		log.Info("ensemble", "teachers", k, "teacher_mean_accuracy", ens.TeacherMeanAccuracy)
		rep.Ensembles = append(rep.Ensembles, ens)
		if k == cfg.Teachers[0] {
			rep.TeacherMeanAccuracy = ens.TeacherMeanAccuracy
		}
		runs := plannedRuns(cfg, k, counts)
		if k == cfg.Teachers[0] && cfg.Bootstrap > 0 {
			if err := st.bootstrapRows(ctx, rep, k, classes, hist, primary[:maxQ]); err != nil {
				return nil, err
			}
		}
		for _, ru := range runs {
			if err := st.releaseRow(rep, ru.agg, ru.strat, k, classes, hist, orders[ru.strat][:ru.n]); err != nil {
				return nil, err
			}
		}
	}
	first := primary[:maxQ]
	truth := make([]int, maxQ)
	for j, q := range first {
		truth[j] = queries.Y[q]
	}
	gt := Row{Aggregator: GroundTruth, Params: "true labels", Selection: string(cfg.Selection.Strategy), Queries: maxQ, Answered: maxQ, LabelAccuracy: 1,
		Epsilon: math.Inf(1), EpsilonSource: notPrivate}
	st.add(slot{row: len(rep.Rows), draw: -1}, "ground truth", scatter(nq, first, truth))
	rep.Rows = append(rep.Rows, gt)
	if err := st.trainAll(ctx, rep.Rows); err != nil {
		return nil, err
	}
	for i := range rep.Rows {
		rep.Rows[i].summarize()
	}
	for _, r := range rep.Rows {
		log.Info("row", "aggregator", r.Aggregator, "teachers", r.Teachers, "queries", r.Queries, "answered", r.Answered,
			"label_accuracy", r.LabelAccuracy, "student_accuracy", r.StudentAccuracy, "epsilon", r.Epsilon)
	}
	rep.WallSeconds = now().Sub(start).Seconds()
	return rep, nil
}

// queryOrders returns the orders in which the student asks: the primary
// one and the compared ones, all from the student's own examples only.
func queryOrders(ctx context.Context, cfg Config, queries *data.Dataset, log *slog.Logger) (map[selection.Strategy][]int, error) {
	orders := map[selection.Strategy][]int{}
	for _, strat := range append([]selection.Strategy{cfg.Selection.Strategy}, cfg.CompareSelections...) {
		if _, ok := orders[strat]; ok {
			continue
		}
		sc := cfg.Selection
		sc.Strategy = strat
		o, err := selection.Order(ctx, sc, queries)
		if err != nil {
			return nil, fmt.Errorf("query selection: %w", err)
		}
		orders[strat] = o
		log.Info("queries ordered", "selection", strat)
	}
	return orders, nil
}

// run is one release of an ensemble's votes: an aggregator asked n
// queries in a selection order.
type run struct {
	agg   string
	strat selection.Strategy
	n     int
}

// plannedRuns lists the releases of the ensemble of k teachers: every
// aggregator at the largest query count (counts, sorted), the swept ones at
// every count, and the compared ones in the compared orders too (the last
// two for the first ensemble only); the other ensembles run only the
// SecondaryAggregators, when they are set.
func plannedRuns(cfg Config, k int, counts []int) []run {
	maxQ := counts[len(counts)-1]
	var runs []run
	for _, agg := range cfg.Aggregators {
		if k != cfg.Teachers[0] && cfg.SecondaryAggregators != nil && !slices.Contains(cfg.SecondaryAggregators, agg) {
			continue
		}
		for _, n := range counts {
			if n != maxQ && (k != cfg.Teachers[0] || !slices.Contains(cfg.SweepAggregators, agg)) {
				continue
			}
			runs = append(runs, run{agg, cfg.Selection.Strategy, n})
		}
		if k != cfg.Teachers[0] || !slices.Contains(cfg.CompareAggregators, agg) {
			continue
		}
		for _, strat := range cfg.CompareSelections {
			if strat != cfg.Selection.Strategy {
				runs = append(runs, run{agg, strat, maxQ})
			}
		}
	}
	return runs
}

// tuningDiagnostics trains (or loads) the tuning ensemble and the
// plot-only ensembles (SweepTeachers) on the tuning share and reports the
// statistics of their votes on the tuning pool.
func tuningDiagnostics(ctx context.Context, cfg Config, tSpec model.Spec, tuneTrain, tunePool *data.Dataset, classes int, now func() time.Time, log *slog.Logger) (*TuningReport, error) {
	n := cfg.Data.Train.Len()
	tr := &TuningReport{TrainExamples: [2]int{n - cfg.Tuning.Train, n - cfg.Tuning.Pool}, PoolExamples: [2]int{n - cfg.Tuning.Pool, n},
		Teachers: cfg.tuningTeachers(), Disjoint: disjointText, Settings: cfg.Provenance}
	sizes := []int{cfg.tuningTeachers()}
	for _, k := range cfg.SweepTeachers {
		if !slices.Contains(sizes, k) {
			sizes = append(sizes, k)
		}
	}
	for i, k := range sizes {
		spec, tc := tSpec, cfg.TeacherTrain
		if i > 0 && cfg.SweepTeacherModel != "" {
			spec, _ = model.Preset(cfg.SweepTeacherModel, tuneTrain.Shape, classes)
			tc = cfg.SweepTeacherTrain
		}
		preds, err := teacherPredictions(ctx, cfg, tuneTrain, tunePool, spec, tc, k, classes, now, log)
		if err != nil {
			return nil, fmt.Errorf("tuning ensemble of %d: %w", k, err)
		}
		ens := Ensemble{Teachers: k, Model: spec.String()}
		for _, p := range preds {
			a, _ := metrics.Accuracy(p, tunePool.Y)
			ens.TeacherMeanAccuracy += a / float64(len(preds))
		}
		hist, err := ensemble.Histograms(preds, tunePool.Len(), classes)
		if err != nil {
			return nil, err
		}
		ens.CleanVotesLabelAccuracy, _ = metrics.Accuracy(ensemble.Plurality(hist), tunePool.Y)
		ens.GapCounts = make([]int, k+1)
		for _, g := range ensemble.TopTwoGap(hist) {
			ens.GapCounts[g]++
		}
		log.Info("tuning ensemble", "teachers", k, "teacher_mean_accuracy", ens.TeacherMeanAccuracy, "clean_votes_label_accuracy", ens.CleanVotesLabelAccuracy)
		tr.Diagnostics = append(tr.Diagnostics, ens)
	}
	return tr, nil
}

// teacherPredictions trains (or loads) the ensemble of k teachers on
// train and returns every teacher's prediction for every example of eval
// (for the release ensembles, the student's examples: the queries for the
// votes, all of them for the single-teacher accuracy). With a cache
// directory the predictions themselves are cached, keyed by everything
// that determines them, so a later run with the same teachers and data
// neither loads nor runs the networks.
func teacherPredictions(ctx context.Context, cfg Config, train, test *data.Dataset, spec model.Spec, tc model.TrainConfig, k, classes int, now func() time.Time, log *slog.Logger) ([][]int, error) {
	seed := cfg.Seed ^ uint64(k)<<32
	var path string
	if cfg.CacheDir != "" {
		path = votesKey{Format: votesFormat, Model: model.FormatVersion, Train: train.Hash(), Test: test.Hash(),
			Spec: spec, Training: tc, Seed: seed, Teachers: k}.path(cfg.CacheDir)
		if p := loadVotes(path, classes, k, test.Len()); p != nil {
			log.Info("teacher votes loaded from cache", "teachers", k, "model", spec.String())
			return p, nil
		}
	}
	log.Info("training teachers", "teachers", k, "model", spec.String())
	parts, err := data.Partition(train.Len(), []int{k}, cfg.Seed)
	if err != nil {
		return nil, err
	}
	teachers, err := ensemble.TrainTeachers(ctx, ensemble.Config{
		Spec: spec, Train: tc, Seed: seed,
		CacheDir: cfg.CacheDir, Progress: cfg.Progress, Clock: now, Logger: log,
	}, train, parts[0])
	if err != nil {
		return nil, err
	}
	preds, err := ensemble.Predictions(ctx, teachers, test.X)
	if err != nil {
		return nil, err
	}
	if path != "" {
		if err := saveVotes(path, preds); err != nil {
			return nil, err
		}
	}
	return preds, nil
}

// scatter returns n labels, labels[j] at order[j] and metrics.Refused
// elsewhere.
func scatter(n int, order, labels []int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = metrics.Refused
	}
	for j, q := range order {
		out[q] = labels[j]
	}
	return out
}

// labelAccuracy is the accuracy of labels[j] as the label of example
// order[j] (truth indexed by example).
func labelAccuracy(labels, order, truth []int) float64 {
	t := make([]int, len(order))
	for j, q := range order {
		t[j] = truth[q]
	}
	a, _ := metrics.Accuracy(labels, t)
	return a
}

// release answers the histograms with one aggregator, as draw d
// (Config.noise), and accounts for it. The first draw also publishes the
// smooth-sensitivity estimate of a data-dependent aggregator's ε.
func release(cfg Config, agg string, k, classes int, strat selection.Strategy, hs []mechanism.Histogram, d int) (Row, []int, error) {
	p := ParamsFor(cfg.Mechanisms[agg], k, classes)
	row := Row{Aggregator: agg, Params: p.String(), Teachers: k, Queries: len(hs), Noise: cfg.noiseName()}
	m, err := mechanism.New(p)
	if err != nil {
		return row, nil, err
	}
	stream := fmt.Sprintf("answer/%s/%d/%d", agg, k, len(hs))
	if strat != selection.Sequential {
		stream += "/" + string(strat)
	}
	res, err := mechanism.AnswerBatch(m, cfg.noise(stream, d), hs)
	if err != nil {
		return row, nil, err
	}
	labels := make([]int, len(hs))
	for q, o := range res.Outcomes {
		labels[q] = o.Label
		if o.Refused {
			labels[q] = metrics.Refused
		}
	}
	row.Answered = res.Answered
	if err := account(cfg, p, &row, len(hs)); err != nil {
		return row, nil, err
	}
	if p.Mechanism == mechanism.NZC {
		zero := 0.0
		row.EpsilonClaimed = &zero
	}
	if d == 0 && (p.Mechanism == mechanism.GNMax || p.Mechanism == mechanism.ConfidentGNMax) {
		var src mechanism.Source = cryptorand.Reader
		if cfg.SeededEstimates {
			src = source(cfg.Seed, "ss/"+stream)
		}
		rel, err := mechanism.ReleaseSmoothSensitivity(src, p, hs,
			mechanism.SmoothSensitivityParams{Order: cfg.SSOrder, Sigma: cfg.SSSigma}, cfg.Delta)
		if err != nil {
			return row, nil, fmt.Errorf("smooth-sensitivity release: %w", err)
		}
		row.EstimateSmoothSensitivity, row.EstimateSeeded = rel.Epsilon, cfg.SeededEstimates
	}
	return row, labels, nil
}

// account sets the row's proven ε: the worst case over its planned
// queries (worstCharge), never the cost of the answers it happened to give.
// How many queries a data-dependent mechanism answers depends on the votes,
// so a figure computed from the realized count would itself leak them.
func account(cfg Config, p mechanism.Params, row *Row, planned int) error {
	ch, err := worstCharge(p, mechanism.DefaultGrid(), planned)
	if err != nil {
		return err
	}
	if row.Epsilon, err = provenEpsilon(ch, cfg.Delta); err != nil {
		return err
	}
	row.Delta, row.EpsilonSource = cfg.Delta, proven
	return nil
}

// worstCharge is the largest cost p's mechanism can be charged for n
// queries, whatever the votes: each query charged the larger of its
// answered and refused costs at every order (a charge is linear in the
// counts, so no split of n into answers and refusals costs more), and an
// nzc-svt session its fixed cost.
func worstCharge(p mechanism.Params, g mechanism.Grid, n int) (mechanism.Charge, error) {
	if p.Mechanism.Sessions() {
		return p.Charge(g, 0, 0)
	}
	qc, err := p.QueryCost(g)
	if err != nil {
		return mechanism.Charge{}, err
	}
	a, r := qc.Answered.Values(), qc.Refused.Values()
	for i := range a {
		a[i] = max(a[i], r[i])
	}
	worst, err := g.CurveOf(a)
	if err != nil {
		return mechanism.Charge{}, err
	}
	pure := max(qc.PureAnswered, qc.PureRefused)
	return mechanism.QueryCost{Answered: worst, Refused: worst, PureAnswered: pure, PureRefused: pure}.Charge(n, 0)
}

// releaseRow adds to rep the row of aggregator agg answering the queries
// order (asked in the order strat), with the ensemble of k teachers whose
// votes are hist, drawn Config.BaselineDraws times.
func (s *students) releaseRow(rep *Report, agg string, strat selection.Strategy, k, classes int, hist [][]int, order []int) error {
	n := len(order)
	hs := make([]mechanism.Histogram, n)
	truth := make([]int, n)
	for j, q := range order {
		hs[j], truth[j] = mechanism.Histogram(hist[q]), s.queries.Y[q]
	}
	row, err := s.drawnN(s.cfg.baselineDraws(), len(rep.Rows), fmt.Sprintf("%s k=%d q=%d %s", agg, k, n, strat), func(d int) (Row, []int, error) {
		row, labels, err := release(s.cfg, agg, k, classes, strat, hs, d)
		if err != nil {
			return row, nil, fmt.Errorf("%s with %d teachers, %d queries (%s): %w", agg, k, n, strat, err)
		}
		row.Selection = string(strat)
		row.LabelAccuracy, _ = metrics.Accuracy(labels, truth)
		s.log.Info("released", "aggregator", agg, "selection", strat, "teachers", k, "draw", d+1, "queries", n, "answered", row.Answered, "label_accuracy", row.LabelAccuracy, "epsilon", row.Epsilon)
		return row, scatter(s.queries.Len(), order, labels), nil
	})
	if err != nil {
		return err
	}
	rep.Rows = append(rep.Rows, row)
	return nil
}

// bootstrapRows adds to rep, for every session-keeping aggregator, the
// bootstrapped rows of the ensemble of k teachers (Config.Bootstrap): one
// session with the aggregator's parameters and one per SessionEpsilons,
// each drawn Config.Draws times, asking among pool.
func (s *students) bootstrapRows(ctx context.Context, rep *Report, k, classes int, hist [][]int, pool []int) error {
	cfg := s.cfg
	for _, agg := range cfg.Aggregators {
		if !cfg.Mechanisms[agg].Mechanism.Sessions() {
			continue
		}
		cc := cfg.Confident
		rep.BootstrapConfident, rep.BootstrapEpochs, rep.BootstrapLabelledEpochs = &cc, cfg.BootstrapEpochs, cfg.BootstrapLabelledEpochs
		if cfg.BootstrapStudents > 1 {
			rep.BootstrapStudents = cfg.BootstrapStudents
		}
		if cfg.BootstrapModel != "" {
			rep.BootstrapModel = s.bootSpec.String()
		}
		stream := fmt.Sprintf("answer/%s/%d/%d/bootstrap/%s/%d", agg, k, len(pool), cfg.Selection.Strategy, cfg.Bootstrap)
		sessions := []session{{ParamsFor(cfg.Mechanisms[agg], k, classes), stream}}
		for _, e := range cfg.SessionEpsilons {
			p, err := cfg.sessionParams(cfg.Mechanisms[agg].Mechanism, e, k, classes)
			if err != nil {
				return fmt.Errorf("%s with %d teachers, a session of ε %v: %w", agg, k, e, err)
			}
			name := fmt.Sprintf("%s/epsilon/%v", stream, e)
			if p.MaxRefusals != mechanism.PresetSessionRefusals {
				name += fmt.Sprintf("/refusals/%d", p.MaxRefusals)
			}
			sessions = append(sessions, session{p, name})
		}
		for _, sess := range sessions {
			row, err := s.drawn(len(rep.Rows), fmt.Sprintf("%s k=%d %s bootstrapped", agg, k, sess.p), func(d int) (Row, []int, error) {
				row, full, asked, err := s.bootstrap(ctx, agg, sess.p, cfg.noise(sess.stream, d), k, classes, hist, pool)
				if err != nil {
					return row, nil, fmt.Errorf("%s with %d teachers, bootstrapped (%s): %w", agg, k, sess.p, err)
				}
				s.keepSession(sessionKey{agg, k, sess.p, d}, row, full, asked)
				s.log.Info("released", "aggregator", agg, "params", row.Params, "selection", row.Selection, "teachers", k, "draw", d+1, "queries", row.Queries, "answered", row.Answered, "label_accuracy", row.LabelAccuracy, "epsilon", row.Epsilon)
				return row, full, nil
			})
			if err != nil {
				return err
			}
			rep.Rows = append(rep.Rows, row)
		}
	}
	if cfg.Plan.Cap > 0 {
		pc := cfg.Plan
		rep.Plan = &pc
		return s.plannedRows(ctx, rep, k, classes, hist, pool)
	}
	return nil
}

// sessionKey names one draw of a bootstrapped session: its aggregator,
// ensemble, parameters and draw.
type sessionKey struct {
	agg  string
	k    int
	p    mechanism.Params
	draw int
}

// sessionDraw is what one draw of a bootstrapped session released: its
// row, labels and asked queries (students.bootstrap).
type sessionDraw struct {
	row   Row
	full  []int
	asked []bool
}

// keepSession keeps a bootstrapped session's draw for a planned row whose
// session has the same parameters (plannedRows): it continues that release
// instead of making another.
func (s *students) keepSession(key sessionKey, row Row, full []int, asked []bool) {
	if s.sessions == nil {
		s.sessions = map[sessionKey]sessionDraw{}
	}
	s.sessions[key] = sessionDraw{row, slices.Clone(full), slices.Clone(asked)}
}

// session is one bootstrapped nzc-svt session: its parameters and the name
// of the stream its noise is drawn from.
type session struct {
	p      mechanism.Params
	stream string
}

// bootstrap runs one session of the session-keeping aggregator agg, with
// parameters p and its noise drawn from src, in several orders
// (Config.Bootstrap, BootstrapRounds, Confident): first, the
// first queries of the pool in order until Bootstrap are answered; then a
// student trained on those labels picks among the rest of pool
// (selection.Confident) until the answers have doubled, and a student
// retrained on them picks again, BootstrapRounds times; the last student's
// order runs until the session ends. It returns the row, the released
// labels, one per query (metrics.Refused elsewhere), and which queries
// count as asked (every one outside pool, and those the session asked).
func (s *students) bootstrap(ctx context.Context, agg string, p mechanism.Params, src mechanism.Source, k, classes int, hist [][]int, pool []int) (Row, []int, []bool, error) {
	cfg := s.cfg
	strat := fmt.Sprintf("%s, then confident after %d", cfg.Selection.Strategy, cfg.Bootstrap)
	if cfg.BootstrapRounds > 0 {
		strat = fmt.Sprintf("%s, then confident after %d, retrained %d times as the answers doubled", cfg.Selection.Strategy, cfg.Bootstrap, cfg.BootstrapRounds)
	}
	if cfg.BootstrapStudents > 1 {
		strat += fmt.Sprintf(", %d students judging together", cfg.BootstrapStudents)
	}
	row := Row{Aggregator: agg, Params: p.String(), Selection: strat, Teachers: k, Queries: len(pool), Noise: cfg.noiseName()}
	m, err := mechanism.New(p)
	if err != nil {
		return row, nil, nil, err
	}
	nq := s.queries.Len()
	full := make([]int, nq)
	for i := range full {
		full[i] = metrics.Refused
	}
	// Examples outside pool count as asked: they are never queried.
	asked := make([]bool, nq)
	for i := range asked {
		asked[i] = true
	}
	for _, q := range pool {
		asked[q] = false
	}
	var order, labels []int
	refused := 0
	// ask asks qs in turn until until are answered or the session ends
	// (done).
	ask := func(qs []int, until int) (done bool, err error) {
		for _, q := range qs {
			if row.Answered >= until {
				return false, nil
			}
			o, err := m.Answer(src, mechanism.Histogram(hist[q]))
			if errors.Is(err, mechanism.ErrSessionExhausted) {
				return true, nil
			}
			if err != nil {
				return false, err
			}
			asked[q] = true
			order = append(order, q)
			if o.Refused {
				refused++
				labels = append(labels, metrics.Refused)
				continue
			}
			row.Answered++
			full[q] = o.Label
			labels = append(labels, o.Label)
		}
		return true, nil
	}
	done, err := ask(pool, cfg.Bootstrap)
	if err != nil {
		return row, nil, nil, err
	}
	until := cfg.Bootstrap
	for r := 0; !done && row.Answered > 0; r++ {
		nets, err := s.rankers(ctx, r, full)
		if err != nil {
			return row, nil, nil, err
		}
		next, err := selection.ConfidentEnsemble(ctx, nets, s.queries, asked, cfg.Confident)
		if err != nil {
			return row, nil, nil, err
		}
		until *= 2
		if r >= cfg.BootstrapRounds {
			until = math.MaxInt
		}
		s.log.Info("bootstrap student trained", "aggregator", agg, "round", r+1, "answered", row.Answered, "asking", len(next), "until", until)
		if done, err = ask(next, until); err != nil {
			return row, nil, nil, err
		}
	}
	row.LabelAccuracy = labelAccuracy(labels, order, s.queries.Y)
	perClass := make([]int, classes)
	for _, l := range labels {
		if l >= 0 {
			perClass[l]++
		}
	}
	s.log.Info("bootstrapped session", "aggregator", agg, "params", row.Params, "answered", row.Answered, "labels_per_class", perClass)
	if err := account(cfg, p, &row, len(pool)); err != nil {
		return row, nil, nil, err
	}
	return row, full, asked, nil
}

// rankers trains the students of bootstrap round r (Config.BootstrapStudents,
// side by side: small networks train more efficiently so than one at a
// time across all cores) on the labels released so far. A round whose
// labels an earlier session's round already had reuses its students:
// training is deterministic, so they would be the same networks. Only
// their weights are kept (model.Network.Clone): a network that was trained
// or asked holds buffers many times its size.
func (s *students) rankers(ctx context.Context, r int, full []int) ([]*model.Network, error) {
	key := labelsKey(full)
	if kept, ok := s.boot[key]; ok {
		s.log.Info("bootstrap students shared with an earlier session", "round", r+1)
		nets := make([]*model.Network, len(kept))
		for j, n := range kept {
			nets[j] = n.Clone()
		}
		return nets, nil
	}
	nets := make([]*model.Network, max(1, s.cfg.BootstrapStudents))
	g, gctx := errgroup.WithContext(ctx)
	for j := range nets {
		what := fmt.Sprintf("bootstrap student %d", r+1)
		if len(nets) > 1 {
			what = fmt.Sprintf("bootstrap student %d.%d", r+1, j+1)
		}
		g.Go(func() error {
			var err error
			nets[j], err = s.fit(gctx, s.bootSpec, what, full, true, uint64(j))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if s.boot == nil {
		s.boot = map[[32]byte][]*model.Network{}
	}
	kept := make([]*model.Network, len(nets))
	for j, n := range nets {
		kept[j] = n.Clone()
	}
	s.boot[key] = kept
	return nets, nil
}

// labelsKey identifies a student's labels (one per query).
func labelsKey(full []int) [32]byte {
	h := sha256.New()
	for _, l := range full {
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(int64(l))))
	}
	var key [32]byte
	copy(key[:], h.Sum(nil))
	return key
}

// What a row's ε is.
const (
	proven     = "proven, data-independent"
	notPrivate = "not private"
)

// provenEpsilon is the ε of a charge at total δ = delta, as the ledger's
// gate proves it: the smaller of its pure ε (valid at the charge's own δ)
// and its RDP curve converted with the filter conversion at delta minus the
// charge's own additive δ (a confident-GNMax charge pays for the answers
// its private test let through, so its cost is chosen adaptively; see
// mechanism.Curve.FilterEpsilon). A charge whose own δ reaches delta
// guarantees nothing at that δ: +Inf.
func provenEpsilon(ch mechanism.Charge, delta float64) (float64, error) {
	return budget.Epsilon(ch, delta)
}

// students trains and scores one student per row, after every release is
// known, several at once. Rows whose labels are identical share one
// student: training is deterministic, so a second one would be the same
// network.
type students struct {
	cfg  Config
	spec model.Spec
	// bootSpec is the bootstrapped session's students' network.
	bootSpec model.Spec
	queries  *data.Dataset
	holdout  *data.Dataset
	now      func() time.Time
	log      *slog.Logger
	jobs     []*studentJob
	byKey    map[[32]byte]*studentJob
	// boot are the bootstrap rounds' students by their labels.
	boot map[[32]byte][]*model.Network
	// sessions are the bootstrapped sessions' draws (keepSession).
	sessions map[sessionKey]sessionDraw
	// agreements are the plan's switch signals by the labels they read
	// (halvesAgreement): its students are deterministic, so draws that
	// released the same labels read the same agreement.
	agreements map[[32]byte]float64
}

// studentJob is one student to train and the rows (and draws) it scores.
type studentJob struct {
	what   string
	labels []int // one per query; metrics.Refused where none was released
	rows   []slot
	acc    float64
}

// slot is a row's student, or one of its draws' (draw ≥ 0).
type slot struct{ row, draw int }

// drawn releases the row at index row Config.Draws times, one(d) making
// draw d and the labels it released (one per query, metrics.Refused where
// none was), schedules a student for each draw and returns the first
// draw's row with every draw recorded.
func (s *students) drawn(row int, what string, one func(d int) (Row, []int, error)) (Row, error) {
	return s.drawnN(max(1, s.cfg.Draws), row, what, one)
}

// baselineDraws is how many releases a row that is not a session's makes
// (Config.BaselineDraws).
func (c *Config) baselineDraws() int {
	if c.BaselineDraws > 0 {
		return c.BaselineDraws
	}
	return max(1, c.Draws)
}

// drawnN is drawn with n draws.
func (s *students) drawnN(n, row int, what string, one func(d int) (Row, []int, error)) (Row, error) {
	var first Row
	for d := range n {
		r, full, err := one(d)
		if err != nil {
			return Row{}, err
		}
		if d == 0 {
			first = r
		}
		first.Draws = append(first.Draws, Draw{Answered: r.Answered, Fallback: r.fallback, LabelAccuracy: r.LabelAccuracy, Epsilon: jsonnum.Float(r.Epsilon)})
		s.add(slot{row, d}, fmt.Sprintf("%s draw %d", what, d+1), full)
	}
	return first, nil
}

// add schedules a student trained on labels (one per query;
// metrics.Refused where none was released) for the slot at.
func (s *students) add(at slot, what string, full []int) {
	key := labelsKey(full)
	if s.byKey == nil {
		s.byKey = map[[32]byte]*studentJob{}
	}
	if j, ok := s.byKey[key]; ok {
		s.log.Debug("student shared", "for", what, "with", j.what)
		j.rows = append(j.rows, at)
		return
	}
	j := &studentJob{what: what, labels: full, rows: []slot{at}}
	s.byKey[key] = j
	s.jobs = append(s.jobs, j)
}

// trainAll trains the scheduled students, Config.StudentWorkers at a time,
// and sets the student accuracy of their rows; on an error no row is set.
// Small networks train far more efficiently side by side than one at a
// time across all cores.
func (s *students) trainAll(ctx context.Context, rows []Row) error {
	workers := s.cfg.StudentWorkers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	var (
		mu   sync.Mutex
		done int
	)
	for i, j := range s.jobs {
		g.Go(func() error {
			acc, err := s.train(ctx, fmt.Sprintf("student %d/%d %s", i+1, len(s.jobs), j.what), j.labels)
			if err != nil {
				return fmt.Errorf("student (%s): %w", j.what, err)
			}
			j.acc = acc
			mu.Lock()
			done++
			s.log.Info("student trained", "for", j.what, "student_accuracy", acc, "done", done, "of", len(s.jobs))
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, j := range s.jobs {
		for _, at := range j.rows {
			if at.draw < 0 {
				rows[at.row].StudentAccuracy = j.acc
				continue
			}
			rows[at.row].Draws[at.draw].StudentAccuracy = j.acc
		}
	}
	return nil
}

// train trains one student and scores it on the held-out examples, each
// predicted over its views (Config.StudentViews); a student with no label
// at all scores 0.
func (s *students) train(ctx context.Context, label string, labels []int) (float64, error) {
	n, err := s.fit(ctx, s.spec, label, labels, false, 0)
	if errors.Is(err, ensemble.ErrNoLabels) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return n.AccuracyViews(ctx, s.holdout, s.cfg.StudentViews)
}

// fit trains one student of network spec on labels (one per query,
// metrics.Refused where none was released) and its unlabelled queries, as
// configured: a bootstrap student (boot) with the Bootstrap passes where
// they are set, and with other seeds for a positive variant.
func (s *students) fit(ctx context.Context, spec model.Spec, label string, labels []int, boot bool, variant uint64) (*model.Network, error) {
	// Variant 0 is the experiment's seed; others start from other weights
	// and see the examples in another order.
	seed, tc := s.cfg.Seed+variant, s.cfg.StudentTrain
	tc.Seed += variant
	epochs := 0
	if boot {
		epochs = s.cfg.BootstrapEpochs
		if s.cfg.BootstrapLabelledEpochs > 0 {
			tc.Epochs = s.cfg.BootstrapLabelledEpochs
		}
	}
	bar := progress.New(s.cfg.Progress, s.now)
	defer bar.Done()
	prog := func(done, total int) { bar.Update(label, done, total, "samples") }
	if cc := s.cfg.Consistency; cc.Enabled() {
		if epochs > 0 {
			cc.Epochs = epochs
		}
		n, res, err := ensemble.TrainStudentConsistency(ctx, spec, tc, cc, seed, s.queries, labels, prog)
		if err != nil {
			return nil, err
		}
		s.log.Info("student consistency-trained", "for", label, "released_labels", res.Labelled, "unlabelled", res.Unlabeled, "masked", res.Masked)
		return n, nil
	}
	n, res, err := ensemble.TrainStudentSemi(ctx, spec, tc, s.cfg.SelfTraining, seed, s.queries, labels, prog)
	if err != nil {
		return nil, err
	}
	if res.Pseudo > 0 {
		s.log.Info("student self-trained", "for", label, "released_labels", res.Labelled, "pseudo_labels", res.Pseudo,
			"pseudo_label_accuracy", float64(res.PseudoCorrect)/float64(res.Pseudo))
	}
	return n, nil
}
