// Command nzc-aggregator is the neutral aggregator: it sums hospitals' votes, charges the ledger, then releases labels.
package main

import (
	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/federation/config"
)

func main() { cli.Exec(newRootCommand()) }

func newRootCommand() *cobra.Command {
	return cli.ServiceRoot(cli.Service{
		Name:  "nzc-aggregator",
		Short: "The aggregator: sums votes, runs the DP mechanism, charges the ledger, releases labels",
		About: `nzc-aggregator accepts label requests from students, fans the queries out to the
connected hospitals, sums their vote histograms, runs the configured
differential-privacy mechanism, commits the privacy charge to the auditors'
ledger, and only then returns the labels, age-encrypted to the student.`,
		Example: `  # Serve the federation nzc init made:
  nzc-aggregator run --config federation/aggregator.yaml

  # Check the configuration and the mechanism it will use:
  nzc-aggregator config show --config federation/aggregator.yaml

  # Try another mechanism without editing the file:
  nzc-aggregator config show --config federation/aggregator.yaml --mechanism-name gnmax --mechanism-sigma 40`,
	}, config.DefaultAggregator(),
		newRunCommand(),
	)
}
