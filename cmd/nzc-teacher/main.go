// Command nzc-teacher is the hospital's node: it trains teachers on local data and answers vote requests.
package main

import (
	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/federation/config"
)

func main() { cli.Exec(newRootCommand()) }

func newRootCommand() *cobra.Command {
	return cli.ServiceRoot(cli.Service{
		Name:  "nzc-teacher",
		Short: "A hospital's teacher node: trains teachers on local data and votes on queries",
		About: `nzc-teacher runs at each hospital. It trains teacher models on disjoint shards
of the hospital's own data, dials out to the aggregator (a hospital never
opens an inbound port), and answers each batch of queries with one vote
histogram per query over its own teachers, age-encrypted to the aggregator.`,
		Example: `  # Train ten teachers on the hospital's data, then join the federation:
  nzc-teacher train --config federation/hospital-1.yaml --data data/mnist --teachers 10
  nzc-teacher run --config federation/hospital-1.yaml

  # Lower the hospital's privacy cap, straight to the auditors:
  nzc-teacher cap --config federation/hospital-1.yaml --epsilon 4 --delta 1e-6

  # Check the configuration nzc init wrote for hospital h1:
  nzc-teacher config show --config federation/hospital-1.yaml

  # Override one key from the environment and print JSON:
  NZC_AGGREGATOR=127.0.0.1:7400 nzc-teacher config show --config federation/hospital-1.yaml --format json`,
	}, config.DefaultTeacher(),
		newTrainCommand(),
		newRunCommand(),
		newStatusCommand(),
		newCapCommand(),
	)
}
