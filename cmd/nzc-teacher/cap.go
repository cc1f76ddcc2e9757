package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/cmd/internal/node"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/config"
	"github.com/nzcfed/nzc/party/auditor/intake"
	"github.com/nzcfed/nzc/party/teacher"
)

func newCapCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cap",
		Short: "Set the hospital's privacy cap, signed by the hospital and sent to the auditors directly",
		Long: `cap sets the hospital's privacy cap (ε, δ) in the ledger without the
aggregator: it signs the command with the hospital's ledger key
(signing_key) and submits it over the hospital's own certificate to the
auditors (auditors, as nzc init writes them), trying each in turn and
following a not-leader answer to the leader. It opens the account with the
cap when the ledger has none, and otherwise signs the next cap change. A
cap below what is already spent stops every charge to the hospital; only
this hospital's account changes.`,
		Example: `  # Lower hospital-1's cap to ε = 4 at δ = 1e-6:
  nzc-teacher cap --config federation/hospital-1.yaml --epsilon 4 --delta 1e-6

  # The same, printing the ledger's answer as JSON:
  nzc-teacher cap --config federation/hospital-1.yaml --epsilon 4 --delta 1e-6 --format json`,
		Args: cobra.NoArgs,
	}
	eps := cmd.Flags().Float64("epsilon", 0, "the new cap ε (finite, > 0)")
	delta := cmd.Flags().Float64("delta", 0, "the new cap δ in (0, 1) (default: cap_delta of the configuration)")
	return cli.Formatted(cmd, config.DefaultTeacher(), func(cmd *cobra.Command, f string, cfg config.Teacher) error {
		if !cmd.Flags().Changed("epsilon") {
			return errors.New("no cap given: give --epsilon (and --delta), e.g. --epsilon 4 --delta 1e-6")
		}
		if !cmd.Flags().Changed("delta") {
			*delta = cfg.CapDelta
		}
		if len(cfg.Auditors) == 0 {
			return errors.New("no auditor address: give --auditors (the auditors' intake addresses, host:port) or set auditors in the configuration, as nzc init writes it")
		}
		if cfg.SigningKey == "" {
			return errors.New("no ledger key: give --signing-key (the hospital's sign.key from nzc init); only the hospital's own signature changes its cap")
		}
		key, err := crypto.LoadPrivateKey(cfg.SigningKey)
		if err != nil {
			return err
		}
		_, netCfg, err := node.Client(cmd.ErrOrStderr(), cfg.ID, cfg.Log, cfg.TLS)
		if err != nil {
			return err
		}
		lc, err := intake.NewClient(netCfg, cfg.Auditors)
		if err != nil {
			return err
		}
		defer lc.Close()
		res, err := teacher.SetCap(cmd.Context(), lc, teacher.CapRequest{Hospital: cfg.ID, Key: key, Epsilon: *eps, Delta: *delta})
		if err != nil {
			return err
		}
		return cli.Print(cmd.OutOrStdout(), f, res, cli.Textf("%s: the cap of %s is ε=%v δ=%v (%s, version %d, ledger entry %d)\n",
			res.Code, res.Hospital, res.Epsilon, res.Delta, res.Command, res.Version, res.Index))
	})
}
