package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
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
typical so that an nzc-svt session spends its refusals last.`,
		Example: `  # GNMax with σ = 40 and 250 teachers, at most ε = 2 per hospital:
  nzc-student plan --mechanism gnmax --sigma 40 --teachers 250 --target-epsilon 2

  # nzc-svt sessions within ε = 2:
  nzc-student plan --mechanism nzc-svt --threshold 40 --scale 2.85714286 --distance-scale 3.07692308 \
      --max-refusals 1 --teachers 250 --target-epsilon 2 --format json`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	mf := cli.AddMechanismFlags(cmd, "", "teachers voting on each query, over all hospitals")
	classes := fs.Int("classes", 10, "classes")
	target := fs.Float64("target-epsilon", 0, "ε per hospital the plan must stay within")
	delta := fs.Float64("delta", 1e-5, "δ per hospital")
	maxQ := fs.Int("max-queries", 9000, "queries the student holds")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		p := mf.Params()
		p.Classes = *classes
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
