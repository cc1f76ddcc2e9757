// Command nzc is the operator's tool for an NZC federation: provisioning,
// local demos and experiments, privacy analysis and audits, ledger
// verification and benchmarks.
package main

import (
	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
)

func main() { cli.Exec(newRootCommand()) }

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "nzc",
		Short: "Operate an NZC federation: private knowledge transfer between hospitals",
		Long: `nzc is the operator's tool for an NZC federation, in which hospitals' teacher
models vote on a student's queries, an aggregator releases only differentially
private labels, and an auditor cluster keeps a tamper-evident privacy ledger.

Every privacy figure nzc prints is one it can prove: the source paper's
"ε≈0" aggregation is run faithfully and charged its true (unbounded) cost.`,
		Example: `  # A whole federation on this machine, start to finish:
  scripts/fetch-data.sh && nzc demo

  # Show the version of this build:
  nzc version

  # The same, as JSON:
  nzc version --format json`,
	}
	root.AddCommand(
		cli.VersionCommand("nzc"),
		newInitCommand(),
		newKeysCommand(),
		newONNXCommand(),
		newDemoCommand(),
		newPrivacyCommand(),
		newAuditCommand(),
		newExperimentCommand(),
		newLedgerCommand(),
		newBenchCommand(),
	)
	return root
}
