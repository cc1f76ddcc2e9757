package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/cmd/internal/sizing"
	"github.com/nzcfed/nzc/federation/config"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/mechanism/budget"
	"github.com/nzcfed/nzc/party/student"
)

func newPlanCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Plan how many queries fit a target ε per hospital",
		Long: `plan computes, from the aggregator's mechanism and parameters alone (never from
votes), how many queries the student can ask while every hospital's ε stays
within --target-epsilon at --delta, composed as the ledger's gate composes
them. For a per-query mechanism it is the largest query count whose
worst case (every query answered) fits; for nzc-svt it is the number of
whole sessions that fit, each of which answers until its K-th refusal.

Pass the plan's query count to 'nzc-student label --count', with --selection
typical so that an nzc-svt session spends its refusals last.

With --after-session ε, the plan is what the rest of the target buys after
one nzc-svt session of pure ε (planned for --teachers and --classes with
--session-refusals, as nzc experiment plans its sessions) ended early: how
many queries of --mechanism fit, composed with the session as the ledger
composes an account. Whether a session ended is a released output, so
planning on it costs nothing; nzc experiment's planned rows use the same
planner (mechanism/budget).`,
		Example: `  # GNMax with σ = 40 and 250 teachers, at most ε = 2 per hospital:
  nzc-student plan --mechanism gnmax --sigma 40 --teachers 250 --target-epsilon 2

  # nzc-svt sessions within ε = 2:
  nzc-student plan --mechanism nzc-svt --threshold 40 --scale 2.85714286 --distance-scale 3.07692308 \
      --max-refusals 1 --teachers 250 --target-epsilon 2 --format json

  # The aggregator's own mechanism and ensemble, from its configuration:
  nzc-student plan --aggregator-config federation/aggregator.yaml --target-epsilon 8

  # After a session of ε = 0.5 ended early, GNMax queries within ε = 1:
  nzc-student plan --mechanism gnmax --sigma 40 --teachers 250 --target-epsilon 1 --after-session 0.5`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	mf := cli.AddMechanismFlags(cmd, "", "teachers voting on each query, over all hospitals")
	classes := fs.Int("classes", 10, "classes")
	target := fs.Float64("target-epsilon", 0, "ε per hospital the plan must stay within")
	delta := fs.Float64("delta", 1e-5, "δ per hospital")
	maxQ := fs.Int("max-queries", 9000, "queries the student holds")
	after := fs.Float64("after-session", 0, "pure ε of an nzc-svt session already spent: plan what the rest of --target-epsilon buys after it (0: none)")
	refusals := fs.Int("session-refusals", mechanism.PresetSessionRefusals, "with --after-session, the refusals that session allowed")
	aggCfg := fs.String("aggregator-config", "", "read the mechanism, its parameters, the ensemble (teachers × hospitals) and the classes from the aggregator's configuration file instead of the flags")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		p := mf.Params()
		p.Classes = *classes
		if *aggCfg != "" {
			if cmd.Flags().Changed("mechanism") {
				return errors.New("--aggregator-config gives the mechanism: leave out --mechanism and its parameters")
			}
			var err error
			if p, err = aggregatorMechanism(*aggCfg); err != nil {
				return err
			}
			if cmd.Flags().Changed("teachers") {
				p.Teachers = mf.Params().Teachers
			}
			if cmd.Flags().Changed("classes") {
				p.Classes = *classes
			}
		}
		if *after != 0 {
			return planAfterSession(cmd, f, p, *after, *refusals, *target, *delta, *maxQ)
		}
		plan, err := student.PlanQueries(p, *target, *delta, *maxQ)
		if err != nil {
			return err
		}
		return cli.Print(cmd.OutOrStdout(), f, plan, func(w io.Writer) error {
			var err error
			if plan.Sessions > 0 {
				_, err = fmt.Fprintf(w, "%d nzc-svt session(s) over up to %d queries: ε %.4f at δ %g per hospital (target %g)\n",
					plan.Sessions, plan.Queries, plan.Epsilon, plan.Delta, plan.TargetEpsilon)
			} else {
				_, err = fmt.Fprintf(w, "%d queries of %s: at most ε %.4f at δ %g per hospital (target %g), whatever the votes\n",
					plan.Queries, p.Mechanism, plan.Epsilon, plan.Delta, plan.TargetEpsilon)
			}
			return err
		})
	})
}

// aggregatorMechanism reads the mechanism of the aggregator's
// configuration file at path, for the ensemble of all the hospitals it
// names (teachers each, or as listed in ensembles) voting on its classes.
func aggregatorMechanism(path string) (mechanism.Params, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return mechanism.Params{}, fmt.Errorf("--aggregator-config: %w", err)
	}
	c := config.DefaultAggregator()
	if err := yaml.Unmarshal(raw, &c); err != nil {
		return mechanism.Params{}, fmt.Errorf("--aggregator-config %s: %w", path, err)
	}
	sizes, err := c.EnsembleSizes()
	if err != nil {
		return mechanism.Params{}, fmt.Errorf("--aggregator-config %s: ensembles: %w", path, err)
	}
	p := c.MechanismParams()
	p.Teachers, p.Classes = sizing.Ensemble(max(c.Hospitals, c.Quorum), c.Teachers, sizes), c.Classes
	return p, nil
}

// afterSession is the plan of what the rest of a target buys after one
// session.
type afterSession struct {
	Session       mechanism.Params `json:"session"`
	Mechanism     mechanism.Params `json:"mechanism"`
	TargetEpsilon float64          `json:"target_epsilon"`
	Delta         float64          `json:"delta"`
	Queries       int              `json:"queries"`
	// Epsilon is the session's and the queries' proven ε together.
	Epsilon float64 `json:"epsilon"`
}

// planAfterSession plans the queries of p that fit within target after a
// session of the default session mechanism, of pure ε eps (budget.Rest).
func planAfterSession(cmd *cobra.Command, f string, p mechanism.Params, eps float64, refusals int, target, delta float64, maxQ int) error {
	if err := p.Validate(); err != nil {
		return err
	}
	sp, err := mechanism.DefaultSessionKind().PlanSession(eps, mechanism.PresetSessionDelta, refusals, p.Teachers, p.Classes)
	if err != nil {
		return fmt.Errorf("--after-session %v: %w", eps, err)
	}
	spent, err := sp.Charge(mechanism.DefaultGrid(), 0, 0)
	if err != nil {
		return err
	}
	n, e, err := budget.Rest(spent, p, target, delta, maxQ)
	if err != nil {
		return err
	}
	plan := afterSession{Session: sp, Mechanism: p, TargetEpsilon: target, Delta: delta, Queries: n, Epsilon: e}
	return cli.Print(cmd.OutOrStdout(), f, plan, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "after an nzc-svt session (%s), %d queries of %s: ε %.4f at δ %g per hospital together (target %g), whatever the votes\n",
			sp, n, p.Mechanism, e, delta, target)
		return err
	})
}
