// Command nzc-student is the student's client: it sends unlabeled data and receives private labels.
package main

import (
	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/federation/config"
)

func main() { cli.Exec(newRootCommand()) }

func newRootCommand() *cobra.Command {
	return cli.ServiceRoot(cli.Service{
		Name:  "nzc-student",
		Short: "The student: sends unlabeled data, receives private labels, trains its model",
		About: `nzc-student sends unlabeled data to the aggregator in batches, receives labels
(or typed refusals), and trains and evaluates its model on them.`,
		Example: `  # Check the configuration nzc init wrote for student s1:
  nzc-student config show --config federation/student-1.yaml

  # Use smaller batches for this run:
  NZC_BATCH_SIZE=64 nzc-student config show --config federation/student-1.yaml --format json`,
	}, config.DefaultStudent(),
		newLabelCommand(),
		newTrainCommand(),
		newEvaluateCommand(),
		newBudgetCommand(),
		newPlanCommand(),
		newProofsCommand(),
	)
}
