package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/experiment"
	"github.com/nzcfed/nzc/internal/cputime"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/ensemble"
	"github.com/nzcfed/nzc/ml/model"
	"github.com/nzcfed/nzc/ml/selection"
)

func newExperimentCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "experiment",
		Short: "Reproduce the paper's table in one process: teachers, votes, every aggregator, students",
		Long: `Run the whole knowledge-transfer pipeline in one process, without a network:
train (or load from the cache) teacher ensembles on disjoint shards of the
training set, compute their vote histograms on the student's queries (the
first examples of the test set; the last --holdout are kept for evaluation),
answer the queries with every aggregation mechanism of the privacy core, train
a student on what each released, and evaluate it. The student is
semi-supervised when the preset (or --self-training) says so: after learning
from the released labels it pseudo-labels its own unlabelled queries and
retrains, the same way for every row; this is post-processing of the
released labels and costs no privacy.

The student asks its queries in an order it chooses from its own examples
(--selection; typical: the examples nearest the centres of clusters of its
own data first, so that nzc-svt's teachers agree on them), which costs no
privacy; every row names its order.

Every private row is --draws independent releases, each drawing its noise
from crypto/rand as a deployment would (--seeded-noise: from --seed, for
tests and regression, labelled "seeded:N"), each with its own student; the
row reports their mean, the worst draw and the spread.

Each row reports the labels' accuracy, the student's accuracy and the privacy
the release costs: the proven, data-independent ε at the total δ (--delta,
a mechanism's own additive δ included; inf when there is no guarantee at that
δ). For gnmax and confident-gnmax, estimates stand beside it, never in its
place: the data-dependent ε published through smooth sensitivity (noise from
a cryptographic source unless --seeded-estimates), and the unperturbed value
computed from the raw votes. The paper's nzc aggregator is charged its true
cost; the ε the paper claimed is shown beside it.

Writes results.json, results.md and three PNG plots into --out, and prints the
table (--format text or json) on standard output. Trained teachers are cached
in --cache-dir, so a second run does not retrain them.

MNIST is read from --data-dir (run scripts/fetch-data.sh first); any directory
holding the four standard idx files works.`,
		Example: `  # The paper's MNIST table (250 and 5 teachers, 9,000 queries):
  scripts/fetch-data.sh
  nzc experiment --preset paper-mnist --out out/paper-mnist

  # A fast run of the same pipeline (under two minutes):
  nzc experiment --preset quick --out out/quick

  # Re-render the table and plots of an earlier run:
  nzc experiment --from out/paper-mnist/results.json --out out/paper-mnist

  # The same, with a purely supervised student:
  nzc experiment --preset paper-mnist --self-training 0 --out out/paper-mnist-supervised

  # Only the sound aggregators, 100 teachers, two query counts, as JSON:
  nzc experiment --preset quick --teachers 100 --queries 500,2000 \
      --aggregators gnmax,confident-gnmax,nzc-svt --format json`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	preset := fs.String("preset", experiment.PresetPaperMNIST, "settings to start from: paper-mnist or quick")
	teachers := fs.String("teachers", "", "comma-separated ensemble sizes with full rows (default: the preset's)")
	queries := fs.String("queries", "", "comma-separated numbers of student queries (default: the preset's)")
	modelName := fs.String("model", "", "teacher model: softmax, mlp, cnn or small-cnn (default: the preset's)")
	studentModel := fs.String("student-model", "", "student model: softmax, mlp, small-mlp, cnn, wide-cnn or small-cnn (default: the preset's)")
	aggregators := fs.String("aggregators", "", "comma-separated aggregators: nzc, lnmax, gnmax, confident-gnmax, nzc-svt (default: all)")
	selfTrain := fs.Int("self-training", -1, "rounds of student self-training on its unlabelled queries, for every row alike (0: off; default: the preset's)")
	consistency := fs.String("consistency", "", "consistency training of every student on its unlabelled queries, in place of self-training: on or off (default: the preset's)")
	selectionName := fs.String("selection", "", "order in which the student asks its queries: typical, balanced, random or sequential (default: the preset's)")
	seededEstimates := fs.Bool("seeded-estimates", false, "draw the smooth-sensitivity estimates' noise from --seed (reproducible, and then not private) instead of a cryptographic source")
	seed := fs.Uint64("seed", 1, "seed of the partition and the models, and with --seeded-noise of the releases' noise")
	seededNoise := fs.Bool("seeded-noise", false, "draw every release's noise from --seed (reproducible, for tests and regression; then no release is private, and results.json says \"seeded:N\") instead of crypto/rand")
	draws := fs.Int("draws", 0, "independent releases of every private row, each with its own noise and student (default: the preset's, 5)")
	dataDir := fs.String("data-dir", "data/mnist", "directory holding the four idx files (gzipped or not)")
	datasetName := fs.String("dataset-name", "", "name of the data set in the report (default: the directory's name)")
	bootstrap := fs.Int("bootstrap", -1, "with nzc-svt, add a row whose session asks in the selection order until this many queries are answered, then in the confidence order of a student trained on them, in the same session (0: no such row; default: the preset's)")
	sessionEps := fs.String("session-epsilons", "", "with --bootstrap, comma-separated pure ε of more bootstrapped nzc-svt rows, each one session planned for the ensemble at that ε (default: the preset's)")
	sessionRefusals := fs.Int("session-refusals", 0, "with --session-epsilons, the refusals each of those sessions allows before it ends (0: the preset's, 1)")
	bootstrapRounds := fs.Int("bootstrap-rounds", -1, "with --bootstrap, retrain the bootstrap student this many more times, each time the answers have doubled (default: the preset's)")
	bootstrapStudents := fs.Int("bootstrap-students", 0, "with --bootstrap, this many students trained from different seeds rank the pool together at each round, an example as sure as the least sure of them (0: the preset's)")
	consRotate := fs.Float64("consistency-rotate", 0, "with consistency training, the strong view's largest rotation, degrees (default: the preset's)")
	consScale := fs.Float64("consistency-scale", 0, "with consistency training, the strong view's largest relative change of size, 0 to 0.5 (default: the preset's)")
	consCutout := fs.Int("consistency-cutout", 0, "with consistency training, the side of the square the strong view cuts out, pixels (default: the preset's)")
	consEpochs := fs.Int("consistency-epochs", 0, "with consistency training, the passes over the unlabelled queries of every row's student (default: the preset's)")
	studentRate := fs.Float64("student-learn-rate", 0, "the students' Adam step size, decayed along a cosine (default: the preset's)")
	studentEpochs := fs.Int("student-epochs", 0, "the passes over its labels every row's student makes at least (default: the preset's)")
	studentViews := fs.Int("student-views", -1, "predict each held-out image by the mean of a student's probabilities over it and its copies moved this many pixels up, down, left and right, and no other copies (0: the image alone; default: the preset's, which paper-mnist also turns and resizes)")
	studentRotate := fs.Float64("student-rotate", 0, "turn each image a student trains on by up to this many degrees, resized by --student-scale and moved as far as the preset's shift, every time it is used (0: moved only; default: the preset's)")
	studentScale := fs.Float64("student-scale", 0, "with --student-rotate, resize each image by up to 1 ± this (default: the preset's)")
	bootstrapModel := fs.String("bootstrap-model", "", "with --bootstrap, the network of the students that rank the pool: softmax, mlp, small-mlp, cnn, wide-cnn or small-cnn (default: the preset's, else the student's)")
	confRotate := fs.Float64("confident-rotate", 0, "with --bootstrap, a student judges its confidence also on each example turned by ± this many degrees (0: not; default: the preset's)")
	confScale := fs.Float64("confident-scale", 0, "with --bootstrap, a student judges its confidence also on each example resized by 1 ± this (0: not; default: the preset's)")
	confFloor := fs.Float64("confident-floor", 0, "with --bootstrap, examples a student is less sure of than this wait until every surer one was asked (0: none wait; default: the preset's)")
	confSpread := fs.Int("confident-spread", 0, "with --bootstrap, the first this many examples of each class a student asks for are representatives of as many clusters of its sure examples (0: most confident first; default: the preset's)")
	tuningTrain := fs.Int("tuning-train", -1, "the last this many training examples are the tuning share, which no release teacher trains on: its ensemble's vote statistics are the only ones reported, as diagnostics (0: no share, no diagnostics; default: the preset's)")
	tuningPool := fs.Int("tuning-pool", 0, "of the tuning share, the last this many are the tuning ensemble's query pool (default: the preset's)")
	tuningTeachers := fs.Int("tuning-teachers", 0, "the tuning ensemble's size (default: the preset's, else the first of --teachers)")
	holdout := fs.Int("holdout", 0, "student examples kept for evaluation (default: the preset's)")
	testExamples := fs.Int("test-examples", 0, "use only the first this many test examples, as queries and held-out examples (0: all); with --holdout, a tuning split that never reads the last test examples")
	out := fs.String("out", "out/experiment", "directory for results.json, results.md and the plots")
	cacheDir := fs.String("cache-dir", ".nzc-cache/teachers", "directory of trained teachers (empty: no cache)")
	delta := fs.Float64("delta", 1e-5, "δ of every (ε, δ) figure")
	studentWorkers := fs.Int("student-workers", 0, "students trained at once (0: one per core; the results do not depend on it)")
	from := fs.String("from", "", "re-render results.json, results.md and the plots from an earlier results.json into --out, without running; rows with the presets' parameters get their proven ε recomputed by today's conversion, and statistics of the release ensembles' raw votes are removed")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		if *from != "" {
			b, err := os.ReadFile(*from)
			if err != nil {
				return fmt.Errorf("--from: %w", err)
			}
			var rep experiment.Report
			if err := json.Unmarshal(b, &rep); err != nil {
				return fmt.Errorf("--from %s is not an experiment's results.json: %w", *from, err)
			}
			if _, err := rep.Reprove(*delta); err != nil {
				return fmt.Errorf("--from %s: %w", *from, err)
			}
			rep.Redact()
			if err := os.MkdirAll(*out, 0o755); err != nil {
				return fmt.Errorf("create --out: %w", err)
			}
			if err := writeExperiment(*out, &rep); err != nil {
				return err
			}
			return cli.Print(cmd.OutOrStdout(), f, &rep, rep.WriteText)
		}
		cfg, err := experiment.Preset(*preset)
		if err != nil {
			return err
		}
		if *teachers != "" {
			if cfg.Teachers, err = parseInts("--teachers", *teachers); err != nil {
				return err
			}
			cfg.SweepTeachers = nil
		}
		if *queries != "" {
			if cfg.Queries, err = parseInts("--queries", *queries); err != nil {
				return err
			}
		}
		if *modelName != "" {
			cfg.TeacherModel = *modelName
		}
		if *studentModel != "" {
			cfg.StudentModel = *studentModel
		}
		if *aggregators != "" {
			cfg.Aggregators = splitList(*aggregators)
			// Compare orders only for the aggregators that run.
			cfg.CompareAggregators = slices.DeleteFunc(cfg.CompareAggregators, func(a string) bool { return !slices.Contains(cfg.Aggregators, a) })
		}
		if *selfTrain >= 0 {
			cfg.SelfTraining.Rounds = *selfTrain
			if *selfTrain > 0 && cfg.SelfTraining.Confidence == 0 {
				cfg.SelfTraining.Confidence, cfg.SelfTraining.Shift = 0.9, 1
			}
		}
		switch *consistency {
		case "":
		case "on":
			if !cfg.Consistency.Enabled() {
				cfg.Consistency = ensemble.DefaultConsistency()
			}
		case "off":
			cfg.Consistency = model.Consistency{}
		default:
			return fmt.Errorf("--consistency %q: want on or off", *consistency)
		}
		if !cfg.Consistency.Enabled() && (fs.Changed("consistency-rotate") || fs.Changed("consistency-scale") || fs.Changed("consistency-cutout") || fs.Changed("consistency-epochs")) {
			return fmt.Errorf("--consistency-rotate, --consistency-scale, --consistency-cutout and --consistency-epochs set consistency training, which preset %q does not use: add --consistency on", *preset)
		}
		if cfg.Consistency.Enabled() {
			if fs.Changed("consistency-rotate") {
				cfg.Consistency.Strong.Rotate = *consRotate
			}
			if fs.Changed("consistency-scale") {
				cfg.Consistency.Strong.Scale = *consScale
			}
			if fs.Changed("consistency-cutout") {
				cfg.Consistency.Strong.Cutout = *consCutout
			}
			if fs.Changed("consistency-epochs") {
				cfg.Consistency.Epochs = *consEpochs
			}
		}
		if *studentEpochs > 0 {
			cfg.StudentTrain.Epochs = *studentEpochs
		}
		if *studentViews >= 0 {
			cfg.StudentViews = model.Views{Shift: *studentViews}
		}
		if fs.Changed("student-learn-rate") {
			cfg.StudentTrain.LearnRate = *studentRate
		}
		if fs.Changed("student-rotate") || fs.Changed("student-scale") {
			a := cfg.StudentTrain.Augment
			if a == (model.Augment{}) {
				// The preset's moves, now made by the distortion.
				a.Shift = float64(cfg.StudentTrain.Shift)
			}
			if fs.Changed("student-rotate") {
				a.Rotate = *studentRotate
			}
			if fs.Changed("student-scale") {
				a.Scale = *studentScale
			}
			if err := a.Validate(); err != nil {
				return fmt.Errorf("--student-rotate, --student-scale: %w", err)
			}
			cfg.StudentTrain.Shift, cfg.StudentTrain.Augment = 0, a
		}
		if *selectionName != "" {
			cfg.Selection.Strategy = selection.Strategy(*selectionName)
		}
		if *bootstrap >= 0 {
			cfg.Bootstrap = *bootstrap
		}
		if fs.Changed("session-refusals") {
			cfg.SessionRefusals = *sessionRefusals
		}
		if fs.Changed("session-epsilons") {
			var eps []float64
			for _, f := range splitList(*sessionEps) {
				e, err := strconv.ParseFloat(f, 64)
				if err != nil || !(e > 0) || math.IsInf(e, 0) {
					return fmt.Errorf("--session-epsilons: %q is not a positive ε", f)
				}
				eps = append(eps, e)
			}
			cfg.SessionEpsilons = eps
		}
		if *bootstrapStudents > 0 {
			cfg.BootstrapStudents = *bootstrapStudents
		}
		if *bootstrapRounds >= 0 {
			cfg.BootstrapRounds = *bootstrapRounds
		}
		if *bootstrapModel != "" {
			cfg.BootstrapModel = *bootstrapModel
		}
		if fs.Changed("confident-rotate") {
			cfg.Confident.Rotate = *confRotate
		}
		if fs.Changed("confident-scale") {
			cfg.Confident.Scale = *confScale
		}
		if fs.Changed("confident-floor") {
			cfg.Confident.Floor = *confFloor
		}
		if fs.Changed("confident-spread") {
			cfg.Confident.Spread = *confSpread
		}
		cfg.SeededEstimates, cfg.SeededNoise = *seededEstimates, *seededNoise
		if fs.Changed("draws") {
			cfg.Draws = *draws
		}
		if *holdout > 0 {
			cfg.Holdout = *holdout
		}
		if *tuningTrain >= 0 {
			cfg.Tuning.Train = *tuningTrain
		}
		if fs.Changed("tuning-pool") {
			cfg.Tuning.Pool = *tuningPool
		}
		if fs.Changed("tuning-teachers") {
			cfg.Tuning.Teachers = *tuningTeachers
		}
		if cfg.Tuning.Train == 0 {
			cfg.Tuning = experiment.Tuning{}
		}
		cfg.Seed, cfg.Delta, cfg.CacheDir = *seed, *delta, *cacheDir
		cfg.StudentWorkers = *studentWorkers
		cfg.Dataset = filepath.Base(filepath.Clean(*dataDir))
		if *datasetName != "" {
			cfg.Dataset = *datasetName
		}
		if *testExamples < 0 {
			return fmt.Errorf("--test-examples %d: use 0 (all) or more", *testExamples)
		}
		split, err := data.LoadIDXDir(*dataDir)
		if err != nil {
			return fmt.Errorf("load the data set: %w", err)
		}
		if n := *testExamples; n > 0 {
			if n > split.Test.Len() {
				return fmt.Errorf("--test-examples %d: the data set has %d test examples", n, split.Test.Len())
			}
			split.Test = split.Test.Slice(0, n)
		}
		cfg.Data = split
		cfg.Progress = cmd.ErrOrStderr()
		cfg.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
		if err := cfg.Validate(); err != nil {
			return err
		}
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return fmt.Errorf("create --out: %w", err)
		}
		cpu0 := cputime.Seconds()
		rep, err := experiment.Run(cmd.Context(), cfg, nil)
		if err != nil {
			return err
		}
		rep.CPUSeconds = cputime.Seconds() - cpu0
		if rep.Dataset == "mnist" {
			rep.AddPaperClaims()
		}
		if err := writeExperiment(*out, rep); err != nil {
			return err
		}
		return cli.Print(cmd.OutOrStdout(), f, rep, rep.WriteText)
	})
}

// writeExperiment writes results.json, results.md and the plots into dir.
func writeExperiment(dir string, rep *experiment.Report) error {
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := model.WriteFileAtomic(filepath.Join(dir, "results.json"), append(js, '\n')); err != nil {
		return err
	}
	var md strings.Builder
	if err := rep.WriteMarkdown(&md, rep.Dataset == "mnist"); err != nil {
		return err
	}
	plots, err := rep.WritePlots(dir)
	if err != nil {
		return err
	}
	md.WriteString("\n")
	for _, p := range plots {
		fmt.Fprintf(&md, "![%s](%s)\n", strings.TrimSuffix(p, ".png"), p)
	}
	return model.WriteFileAtomic(filepath.Join(dir, "results.md"), []byte(md.String()))
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseInts(flag, s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s: %q is not a positive whole number", flag, f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: empty list", flag)
	}
	return out, nil
}
