// Command nzc-auditor is one member of the auditor cluster that keeps the replicated privacy ledger.
package main

import (
	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/federation/config"
)

func main() { cli.Exec(newRootCommand()) }

func newRootCommand() *cobra.Command {
	return cli.ServiceRoot(cli.Service{
		Name:  "nzc-auditor",
		Short: "An auditor: one raft member of the replicated, tamper-evident privacy ledger",
		About: `nzc-auditor runs one member of the auditor cluster. Together the auditors keep a
raft-replicated privacy ledger: every charge is agreed by a majority before
any label is released, and each auditor signs checkpoints of the ledger's
Merkle log so that compliance officers can verify it independently.`,
		Example: `  # Run the first auditor of the federation nzc init made:
  nzc-auditor run --config federation/auditor-1.yaml

  # Check the configuration nzc init wrote for auditor a1:
  nzc-auditor config show --config federation/auditor-1.yaml

  # List every key with its flag and environment variable:
  nzc-auditor config keys`,
	}, config.DefaultAuditor(),
		newRunCommand(),
	)
}
