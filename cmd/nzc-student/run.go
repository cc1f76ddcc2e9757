package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/cmd/internal/node"
	"github.com/nzcfed/nzc/cmd/internal/sizing"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/config"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/ensemble"
	"github.com/nzcfed/nzc/ml/model"
	"github.com/nzcfed/nzc/ml/progress"
	"github.com/nzcfed/nzc/ml/selection"
	"github.com/nzcfed/nzc/party/student"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// dataFlags select the student's data: a range of an idx directory's
// training or test part, of a folder of images per class, or of a CSV file.
type dataFlags struct {
	path        string
	split       string
	from, count int
}

func addDataFlags(cmd *cobra.Command, count int) *dataFlags {
	d := &dataFlags{}
	cmd.Flags().StringVar(&d.path, "data", "", "a directory of idx files (e.g. data/mnist), a folder of images per class or a CSV file")
	cmd.Flags().StringVar(&d.split, "split", "test", "for an idx directory: the train or test part")
	cmd.Flags().IntVar(&d.from, "from", 0, "first example to use")
	cmd.Flags().IntVar(&d.count, "count", count, "number of examples to use (0: all from --from on)")
	return d
}

func (d *dataFlags) load() (*data.Dataset, error) {
	if d.path == "" {
		return nil, errors.New("give --data: a directory of idx files (scripts/fetch-data.sh puts MNIST in data/mnist), a folder of images per class or a CSV file")
	}
	ds, err := data.Load(d.path, d.split)
	if err != nil {
		return nil, fmt.Errorf("--data %s: %w", d.path, err)
	}
	to := ds.Len()
	if d.count > 0 {
		to = d.from + d.count
	}
	if d.from < 0 || d.from >= ds.Len() || to > ds.Len() {
		return nil, fmt.Errorf("examples %d to %d: the data holds %d", d.from, to, ds.Len())
	}
	return ds.Slice(d.from, to), nil
}

func newClient(cmd *cobra.Command, cfg config.Student, sel selection.Config, opts ...func(*student.Config)) (*student.Client, error) {
	log, netCfg, err := node.Client(cmd.ErrOrStderr(), cfg.ID, cfg.Log, cfg.TLS)
	if err != nil {
		return nil, err
	}
	id, err := crypto.LoadIdentity(cfg.AgeIdentity)
	if err != nil {
		return nil, err
	}
	var hs []*crypto.Recipient
	for _, r := range cfg.Hospitals {
		rc, err := crypto.ParseRecipient(r)
		if err != nil {
			return nil, fmt.Errorf("hospitals: %w", err)
		}
		hs = append(hs, rc)
	}
	var admin ed25519.PublicKey
	if cfg.AdminKey != "" {
		if admin, err = crypto.LoadPublicKey(cfg.AdminKey); err != nil {
			return nil, fmt.Errorf("admin_key: %w", err)
		}
	}
	sc := student.Config{ID: cfg.ID, AdminKey: admin, Aggregator: cfg.Aggregator, Net: netCfg, Identity: id, Hospitals: hs, AuditorKeys: cfg.AuditorKeys,
		BatchSize: cfg.BatchSize, Window: cfg.Window, StateDir: cfg.State, Selection: sel, Deadline: cfg.Deadline, Logger: log}
	for _, o := range opts {
		o(&sc)
	}
	return student.New(sc)
}

// bootstrapOptions say how a bootstrapped run ranks its second part.
type bootstrapOptions struct {
	after       int     // answers before the ranking (0: no bootstrap)
	arch        string  // the ranking student's architecture
	consistency bool    // train it by consistency on the rest of the data too
	floor       float64 // selection.ConfidentConfig.Floor
	spread      int     // selection.ConfidentConfig.Spread
	rotate      float64 // selection.ConfidentConfig.Rotate
	scale       float64 // selection.ConfidentConfig.Scale
}

// confident is how the bootstrap student ranks the rest.
func (b bootstrapOptions) confident() selection.ConfidentConfig {
	return selection.ConfidentConfig{Shift: 1, Rotate: b.rotate, Scale: b.scale, Floor: b.floor, Spread: b.spread, Seed: 1}
}

// bootstrapAfter makes a client ask in two parts (student.Config.Bootstrap):
// after b.after answers, a student of architecture b.arch (trained by
// consistency when b.consistency) ranks the rest by its confidence,
// balanced by the class it predicts.
func bootstrapAfter(cmd *cobra.Command, b bootstrapOptions) func(*student.Config) {
	return func(c *student.Config) {
		if b.after == 0 {
			return
		}
		c.Bootstrap = b.after
		c.Rank = func(ctx context.Context, d *data.Dataset, labels []int, asked []bool) ([]int, error) {
			net, _, err := trainStudent(cmd, d, labels, training{arch: b.arch, epochs: 20, seed: 1, consistency: b.consistency})
			if err != nil {
				return nil, err
			}
			return selection.Confident(ctx, net, d, asked, b.confident())
		}
	}
}

func newLabelCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "label",
		Short: "Ask the aggregator to label the student's data, batch by batch",
		Long: `label sends the student's data to the aggregator in batches (features sealed
to the hospitals) and writes the labels it receives — each released only
after the ledger committed its charge — to --out as JSON. Refused queries
have label -1.

The run is resumable: batch ids are derived from the student id, the data
and the batch index, and labelled batches are recorded in the state
directory, so an interrupted run continues where it stopped without paying
twice. A refusal retrying cannot fix (the budget is exhausted) stops the run
with the labels received so far.

When the aggregator answers in nzc-svt sessions and offers a per-query
fallback (its Ack names it), the run is planned from what is released only
(--fallback, on by default): it asks in its session, one batch at a time,
until the session has used its refusals, then asks as many of the queries it
has not asked as the rest of the cap buys under the fallback (in the
--selection order, or the --bootstrap student's surest first with
--fallback-surest), every charge composed as the ledger composes an account. The summary says what the plan did and the ε its receipts prove.`,
		Example: `  nzc-student label --config federation/student-1.yaml --data data/mnist --count 1000 --out labels.json

  # With nzc-svt: every kind of example first, then, after 20 answers, what a
  # student trained on them is sure of (the session answers those for free):
  nzc-student label --config federation/student-1.yaml --data data/mnist --count 9000 \
      --selection balanced --bootstrap 20 --out labels.json

  # Progress is on stderr; the summary as JSON on stdout:
  nzc-student label --config federation/student-1.yaml --data queries.csv --out labels.json --format json`,
		Args: cobra.NoArgs,
	}
	df := addDataFlags(cmd, 1000)
	out := cmd.Flags().String("out", "labels.json", "where to write the labels (JSON)")
	sel := cmd.Flags().String("selection", "sequential", "order in which to ask: sequential, random, typical (the examples nearest the centres of clusters of the student's own data first: with nzc-svt, the queries the teachers agree on, answered before the session's refusals run out) or balanced (the same in turn in every cluster of the data's principal components, so every kind of example has its share); costs no privacy")
	maxQ := cmd.Flags().Int("max-queries", 0, "ask at most this many queries, the first of the --selection order (0: all); the rest of the data stays the student's unlabelled pool (nzc-student plan gives the count a budget allows)")
	var b bootstrapOptions
	cmd.Flags().IntVar(&b.after, "bootstrap", 0, "ask in the --selection order only until this many queries are answered, then train a student on them (and, with --bootstrap-consistency, the rest of the data) and ask first what it is surest of, in turn for every class it predicts: with nzc-svt, queries the session answers without spending its refusals (0: off; costs no privacy)")
	cmd.Flags().StringVar(&b.arch, "bootstrap-model", "cnn", "the architecture of the --bootstrap student: softmax, mlp, small-mlp, cnn or small-cnn")
	cmd.Flags().BoolVar(&b.consistency, "bootstrap-consistency", true, "train the --bootstrap student by consistency on the examples without a label too (false: on the released labels alone, much faster)")
	cmd.Flags().Float64Var(&b.floor, "bootstrap-floor", 0, "after the bootstrap, ask about examples the student is less sure of than this (0 to 1, exclusive) only once every example it is surer of was asked, so a class it is unsure of skips its turn (0: none waits)")
	cmd.Flags().Float64Var(&b.rotate, "bootstrap-rotate", 0, "after the bootstrap, the student judges its confidence also on each image turned by ± this many degrees (0 to 45), so a digit that changes class under a small turn waits (0: not; the paper-mnist preset of nzc experiment turns by 15)")
	cmd.Flags().Float64Var(&b.scale, "bootstrap-scale", 0, "after the bootstrap, the student judges its confidence also on each image resized by 1 ± this (0 to 0.5) (0: not; the paper-mnist preset resizes by 0.15)")
	fallback := cmd.Flags().Bool("fallback", true, "when the aggregator answers in sessions and offers a per-query fallback (gnmax), ask in the session until it has used its refusals, then ask as many of the queries not asked as the rest of the cap buys under the fallback (false: ask only in sessions); reads released labels only")
	planCap := cmd.Flags().Float64("plan-cap", 0, "with --fallback: the ε the whole run (its session and the fallback's queries, composed as the ledger composes an account) stays within (0: the smallest hospital cap the ledger reports)")
	planDelta := cmd.Flags().Float64("plan-delta", 0, "with --plan-cap: the δ at which it is taken")
	surest := cmd.Flags().Bool("fallback-surest", false, "with --fallback: ask the fallback's queries in the order the --bootstrap student is surest of (false: in the --selection order, which with balanced gives every kind of example its share; a per-query mechanism charges every query alike)")
	cmd.Flags().IntVar(&b.spread, "bootstrap-spread", 0, "after the bootstrap, the first this many examples asked of each class the student predicts are representatives of as many clusters of the examples it is sure of (at or above --bootstrap-floor), not the near-copies the surest are (0: surest first)")
	return cli.Formatted(cmd, config.DefaultStudent(), func(cmd *cobra.Command, f string, cfg config.Student) error {
		d, err := df.load()
		if err != nil {
			return err
		}
		if b.after > 0 {
			// Checked before anything is asked: the ranking comes after the
			// first answers were paid for.
			if _, err := model.Preset(b.arch, d.Shape, d.Classes); err != nil {
				return fmt.Errorf("--bootstrap-model: %w", err)
			}
			if err := b.confident().Validate(); err != nil {
				return fmt.Errorf("--bootstrap-floor, --bootstrap-spread, --bootstrap-rotate, --bootstrap-scale: %w", err)
			}
		}
		if *maxQ < 0 {
			return fmt.Errorf("--max-queries %d: use 0 (all) or more", *maxQ)
		}
		if (*planCap > 0) != (*planDelta > 0) {
			return fmt.Errorf("--plan-cap %v --plan-delta %v: give both, or neither (the smallest hospital cap in the ledger)", *planCap, *planDelta)
		}
		c, err := newClient(cmd, cfg, selection.Config{Strategy: selection.Strategy(*sel), Seed: 1}, bootstrapAfter(cmd, b),
			func(c *student.Config) {
				c.MaxQueries = *maxQ
				if *fallback {
					c.Fallback = &student.FallbackConfig{Cap: *planCap, Delta: *planDelta, Surest: *surest}
				}
			})
		if err != nil {
			return err
		}
		// On a terminal a progress line; otherwise (a service, a file) a
		// structured progress line every progress.LogEvery.
		bar := progress.NewOrLog(cmd.ErrOrStderr(), nil, cli.NewLogger(cmd.ErrOrStderr(), cfg.Log).With("party", cfg.ID), progress.LogEvery)
		res, lerr := c.Label(cmd.Context(), d, func(done, total int) { bar.Update("labelled", done, total, "queries") })
		bar.Done()
		if res != nil && len(res.Batches) > 0 {
			b, err := json.MarshalIndent(res, "", "  ")
			if err != nil {
				return err
			}
			if err := crypto.WriteFile(*out, b, 0o644, true); err != nil {
				return err
			}
		}
		if lerr != nil && (res == nil || !errors.Is(lerr, student.ErrStopped)) {
			return lerr
		}
		summary := struct {
			Queries  int `json:"queries"`
			Answered int `json:"answered"`
			Refused  int `json:"refused"`
			Batches  int `json:"batches"`
			Resumed  int `json:"resumed"`
			// ProofsVerified counts the batches whose receipt — a
			// checkpoint a majority of the auditors signed, holding the
			// charge of exactly these labels — verified against the
			// pinned auditor keys.
			ProofsVerified int    `json:"proofs_verified"`
			Stopped        string `json:"stopped,omitempty"`
			// Plan is what the mechanism the batches were charged under
			// allows their ensemble within a hospital's default cap, read
			// from the last batch's verified charge.
			Plan *sizing.Plan `json:"plan,omitempty"`
			// Note warns of a run the mechanism mostly refused.
			Note string `json:"note,omitempty"`
			Out  string `json:"out"`
			// Fallback is what the planned run did after its session
			// (--fallback): the session's answers and refusals, the
			// fallback's, and the proven ε.
			Fallback *student.PlanReport `json:"fallback,omitempty"`
		}{Queries: res.Queries, Answered: res.Answered, Refused: res.Refused, Batches: len(res.Batches), Resumed: res.Resumed,
			ProofsVerified: res.ProofsVerified, Stopped: res.Stopped, Out: *out, Fallback: res.Plan}
		summary.Plan, summary.Note = chargedPlan(res)
		if err := cli.Print(cmd.OutOrStdout(), f, summary, func(w io.Writer) error {
			_, err := fmt.Fprintf(w, "%d queries: %d labelled, %d refused by the mechanism, in %d batches (%d resumed, %d with a verified proof of their charge); labels in %s\n",
				summary.Queries, summary.Answered, summary.Refused, summary.Batches, summary.Resumed, summary.ProofsVerified, *out)
			if err == nil && summary.Stopped != "" {
				_, err = fmt.Fprintf(w, "stopped early: %s\n", summary.Stopped)
			}
			if err == nil && summary.Plan != nil {
				_, err = fmt.Fprintf(w, "the aggregator's mechanism: %s\n", summary.Plan)
			}
			if p := summary.Fallback; err == nil && p != nil && p.Fallback != "" {
				_, err = fmt.Fprintf(w, "plan: the session answered %d and refused %d; the fallback (%s) answered %d of the %d queries the rest of the cap ε = %g bought; ε = %.4g at δ = %g over %d charges, proven by %s\n",
					p.SessionAnswered, p.SessionRefused, p.Fallback, p.FallbackAnswered, p.FallbackPlanned, p.Cap, p.Epsilon, p.Delta, p.Charges, p.ProvenBy)
				if err == nil && p.Note != "" {
					_, err = fmt.Fprintf(w, "plan: no fallback query was asked: %s\n", p.Note)
				}
			}
			if err == nil && summary.Note != "" {
				_, err = fmt.Fprintf(w, "note: %s\n", summary.Note)
			}
			return err
		}); err != nil {
			return err
		}
		return lerr
	})
}

// chargedPlan returns what the mechanism of the run's last charged batch
// allows its ensemble within a hospital's default cap (nil when no batch
// holds a receipt), and a note when the mechanism refused most queries.
func chargedPlan(res *student.Result) (*sizing.Plan, string) {
	var ch *ledger.Charge
	for _, b := range res.Batches {
		if b.Receipt == nil {
			continue
		}
		if c, err := chargeOf(b.Receipt); err == nil {
			ch = c
		}
	}
	if ch == nil {
		return nil, refusalNote(res.Queries, res.Refused, nil, nil)
	}
	p, err := mechanism.ParseLedgerParams(mechanism.Kind(ch.Mechanism), ch.Params)
	if err != nil || p.Teachers < 1 {
		return nil, refusalNote(res.Queries, res.Refused, nil, nil)
	}
	if err := sizing.Sound(p, p.Teachers, p.Classes); err != nil {
		return nil, refusalNote(res.Queries, res.Refused, nil, err)
	}
	tc := config.DefaultTeacher()
	plan, err := sizing.Check(p, p.Teachers, p.Classes, tc.CapEpsilon, tc.CapDelta)
	if err != nil {
		// Nothing fits a default cap: the hospitals' caps are others.
		return nil, refusalNote(res.Queries, res.Refused, nil, nil)
	}
	return &plan, refusalNote(res.Queries, res.Refused, &plan, nil)
}

// chargeOf decodes the charge a verified receipt holds.
func chargeOf(r *ledger.Receipt) (*ledger.Charge, error) {
	e, err := ledger.DecodeEntry(r.Entry)
	if err != nil {
		return nil, err
	}
	c, err := ledger.DecodeCommand(e.Command)
	if err != nil {
		return nil, err
	}
	ch, ok := c.Body.(*ledger.Charge)
	if !ok {
		return nil, fmt.Errorf("the receipt holds a %T, not a charge", c.Body)
	}
	return ch, nil
}

// refusalNote explains a run the mechanism mostly refused, from its plan
// when known: a mechanism that cannot follow its ensemble (unsound, the
// reason), or a confidence test that refuses even unanimous queries at
// some rate, beyond which refusals are queries the teachers disagree on.
func refusalNote(queries, refused int, plan *sizing.Plan, unsound error) string {
	if queries == 0 || 2*refused <= queries {
		return ""
	}
	what := fmt.Sprintf("the aggregator's mechanism refused %d of %d queries", refused, queries)
	switch {
	case unsound != nil:
		return fmt.Sprintf("%s: it cannot label for the ensemble that voted (%v); ask the aggregator's operator", what, unsound)
	case plan != nil && plan.UnanimousAnswered > 0:
		return fmt.Sprintf("%s: it answers a query the teachers agree on unanimously with probability %.2f, and fewer the less they agree, so the other refusals are queries the teachers disagree on; nzc-teacher train reports each hospital's ensemble accuracy and clean-vote agreement", what, plan.UnanimousAnswered)
	}
	return fmt.Sprintf("%s: its threshold may be set for a larger ensemble than the one voting. nzc-aggregator logs at start what its mechanism allows the federation's ensemble (\"mechanism plan\"), and nzc init sizes it; ask the aggregator's operator", what)
}

func readLabels(path string) (*student.Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("labels: %w (run `nzc-student label` first)", err)
	}
	var r student.Result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("labels %s: %w", path, err)
	}
	return &r, nil
}

func newTrainCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Train the student's model on the labels it received",
		Example: `  nzc-student train --data data/mnist --count 1000 --labels labels.json --out student.model
  nzc-student train --data queries.csv --count 0 --labels labels.json --model softmax --out student.model`,
		Args: cobra.NoArgs,
	}
	df := addDataFlags(cmd, 1000)
	labels := cmd.Flags().String("labels", "labels.json", "labels written by nzc-student label")
	out := cmd.Flags().String("out", "student.model", "where to write the trained model")
	arch := cmd.Flags().String("model", "mlp", "softmax, mlp, small-mlp, cnn or small-cnn")
	t := training{}
	cmd.Flags().IntVar(&t.epochs, "epochs", 20, "training epochs")
	cmd.Flags().Uint64Var(&t.seed, "seed", 1, "training seed")
	cmd.Flags().BoolVar(&t.consistency, "consistency", false, "also learn from the examples without a label, by consistency training (FixMatch family; post-processing, no privacy cost)")
	cmd.Flags().IntVar(&t.passes, "consistency-passes", 0, "with --consistency: passes over the examples without a label (0: 6)")
	cmd.Flags().IntVar(&t.ratio, "consistency-ratio", 0, "with --consistency: examples without a label per labelled one in each step (0: 3)")
	dc := ensemble.DefaultConsistency()
	t.strong = dc.Strong
	cmd.Flags().Float64Var(&t.strong.Rotate, "consistency-rotate", dc.Strong.Rotate, "with --consistency: largest rotation of the strong view, degrees")
	cmd.Flags().Float64Var(&t.strong.Scale, "consistency-scale", dc.Strong.Scale, "with --consistency: largest relative change of size of the strong view, 0 to 0.5")
	cmd.Flags().IntVar(&t.strong.Cutout, "consistency-cutout", dc.Strong.Cutout, "with --consistency: side of the square the strong view cuts out, pixels")
	cmd.Flags().Float64Var(&t.ema, "consistency-ema", 0, "with --consistency: decay of a moving average of the weights that labels the unlabelled examples and is the trained student (a mean teacher; 0: off, else below 1, e.g. 0.99)")
	cmd.Flags().Float64Var(&t.learnRate, "learn-rate", 0.003, "Adam's step size (decayed along a cosine)")
	cmd.Flags().IntVar(&t.minSteps, "min-steps", 0, "train at least this many minibatch steps, however few the labels (0: 300)")
	cmd.Flags().IntVar(&t.selfTrain, "self-training", 0, "rounds of class-balanced self-training on the examples without a label (0: off; post-processing, no privacy cost)")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		t.arch = *arch
		if err := t.check(); err != nil {
			return err
		}
		d, err := df.load()
		if err != nil {
			return err
		}
		r, err := readLabels(*labels)
		if err != nil {
			return err
		}
		if r.DataHash != student.FeatureHash(d) || len(r.Labels) != d.Len() {
			return fmt.Errorf("the labels in %s were asked for other data than --data/--from/--count select: give the same data as to `label`", *labels)
		}
		n, used, err := trainStudent(cmd, d, r.Labels, t)
		if err != nil {
			return err
		}
		if err := n.Save(*out); err != nil {
			return err
		}
		res := struct {
			Examples int    `json:"examples"`
			Out      string `json:"out"`
		}{used, *out}
		return cli.Print(cmd.OutOrStdout(), f, res, func(w io.Writer) error {
			_, err := fmt.Fprintf(w, "trained a %s student on %d labelled examples; saved in %s\n", *arch, used, *out)
			return err
		})
	})
}

// training is how a student is trained.
type training struct {
	arch        string
	epochs      int
	seed        uint64
	consistency bool // consistency training on the examples without a label
	selfTrain   int  // rounds of self-training (0: off)
	// passes and ratio override ensemble.DefaultConsistency's passes over
	// the examples without a label and examples without a label per
	// labelled one (0: the default); minSteps is the least number of
	// minibatch steps (0: 300).
	passes, ratio, minSteps int
	// strong is the strong view of consistency training, ema its mean
	// teacher's decay (0: none); learnRate Adam's step size (0: 0.003).
	strong    model.Augment
	ema       float64
	learnRate float64
}

func (t training) check() error {
	switch {
	case t.consistency && t.selfTrain > 0:
		return fmt.Errorf("--consistency and --self-training are two ways to learn from the unlabelled examples: pick one")
	case t.passes < 0 || t.passes > 1000:
		return fmt.Errorf("--consistency-passes %d: use 1 to 1000, or 0 for the default", t.passes)
	case t.ratio < 0 || t.ratio > 64:
		return fmt.Errorf("--consistency-ratio %d: use 1 to 64, or 0 for the default", t.ratio)
	case t.minSteps < 0:
		return fmt.Errorf("--min-steps %d: use 0 (the default, 300) or more", t.minSteps)
	case !(t.learnRate >= 0 && t.learnRate <= 1):
		return fmt.Errorf("--learn-rate %v: use a step size in (0, 1], e.g. 0.003", t.learnRate)
	case !(t.ema >= 0 && t.ema < 1):
		return fmt.Errorf("--consistency-ema %v: use 0 (off) or a decay below 1, e.g. 0.99", t.ema)
	}
	if err := t.strong.Validate(); err != nil {
		return fmt.Errorf("the strong view (--consistency-rotate, --consistency-scale, --consistency-cutout): %w", err)
	}
	return nil
}

func trainStudent(cmd *cobra.Command, d *data.Dataset, labels []int, t training) (*model.Network, int, error) {
	spec, err := model.Preset(t.arch, d.Shape, d.Classes)
	if err != nil {
		return nil, 0, err
	}
	bar := progress.New(cmd.ErrOrStderr(), time.Now)
	defer bar.Done()
	minSteps := t.minSteps
	if minSteps == 0 {
		minSteps = 300
	}
	lr := t.learnRate
	if lr == 0 {
		lr = 0.003
	}
	tc := model.TrainConfig{Optimizer: model.Adam, LearnRate: lr, BatchSize: 32, Epochs: t.epochs, MinSteps: minSteps, Cosine: true}
	prog := func(done, total int) { bar.Update("training", done, total, "examples") }
	if t.selfTrain > 0 {
		st := ensemble.SelfTraining{Rounds: t.selfTrain, Confidence: 0.9, Shift: 1}
		n, res, err := ensemble.TrainStudentSemi(cmd.Context(), spec, tc, st, t.seed, d, labels, prog)
		return n, res.Labelled, err
	}
	if !t.consistency {
		return ensemble.TrainStudent(cmd.Context(), spec, tc, t.seed, d, labels, prog)
	}
	tc.Shift = 1
	cc := ensemble.DefaultConsistency()
	if t.passes > 0 {
		cc.Epochs = t.passes
	}
	if t.ratio > 0 {
		cc.Ratio = t.ratio
	}
	if t.strong != (model.Augment{}) {
		cc.Strong = t.strong
	}
	cc.EMA = t.ema
	n, res, err := ensemble.TrainStudentConsistency(cmd.Context(), spec, tc, cc, t.seed, d, labels, prog)
	return n, res.Labelled, err
}

func newEvaluateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "evaluate",
		Short: "Measure the student's accuracy on labelled test data",
		Example: `  nzc-student evaluate --model student.model --data data/mnist --from 1000 --count 0
  nzc-student evaluate --model student.model --data test.csv --count 0 --format json
  nzc-student evaluate --model student.model --data data/mnist --from 1000 --count 0 --views 1`,
		Args: cobra.NoArgs,
	}
	df := addDataFlags(cmd, 0)
	path := cmd.Flags().String("model", "student.model", "the trained student")
	views := cmd.Flags().Int("views", 0, "classify each image by the student's probabilities averaged over it and its copies moved this many pixels up, down, left and right (0: the image alone)")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		v := model.Views{Shift: *views}
		if err := v.Validate(); err != nil {
			return fmt.Errorf("--views: %w", err)
		}
		d, err := df.load()
		if err != nil {
			return err
		}
		n, err := model.Load(*path)
		if err != nil {
			return err
		}
		acc, err := n.AccuracyViews(cmd.Context(), d, v)
		if err != nil {
			return err
		}
		res := struct {
			Accuracy float64 `json:"accuracy"`
			Examples int     `json:"examples"`
		}{acc, d.Len()}
		return cli.Print(cmd.OutOrStdout(), f, res, func(w io.Writer) error {
			_, err := fmt.Fprintf(w, "accuracy %.2f%% on %d examples\n", 100*acc, d.Len())
			return err
		})
	})
}

func newBudgetCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "budget",
		Short: "Show what the ledger says each hospital has spent and has left",
		Example: `  nzc-student budget --config federation/student-1.yaml
  nzc-student budget --config federation/student-1.yaml --format json`,
		Args: cobra.NoArgs,
	}
	timeout := cmd.Flags().Duration("timeout", 20*time.Second, "give up after this long")
	return cli.Formatted(cmd, config.DefaultStudent(), func(cmd *cobra.Command, f string, cfg config.Student) error {
		c, err := newClient(cmd, cfg, selection.Config{})
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), *timeout)
		defer cancel()
		resp, err := c.Budget(ctx, &nzcpb.BudgetRequest{})
		if err != nil {
			return err
		}
		type row struct {
			Hospital string  `json:"hospital"`
			Epsilon  float64 `json:"epsilon_spent"`
			Cap      float64 `json:"epsilon_cap"`
			Left     float64 `json:"epsilon_left"`
			Delta    float64 `json:"delta"`
			Answered uint64  `json:"queries_answered"`
			Charges  uint64  `json:"charges"`
		}
		out := struct {
			LedgerSize uint64 `json:"ledger_size"`
			Hospitals  []row  `json:"hospitals"`
		}{LedgerSize: resp.GetLedgerSize()}
		for _, b := range resp.GetBudgets() {
			out.Hospitals = append(out.Hospitals, row{b.GetHospitalId(), b.GetEpsilonSpent(), b.GetEpsilonCap(),
				max(0, b.GetEpsilonCap()-b.GetEpsilonSpent()), b.GetDelta(), b.GetQueriesAnswered(), b.GetCharges()})
		}
		return cli.Print(cmd.OutOrStdout(), f, out, func(w io.Writer) error {
			fmt.Fprintf(w, "%-14s %12s %10s %10s %10s %8s\n", "HOSPITAL", "ε SPENT", "ε CAP", "ε LEFT", "ANSWERS", "CHARGES")
			for _, r := range out.Hospitals {
				fmt.Fprintf(w, "%-14s %12.4f %10.4g %10.4f %10d %8d\n", r.Hospital, r.Epsilon, r.Cap, r.Left, r.Answered, r.Charges)
			}
			_, err := fmt.Fprintf(w, "ledger size %d entries; ε at δ = each hospital's remaining cap δ\n", out.LedgerSize)
			return err
		})
	})
}

func newProofsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "proofs",
		Short: "Verify again the receipt of every labelled batch against the auditors' keys",
		Long: `proofs re-verifies, offline, the receipt kept with every batch in the state
directory: a checkpoint signed by a majority of the auditors (checked against
the auditor_keys of the configuration), the inclusion of the charge's entry
in it, and that the entry is the accepted charge of exactly that batch, for
this student, committing to exactly the labels recorded. It needs no
connection, and trusts neither the aggregator nor any one auditor. It exits
non-zero unless every recorded batch verifies.`,
		Example: `  nzc-student proofs --config federation/student-1.yaml
  nzc-student proofs --config federation/student-1.yaml --format json`,
		Args: cobra.NoArgs,
	}
	return cli.Formatted(cmd, config.DefaultStudent(), func(cmd *cobra.Command, f string, cfg config.Student) error {
		rep, verr := student.VerifyState(cfg.State, cfg.ID, cfg.AuditorKeys)
		if rep.Batches == 0 {
			return verr
		}
		if err := cli.Print(cmd.OutOrStdout(), f, rep, func(w io.Writer) error {
			fmt.Fprintf(w, "%d of %d recorded batches carry a receipt a majority of the %d auditors signed\n", rep.Verified, rep.Batches, len(cfg.AuditorKeys))
			for _, s := range rep.NoReceipt {
				fmt.Fprintf(w, "  no receipt: %s\n", s)
			}
			for _, s := range rep.Failed {
				fmt.Fprintf(w, "  FAILED: %s\n", s)
			}
			return nil
		}); err != nil {
			return err
		}
		return verr
	})
}
