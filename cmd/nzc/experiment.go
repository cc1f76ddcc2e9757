package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/experiment"
	"github.com/nzcfed/nzc/internal/cputime"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/model"
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
holding the four standard idx files works. --dataset mnist-hard makes the
project's harder set from those files (every image with a 14×14 square erased
at a place drawn for it and pixel noise of 0.1, the same images every run):
weaker teachers whose errors agree, for tuning settings that must hold on
data harder than MNIST.

Every flag may also be set by its NZC_* variable (--student-learn-rate:
NZC_STUDENT_LEARN_RATE) or a key of the YAML file named by --config, as the
services' settings are; a flag wins over its variable, which wins over the
file.`,
		Example: `  # The paper's MNIST table (250 and 5 teachers, 9,000 queries):
  scripts/fetch-data.sh
  nzc experiment --preset paper-mnist --out out/paper-mnist

  # A fast run of the same pipeline (under two minutes):
  nzc experiment --preset quick --out out/quick

  # The same pipeline on the harder set made from MNIST:
  nzc experiment --preset quick --dataset mnist-hard --out out/quick-hard

  # Re-render the table and plots of an earlier run:
  nzc experiment --from out/paper-mnist/results.json --out out/paper-mnist

  # The same, with a purely supervised student:
  nzc experiment --preset paper-mnist --self-training 0 --out out/paper-mnist-supervised

  # Only the sound aggregators, 100 teachers, two query counts, as JSON:
  nzc experiment --preset quick --teachers 100 --queries 500,2000 \
      --aggregators gnmax,confident-gnmax,nzc-svt --format json`,
		Args: cobra.NoArgs,
	}
	return cli.Formatted(cmd, defaultExperimentOptions(), func(cmd *cobra.Command, f string, o experimentOptions) error {
		if o.From != "" {
			return rerenderExperiment(cmd, f, o)
		}
		cfg, err := o.config(cmd.Flags())
		if err != nil {
			return err
		}
		split, err := data.LoadIDXDir(o.DataDir)
		if err != nil {
			return fmt.Errorf("load the data set: %w", err)
		}
		if split, err = experiment.Derive(o.Dataset, split); err != nil {
			return fmt.Errorf("--dataset: %w", err)
		}
		if n := o.TestExamples; n > 0 {
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
		if err := os.MkdirAll(o.Out, 0o755); err != nil {
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
		if err := writeExperiment(o.Out, rep); err != nil {
			return err
		}
		return cli.Print(cmd.OutOrStdout(), f, rep, rep.WriteText)
	})
}

// rerenderExperiment writes an earlier run's results.json (--from) again
// into --out, at today's proof and without the release ensembles' votes.
func rerenderExperiment(cmd *cobra.Command, f string, o experimentOptions) error {
	b, err := os.ReadFile(o.From)
	if err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	var rep experiment.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("--from %s is not an experiment's results.json: %w", o.From, err)
	}
	if _, err := rep.Reprove(o.Delta); err != nil {
		return fmt.Errorf("--from %s: %w", o.From, err)
	}
	rep.Redact()
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return fmt.Errorf("create --out: %w", err)
	}
	if err := writeExperiment(o.Out, &rep); err != nil {
		return err
	}
	return cli.Print(cmd.OutOrStdout(), f, &rep, rep.WriteText)
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
