// Command nzc-student is the student's client: it sends unlabeled data and receives private labels.
package main

import (
	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/internal/config"
)

func main() { cli.Exec(newRootCommand()) }

func newRootCommand() *cobra.Command {
	return cli.ServiceRoot(&cobra.Command{
		Use:   "nzc-student",
		Short: "The student: sends unlabeled data, receives private labels, trains its model",
		Long: `nzc-student sends unlabeled data to the aggregator in batches, receives labels
(or typed refusals), and trains and evaluates its model on them.

Its configuration (see 'nzc-student config keys') comes from flags, NZC_*
environment variables and a YAML file made by 'nzc init'.`,
		Example: `  # Check the configuration nzc init wrote for student s1:
  nzc-student config show --config federation/s1.yaml

  # Use smaller batches for this run:
  NZC_BATCH_SIZE=64 nzc-student config show --config federation/s1.yaml --format json`,
	}, config.DefaultStudent(),
		newLabelCommand(),
		newTrainCommand(),
		newEvaluateCommand(),
		newBudgetCommand(),
		newPlanCommand(),
		newProofsCommand(),
	)
}
