package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/experiment"
	"github.com/nzcfed/nzc/ml/ensemble"
	"github.com/nzcfed/nzc/ml/model"
	"github.com/nzcfed/nzc/ml/selection"
)

// experimentOptions are `nzc experiment`'s settings, bound by cli.Load
// from flags (--student-learn-rate), NZC_* variables
// (NZC_STUDENT_LEARN_RATE) and --config. Zero, empty or negative values
// that say "the preset's" leave the preset's setting alone; the others
// override it (see apply).
type experimentOptions struct {
	Preset       string `mapstructure:"preset" help:"settings to start from: paper-mnist or quick"`
	Teachers     string `mapstructure:"teachers" help:"comma-separated ensemble sizes with full rows (default: the preset's)"`
	Queries      string `mapstructure:"queries" help:"comma-separated numbers of student queries (default: the preset's)"`
	Model        string `mapstructure:"model" help:"teacher model: softmax, mlp, cnn or small-cnn (default: the preset's)"`
	StudentModel string `mapstructure:"student-model" help:"student model: softmax, mlp, small-mlp, cnn, wide-cnn or small-cnn (default: the preset's)"`
	Aggregators  string `mapstructure:"aggregators" help:"comma-separated aggregators: nzc, lnmax, gnmax, confident-gnmax, nzc-svt (default: all)"`
	SelfTraining int    `mapstructure:"self-training" help:"rounds of student self-training on its unlabelled queries, for every row alike (0: off; default: the preset's)"`
	Consistency  string `mapstructure:"consistency" help:"consistency training of every student on its unlabelled queries, in place of self-training: on or off (default: the preset's)"`
	Selection    string `mapstructure:"selection" help:"order in which the student asks its queries: typical, balanced, random or sequential (default: the preset's)"`

	SeededEstimates bool   `mapstructure:"seeded-estimates" help:"draw the smooth-sensitivity estimates' noise from --seed (reproducible, and then not private) instead of a cryptographic source"`
	Seed            uint64 `mapstructure:"seed" help:"seed of the partition and the models, and with --seeded-noise of the releases' noise"`
	SeededNoise     bool   `mapstructure:"seeded-noise" help:"draw every release's noise from --seed (reproducible, for tests and regression; then no release is private, and results.json says \"seeded:N\") instead of crypto/rand"`
	Draws           int    `mapstructure:"draws" help:"independent releases of every private row, each with its own noise and student (default: the preset's, 5)"`
	BaselineDraws   int    `mapstructure:"baseline-draws" help:"independent releases of every row that is not a session's (no headline: lnmax, gnmax, confident-gnmax, nzc, unbootstrapped nzc-svt) (0: the preset's; paper-mnist: 1; else as --draws)"`
	DataDir         string `mapstructure:"data-dir" help:"directory holding the four idx files (gzipped or not)"`
	Dataset         string `mapstructure:"dataset" help:"data set made from --data-dir: mnist (the files as they are) or mnist-hard (every image with a quarter erased and pixel noise; see docs/RESULTS.md)"`
	DatasetName     string `mapstructure:"dataset-name" help:"name of the data set in the report (default: the directory's name)"`

	Bootstrap         int     `mapstructure:"bootstrap" help:"with nzc-svt, add a row whose session asks in the selection order until this many queries are answered, then in the confidence order of a student trained on them, in the same session (0: no such row; default: the preset's)"`
	SessionEpsilons   string  `mapstructure:"session-epsilons" help:"with --bootstrap, comma-separated pure ε of more bootstrapped nzc-svt rows, each one session planned for the ensemble at that ε (default: the preset's)"`
	SessionRefusals   int     `mapstructure:"session-refusals" help:"with --session-epsilons, the refusals each of those sessions allows before it ends (0: the preset's, 1)"`
	BootstrapRounds   int     `mapstructure:"bootstrap-rounds" help:"with --bootstrap, retrain the bootstrap student this many more times, each time the answers have doubled (default: the preset's)"`
	BootstrapStudents int     `mapstructure:"bootstrap-students" help:"with --bootstrap, this many students trained from different seeds rank the pool together at each round, an example as sure as the least sure of them (0: the preset's)"`
	BootstrapModel    string  `mapstructure:"bootstrap-model" help:"with --bootstrap, the network of the students that rank the pool: softmax, mlp, small-mlp, cnn, wide-cnn or small-cnn (default: the preset's, else the student's)"`
	ConfidentRotate   float64 `mapstructure:"confident-rotate" help:"with --bootstrap, a student judges its confidence also on each example turned by ± this many degrees (0: not; default: the preset's)"`
	ConfidentScale    float64 `mapstructure:"confident-scale" help:"with --bootstrap, a student judges its confidence also on each example resized by 1 ± this (0: not; default: the preset's)"`
	ConfidentFloor    float64 `mapstructure:"confident-floor" help:"with --bootstrap, examples a student is less sure of than this wait until every surer one was asked (0: none wait; default: the preset's)"`
	ConfidentSpread   int     `mapstructure:"confident-spread" help:"with --bootstrap, the first this many examples of each class a student asks for are representatives of as many clusters of its sure examples (0: most confident first; default: the preset's)"`

	ConsistencyRotate float64 `mapstructure:"consistency-rotate" help:"with consistency training, the strong view's largest rotation, degrees (default: the preset's)"`
	ConsistencyScale  float64 `mapstructure:"consistency-scale" help:"with consistency training, the strong view's largest relative change of size, 0 to 0.5 (default: the preset's)"`
	ConsistencyCutout int     `mapstructure:"consistency-cutout" help:"with consistency training, the side of the square the strong view cuts out, pixels (default: the preset's)"`
	ConsistencyEpochs int     `mapstructure:"consistency-epochs" help:"with consistency training, the passes over the unlabelled queries of every row's student (default: the preset's)"`
	StudentLearnRate  float64 `mapstructure:"student-learn-rate" help:"the students' Adam step size, decayed along a cosine (default: the preset's)"`
	StudentEpochs     int     `mapstructure:"student-epochs" help:"the passes over its labels every row's student makes at least (default: the preset's)"`
	StudentViews      int     `mapstructure:"student-views" help:"predict each held-out image by the mean of a student's probabilities over it and its copies moved this many pixels up, down, left and right, and no other copies (0: the image alone; default: the preset's, which paper-mnist also turns and resizes)"`
	StudentRotate     float64 `mapstructure:"student-rotate" help:"turn each image a student trains on by up to this many degrees, resized by --student-scale and moved as far as the preset's shift, every time it is used (0: moved only; default: the preset's)"`
	StudentScale      float64 `mapstructure:"student-scale" help:"with --student-rotate, resize each image by up to 1 ± this (default: the preset's)"`

	PlanCap            float64 `mapstructure:"plan-cap" help:"with --bootstrap, add a planned row under this cap ε: one session of --plan-session-epsilon, then, when it ends early, GNMax on the queries the student is surest of with the rest of the cap (0: no such row; default: the preset's)"`
	PlanSessionEpsilon float64 `mapstructure:"plan-session-epsilon" help:"with --plan-cap, the pure ε of the planned row's session (default: the preset's)"`
	PlanRefusals       int     `mapstructure:"plan-refusals" help:"with --plan-cap, the refusals the planned row's session allows before it ends (0: the preset's)"`
	PlanAgreement      float64 `mapstructure:"plan-agreement" help:"with --plan-cap, ask GNMax first as many queries as fit beside the session, and open the session only when two students trained on disjoint halves of those labels agree on this share of the rest; else spend the rest on GNMax, as GNMax alone would (0: session first; default: the preset's)"`
	PlanMinAnswers     int     `mapstructure:"plan-min-answers" help:"with --plan-cap, the fewest session answers whose student ranks the GNMax queries; below it GNMax asks in the query order (0: the preset's)"`

	TuningTrain    int `mapstructure:"tuning-train" help:"the last this many training examples are the tuning share, which no release teacher trains on: its ensemble's vote statistics are the only ones reported, as diagnostics (0: no share, no diagnostics; default: the preset's)"`
	TuningPool     int `mapstructure:"tuning-pool" help:"of the tuning share, the last this many are the tuning ensemble's query pool (default: the preset's)"`
	TuningTeachers int `mapstructure:"tuning-teachers" help:"the tuning ensemble's size (default: the preset's, else the first of --teachers)"`

	Holdout        int     `mapstructure:"holdout" help:"student examples kept for evaluation (default: the preset's)"`
	TestExamples   int     `mapstructure:"test-examples" help:"use only the first this many test examples, as queries and held-out examples (0: all); with --holdout, a tuning split that never reads the last test examples"`
	Out            string  `mapstructure:"out" help:"directory for results.json, results.md and the plots"`
	CacheDir       string  `mapstructure:"cache-dir" help:"directory of trained teachers (empty: no cache)"`
	Delta          float64 `mapstructure:"delta" help:"δ of every (ε, δ) figure"`
	StudentWorkers int     `mapstructure:"student-workers" help:"students trained at once (0: one per core; the results do not depend on it)"`
	From           string  `mapstructure:"from" help:"re-render results.json, results.md and the plots from an earlier results.json into --out, without running; rows with the presets' parameters get their proven ε recomputed by today's conversion, and statistics of the release ensembles' raw votes are removed"`
}

// defaultExperimentOptions are the flags' defaults: the preset's settings
// wherever a flag says so.
func defaultExperimentOptions() experimentOptions {
	return experimentOptions{
		Preset: experiment.PresetPaperMNIST, SelfTraining: -1, Seed: 1, DataDir: "data/mnist", Bootstrap: -1, BootstrapRounds: -1,
		StudentViews: -1, TuningTrain: -1, Out: "out/experiment", CacheDir: ".nzc-cache/teachers", Delta: 1e-5,
	}
}

// Validate checks what can be checked before the preset is known: the
// lists parse and the values are in range. experiment.Config.Validate
// checks the rest.
func (o experimentOptions) Validate() error {
	if o.Consistency != "" && o.Consistency != "on" && o.Consistency != "off" {
		return fmt.Errorf("--consistency %q: want on or off", o.Consistency)
	}
	if o.TestExamples < 0 {
		return fmt.Errorf("--test-examples %d: use 0 (all) or more", o.TestExamples)
	}
	if _, err := parseEpsilons(o.SessionEpsilons); err != nil {
		return err
	}
	for flag, list := range map[string]string{"--teachers": o.Teachers, "--queries": o.Queries} {
		if list != "" {
			if _, err := parseInts(flag, list); err != nil {
				return err
			}
		}
	}
	return nil
}

// set reports whether the option named key was given (a flag, or an NZC_*
// variable) or differs from its default: an explicit 0 may mean "none"
// where the preset has a setting.
func set(fs *pflag.FlagSet, key string, differs bool) bool {
	_, env := os.LookupEnv(cli.EnvName(key))
	return differs || fs.Changed(key) || env
}

// config returns the preset the options name with the options applied.
func (o experimentOptions) config(fs *pflag.FlagSet) (experiment.Config, error) {
	cfg, err := experiment.Preset(o.Preset)
	if err != nil {
		return cfg, err
	}
	o.applyData(&cfg)
	o.applyEnsembles(&cfg, fs)
	if err := o.applyStudent(&cfg, fs); err != nil {
		return cfg, err
	}
	o.applyBootstrap(&cfg, fs)
	cfg.SeededEstimates, cfg.SeededNoise = o.SeededEstimates, o.SeededNoise
	if set(fs, "draws", o.Draws != 0) {
		cfg.Draws = o.Draws
	}
	if set(fs, "baseline-draws", o.BaselineDraws != 0) {
		cfg.BaselineDraws = o.BaselineDraws
	}
	cfg.Seed, cfg.Delta, cfg.CacheDir, cfg.StudentWorkers = o.Seed, o.Delta, o.CacheDir, o.StudentWorkers
	return cfg, nil
}

// applyData sets what the run asks and holds out, and the data set's name.
func (o experimentOptions) applyData(cfg *experiment.Config) {
	if o.Queries != "" {
		cfg.Queries, _ = parseInts("--queries", o.Queries)
	}
	if o.Holdout > 0 {
		cfg.Holdout = o.Holdout
	}
	cfg.Dataset = filepath.Base(filepath.Clean(o.DataDir))
	if o.Dataset != "" && o.Dataset != "mnist" {
		cfg.Dataset = o.Dataset
	}
	if o.DatasetName != "" {
		cfg.Dataset = o.DatasetName
	}
}

// applyEnsembles sets the ensembles, the aggregators and the tuning share.
func (o experimentOptions) applyEnsembles(cfg *experiment.Config, fs *pflag.FlagSet) {
	if o.Teachers != "" {
		cfg.Teachers, _ = parseInts("--teachers", o.Teachers)
		cfg.SweepTeachers = nil
	}
	if o.Model != "" {
		cfg.TeacherModel = o.Model
	}
	if o.Aggregators != "" {
		cfg.Aggregators = splitList(o.Aggregators)
		// Compare orders only for the aggregators that run.
		cfg.CompareAggregators = slices.DeleteFunc(cfg.CompareAggregators, func(a string) bool { return !slices.Contains(cfg.Aggregators, a) })
		// The other ensembles run the preset's among them, or all of them.
		cfg.SecondaryAggregators = slices.DeleteFunc(cfg.SecondaryAggregators, func(a string) bool { return !slices.Contains(cfg.Aggregators, a) })
		if len(cfg.SecondaryAggregators) == 0 {
			cfg.SecondaryAggregators = nil
		}
	}
	if o.TuningTrain >= 0 {
		cfg.Tuning.Train = o.TuningTrain
	}
	if set(fs, "tuning-pool", o.TuningPool != 0) {
		cfg.Tuning.Pool = o.TuningPool
	}
	if set(fs, "tuning-teachers", o.TuningTeachers != 0) {
		cfg.Tuning.Teachers = o.TuningTeachers
	}
	if cfg.Tuning.Train == 0 {
		cfg.Tuning = experiment.Tuning{}
	}
}

// applyStudent sets how every student trains and is asked.
func (o experimentOptions) applyStudent(cfg *experiment.Config, fs *pflag.FlagSet) error {
	if o.StudentModel != "" {
		cfg.StudentModel = o.StudentModel
	}
	if o.SelfTraining >= 0 {
		cfg.SelfTraining.Rounds = o.SelfTraining
		if o.SelfTraining > 0 && cfg.SelfTraining.Confidence == 0 {
			cfg.SelfTraining.Confidence, cfg.SelfTraining.Shift = 0.9, 1
		}
	}
	switch o.Consistency {
	case "on":
		if !cfg.Consistency.Enabled() {
			cfg.Consistency = ensemble.DefaultConsistency()
		}
	case "off":
		cfg.Consistency = model.Consistency{}
	}
	if err := o.applyConsistency(cfg, fs); err != nil {
		return err
	}
	if o.StudentEpochs > 0 {
		cfg.StudentTrain.Epochs = o.StudentEpochs
	}
	if o.StudentViews >= 0 {
		cfg.StudentViews = model.Views{Shift: o.StudentViews}
	}
	if set(fs, "student-learn-rate", o.StudentLearnRate != 0) {
		cfg.StudentTrain.LearnRate = o.StudentLearnRate
	}
	rotate, scale := set(fs, "student-rotate", o.StudentRotate != 0), set(fs, "student-scale", o.StudentScale != 0)
	if rotate || scale {
		a := cfg.StudentTrain.Augment
		if a == (model.Augment{}) {
			// The preset's moves, now made by the distortion.
			a.Shift = float64(cfg.StudentTrain.Shift)
		}
		if rotate {
			a.Rotate = o.StudentRotate
		}
		if scale {
			a.Scale = o.StudentScale
		}
		if err := a.Validate(); err != nil {
			return fmt.Errorf("--student-rotate, --student-scale: %w", err)
		}
		cfg.StudentTrain.Shift, cfg.StudentTrain.Augment = 0, a
	}
	if o.Selection != "" {
		cfg.Selection.Strategy = selection.Strategy(o.Selection)
	}
	return nil
}

// applyConsistency sets the consistency training's strong view and passes.
func (o experimentOptions) applyConsistency(cfg *experiment.Config, fs *pflag.FlagSet) error {
	rotate, scale := set(fs, "consistency-rotate", o.ConsistencyRotate != 0), set(fs, "consistency-scale", o.ConsistencyScale != 0)
	cutout, epochs := set(fs, "consistency-cutout", o.ConsistencyCutout != 0), set(fs, "consistency-epochs", o.ConsistencyEpochs != 0)
	if !rotate && !scale && !cutout && !epochs {
		return nil
	}
	if !cfg.Consistency.Enabled() {
		return fmt.Errorf("--consistency-rotate, --consistency-scale, --consistency-cutout and --consistency-epochs set consistency training, which preset %q does not use: add --consistency on", o.Preset)
	}
	if rotate {
		cfg.Consistency.Strong.Rotate = o.ConsistencyRotate
	}
	if scale {
		cfg.Consistency.Strong.Scale = o.ConsistencyScale
	}
	if cutout {
		cfg.Consistency.Strong.Cutout = o.ConsistencyCutout
	}
	if epochs {
		cfg.Consistency.Epochs = o.ConsistencyEpochs
	}
	return nil
}

// applyBootstrap sets the bootstrapped sessions and their ranking.
func (o experimentOptions) applyBootstrap(cfg *experiment.Config, fs *pflag.FlagSet) {
	if o.Bootstrap >= 0 {
		cfg.Bootstrap = o.Bootstrap
	}
	if set(fs, "session-refusals", o.SessionRefusals != 0) {
		cfg.SessionRefusals = o.SessionRefusals
	}
	if set(fs, "session-epsilons", o.SessionEpsilons != "") {
		cfg.SessionEpsilons, _ = parseEpsilons(o.SessionEpsilons)
	}
	if o.BootstrapStudents > 0 {
		cfg.BootstrapStudents = o.BootstrapStudents
	}
	if o.BootstrapRounds >= 0 {
		cfg.BootstrapRounds = o.BootstrapRounds
	}
	if o.BootstrapModel != "" {
		cfg.BootstrapModel = o.BootstrapModel
	}
	if set(fs, "plan-cap", o.PlanCap != 0) {
		cfg.Plan.Cap = o.PlanCap
	}
	if set(fs, "plan-session-epsilon", o.PlanSessionEpsilon != 0) {
		cfg.Plan.SessionEpsilon = o.PlanSessionEpsilon
	}
	if set(fs, "plan-refusals", o.PlanRefusals != 0) {
		cfg.Plan.Refusals = o.PlanRefusals
	}
	if set(fs, "plan-agreement", o.PlanAgreement != 0) {
		cfg.Plan.Agreement = o.PlanAgreement
	}
	if set(fs, "plan-min-answers", o.PlanMinAnswers != 0) {
		cfg.Plan.MinAnswers = o.PlanMinAnswers
	}
	if cfg.Plan.Cap == 0 {
		cfg.Plan = experiment.PlanConfig{}
	}
	if set(fs, "confident-rotate", o.ConfidentRotate != 0) {
		cfg.Confident.Rotate = o.ConfidentRotate
	}
	if set(fs, "confident-scale", o.ConfidentScale != 0) {
		cfg.Confident.Scale = o.ConfidentScale
	}
	if set(fs, "confident-floor", o.ConfidentFloor != 0) {
		cfg.Confident.Floor = o.ConfidentFloor
	}
	if set(fs, "confident-spread", o.ConfidentSpread != 0) {
		cfg.Confident.Spread = o.ConfidentSpread
	}
}

// parseEpsilons parses --session-epsilons.
func parseEpsilons(list string) ([]float64, error) {
	var eps []float64
	for _, f := range splitList(list) {
		e, err := strconv.ParseFloat(f, 64)
		if err != nil || !(e > 0) || math.IsInf(e, 0) {
			return nil, fmt.Errorf("--session-epsilons: %q is not a positive ε", f)
		}
		eps = append(eps, e)
	}
	return eps, nil
}
