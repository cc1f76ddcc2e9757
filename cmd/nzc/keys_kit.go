package main

import (
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/federation/provision"
)

func newInitKitCommand() *cobra.Command {
	var (
		dir, party, out string
		basePort        int
	)
	cmd := &cobra.Command{
		Use:   "kit",
		Short: "Copy what one party needs to run on its own machine: public files, its own keys, its configuration",
		Long: `kit writes a directory for one party of the federation to run elsewhere: the
manifest, the genesis, the CA certificate, every party's public files, the
party's own private keys (if the administrator holds them: parties named in
the genesis by nzc init) and its configuration <id>.yaml, with paths relative
to the kit, so the kit can be moved anywhere and the party started from it
(the systemd units in deploy/ start each party in its kit). No other party's
private key, and neither the CA key nor the administrator key, is copied.

Addresses in the configuration are those of the federation's topology
(topology.yaml, from nzc init --party-host or --topology), which the kit
holds too: the party starts from it unchanged on its host, and the
compliance officer's nzc ledger … --federation commands find every
auditor's API in it.`,
		Example: `  nzc init kit --dir federation --party auditor-1 --out auditor-1-kit`,
		Args:    cobra.NoArgs,
	}
	cmd.Flags().StringVar(&dir, "dir", "federation", "directory of an existing federation")
	cmd.Flags().StringVar(&party, "party", "", "the party's id (e.g. auditor-1)")
	cmd.Flags().StringVar(&out, "out", "", "new directory for the kit")
	cmd.Flags().IntVar(&basePort, "base-port", 7400, "first port of a federation made without a topology file (topology.yaml, written by init since it takes hosts)")
	markRequired(cmd, "party", "out")
	cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		dir, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		s, err := provision.WriteKit(dir, party, out, basePort)
		if err != nil {
			return err
		}
		return cli.Print(cmd.OutOrStdout(), f, s, cli.Textf("kit of %s in %s\nconfiguration (paths relative to the kit): %s\nprivate files, mode 0600: %s\n",
			s.URI, s.Kit, s.Config, strings.Join(s.Private, ", ")))
	})
	return cmd
}
