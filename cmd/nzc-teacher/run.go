package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/cmd/internal/node"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/config"
	"github.com/nzcfed/nzc/internal/ops"
	"github.com/nzcfed/nzc/internal/pause"
	"github.com/nzcfed/nzc/party/teacher"
)

func newTrainCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Train the hospital's teachers on disjoint shards of its data",
		Long: `train loads the hospital's training data (a directory of idx files, such as
MNIST from scripts/fetch-data.sh, a folder of PNG or JPEG images with one
directory per class, or a CSV file), cuts it into one disjoint
shard per teacher, trains each teacher on its own shard, and writes them to
the models directory. A tenth of the data (at most 5,000 examples) is held
out first and never trained on: train reports the ensemble's accuracy on it
by its clean (noise-free) plurality vote, one teacher's mean accuracy, and
how many of the teachers vote with the plurality (the clearer the votes,
the more labels the noisy aggregation gets right); all are in the models'
manifest and in --format json. Progress is shown on stderr when it is a
terminal; otherwise it is logged as a structured line every 5 s.`,
		Example: `  nzc-teacher train --config federation/hospital-1.yaml --data data/mnist --teachers 10

  # Three hospitals on one machine, each with its own third of MNIST:
  nzc-teacher train --config federation/hospital-2.yaml --data data/mnist --data-part 2 --data-parts 3`,
		Args: cobra.NoArgs,
	}
	maxExamples := cmd.Flags().Int("max-examples", 0, "use at most this many examples of the hospital's data (0: all)")
	return cli.Formatted(cmd, config.DefaultTeacher(), func(cmd *cobra.Command, f string, cfg config.Teacher) error {
		if cfg.Data == "" {
			return errors.New("no training data: give --data (a directory of idx files, a folder of images per class or a CSV file); scripts/fetch-data.sh puts MNIST in data/mnist")
		}
		log := cli.NewLogger(cmd.ErrOrStderr(), cfg.Log).With("party", cfg.ID)
		start := time.Now()
		m, err := teacher.Train(cmd.Context(), teacher.TrainOptions{Data: cfg.Data, Part: cfg.DataPart, Parts: cfg.DataParts,
			MaxExamples: *maxExamples, Teachers: cfg.Teachers, Model: cfg.Model, Epochs: cfg.Epochs, Seed: cfg.Seed,
			Models: cfg.Models, Progress: cmd.ErrOrStderr(), Logger: log})
		if err != nil {
			return err
		}
		out := struct {
			ensembleView
			Seconds float64 `json:"seconds"`
		}{viewEnsemble(m, cfg.Models), time.Since(start).Seconds()}
		text := fmt.Sprintf("trained %d %s teachers on %d examples (%d classes) in %.1fs; saved in %s\n",
			m.Teachers, m.Model, m.Examples, m.Classes, out.Seconds, cfg.Models)
		if c := m.Check; c != nil {
			text += fmt.Sprintf("on %d held-out examples no teacher trained on: the ensemble's clean vote is right on %.1f %%, one teacher on %.1f %% on average; %.1f %% of the teachers vote with the plurality\n",
				c.HeldOut, 100*c.Accuracy, 100*c.TeacherAccuracy, 100*c.Agreement)
		} else {
			text += fmt.Sprintf("not checked: fewer than %d examples, too few to hold a tenth out\n", 10*teacher.MinHeldOut)
		}
		return cli.Print(cmd.OutOrStdout(), f, out, cli.Textf("%s", text))
	})
}

func newRunCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Connect to the aggregator and answer query batches with the teachers' votes",
		Long: `run dials the aggregator (a hospital never listens on a port), registers the
hospital's teachers, opens its privacy-budget account with its cap (a ledger
command only this hospital can sign), and answers each query batch with one
vote histogram per query, sealed to the aggregator. It reconnects by itself
with backoff; it stops at once, with a non-zero status and the reason, if
either side refuses the other's certificate or the aggregator refuses the
hospital's configuration (an ensemble or classes other than the ledger
registers for it), which reconnecting cannot mend.`,
		Example: `  nzc-teacher run --config federation/hospital-1.yaml

  # A tighter privacy cap for this hospital:
  nzc-teacher run --config federation/hospital-1.yaml --cap-epsilon 4`,
		Args: cobra.NoArgs,
	}
	return cli.Configured(cmd, config.DefaultTeacher(), func(cmd *cobra.Command, cfg config.Teacher) error {
		log, netCfg, err := node.Start(cmd.ErrOrStderr(), cfg.ID, cfg.Log, cfg.Ops, cfg.TLS)
		if err != nil {
			return err
		}
		ens, models, err := teacher.LoadVoter(cfg.Models, cfg.ONNXRuntime)
		if err != nil {
			return err
		}
		defer models.Close()
		id, err := crypto.LoadIdentity(cfg.AgeIdentity)
		if err != nil {
			return err
		}
		var key []byte
		if cfg.SigningKey != "" {
			if key, err = crypto.LoadPrivateKey(cfg.SigningKey); err != nil {
				return err
			}
		}
		var registration []byte
		if cfg.Registration != "" {
			if registration, err = os.ReadFile(cfg.Registration); err != nil {
				return fmt.Errorf("registration: %w (nzc init add-hospital writes it next to the hospital's keys)", err)
			}
		}
		var genesis []byte
		if cfg.Genesis != "" && cfg.Registration == "" {
			if genesis, err = os.ReadFile(cfg.Genesis); err != nil {
				return fmt.Errorf("genesis: %w (nzc init writes genesis.json in the federation directory and in every kit)", err)
			}
		}
		n, err := teacher.New(teacher.Config{ID: cfg.ID, Aggregator: cfg.Aggregator, Net: netCfg, Identity: id,
			SigningKey: key, CapEpsilon: cfg.CapEpsilon, CapDelta: cfg.CapDelta, Registration: registration, Genesis: genesis, Voter: ens, Logger: log,
			AuditorKeys: cfg.AuditorKeys, ProofLag: cfg.ProofLag, State: cfg.State,
			Pause: pause.Hook(log)})
		if errors.Is(err, teacher.ErrBadRegistration) {
			if cfg.Registration == "" {
				return fmt.Errorf("genesis %s: %w", cfg.Genesis, err)
			}
			return fmt.Errorf("registration %s: %w", cfg.Registration, err)
		}
		if err != nil {
			return err
		}
		reg := ops.NewRegistry()
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "nzc_teacher_batches_answered_total",
			Help: "Query batches answered with the teachers' votes."}, func() float64 { return float64(n.Answered()) }))
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "nzc_teacher_batches_voted_total",
			Help: "Distinct batches voted on: a batch id bound to its queries, student and count; a retry of the same batch is not counted again."}, func() float64 { return float64(n.Spending().Voted) }))
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "nzc_teacher_charges_proven_total",
			Help: "Batches this hospital voted on whose charge naming it it has seen proven by a majority of the auditors."}, func() float64 { return float64(n.Spending().Proven) }))
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nzc_teacher_charges_unproven",
			Help: "Batches this hospital voted on whose charge it has not yet seen proven; at proof_lag it stops voting."}, func() float64 { return float64(n.Spending().Unproven) }))
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "nzc_teacher_receipts_rejected_total",
			Help: "Charge receipts that did not prove a charge of this hospital's votes."}, func() float64 { return float64(n.Spending().Rejected) }))
		node.ServeOps(cmd.Context(), cfg.Ops.Listen, ops.Handler(reg, n.Ready), log)
		log.Info("hospital starting", "teachers", ens.Teachers(), "classes", ens.Classes(), "aggregator", cfg.Aggregator)
		return n.Run(cmd.Context())
	})
}

func newStatusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the hospital's trained teachers",
		Example: `  nzc-teacher status --config federation/hospital-1.yaml
  nzc-teacher status --config federation/hospital-1.yaml --format json`,
		Args: cobra.NoArgs,
	}
	return cli.Formatted(cmd, config.DefaultTeacher(), func(cmd *cobra.Command, f string, cfg config.Teacher) error {
		dir := cfg.Models
		m, err := teacher.ReadManifest(dir)
		if err != nil {
			return err
		}
		return cli.Print(cmd.OutOrStdout(), f, viewEnsemble(m, dir), cli.Textf("%d %s teachers in %s\nclasses %d, input %v, trained on %d examples (data %s…)\n",
			m.Teachers, m.Model, dir, m.Classes, m.Shape, m.Examples, m.DataHash[:min(12, len(m.DataHash))]))
	})
}
