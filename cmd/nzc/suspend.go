package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/provision"
	"github.com/nzcfed/nzc/internal/atomicfile"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/compliance"
)

func newInitSuspendCommand() *cobra.Command {
	var (
		dir, hospital, reason, out string
		reinstate                  bool
		version                    uint64
	)
	cmd := &cobra.Command{
		Use:   "suspend",
		Short: "Sign the ledger command that suspends a hospital's account (or reinstates it) with the administrator key",
		Long: `suspend signs, with the federation administrator's key (admin/admin.key),
the ledger command that suspends a hospital: while it holds, the ledger
refuses every charge, reservation and session naming the hospital, and the
aggregator leaves it out of every batch. --reinstate signs the command that
lifts it. Each carries the hospital's next suspension version (--version: 1
for its first suspension, 2 for the reinstatement after it, …); a ledger
that expects another names it. Nothing is sent: submit the file with
nzc ledger submit.`,
		Example: `  nzc init suspend --dir federation --hospital hospital-3 --reason "burnt 12 sessions without an answer" --out suspend.cmd
  nzc ledger submit --federation federation --as auditor-1 --file suspend.cmd

  # Lift it:
  nzc init suspend --dir federation --hospital hospital-3 --reinstate --version 2 --reason "ensemble retrained" --out reinstate.cmd`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&dir, "dir", "federation", "directory of an existing federation, holding the administrator key")
	cmd.Flags().StringVar(&hospital, "hospital", "", "the hospital to suspend or reinstate")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the ledger (at most 1024 bytes)")
	cmd.Flags().StringVar(&out, "out", "", "file to write the signed command to")
	cmd.Flags().BoolVar(&reinstate, "reinstate", false, "reinstate the hospital instead of suspending it")
	cmd.Flags().Uint64Var(&version, "version", 1, "the hospital's next suspension version")
	markRequired(cmd, "hospital", "reason", "out")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		dir, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		m, err := crypto.LoadManifest(dir)
		if err != nil {
			return err
		}
		b, err := provision.SuspendCommand(m, hospital, !reinstate, version, reason, time.Now())
		if err != nil {
			return err
		}
		if err := atomicfile.Write(out, b, 0o644, false); err != nil {
			return err
		}
		verb := "suspension"
		if reinstate {
			verb = "reinstatement"
		}
		s := struct {
			Hospital  string `json:"hospital"`
			Suspended bool   `json:"suspended"`
			Version   uint64 `json:"version"`
			File      string `json:"file"`
		}{hospital, !reinstate, version, out}
		return cli.Print(cmd.OutOrStdout(), f, s, cli.Textf("signed the %s of %s (version %d): %s\nsubmit it with: nzc ledger submit --federation %s --as AUDITOR --file %s\n", verb, hospital, version, out, dir, out))
	})
}

func newLedgerSubmitCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "submit",
		Short: "Submit a ledger command the federation administrator signed (nzc init suspend) through an auditor",
		Long: `Submit a ledger command signed with the administrator key — a hospital's
suspension or reinstatement, made by nzc init suspend — to the auditor at
--api (or the first of the federation that answers), as that auditor
(--as). The auditor checks that an administrator signed it and that its
replica would accept it before proposing it; a command the ledger refuses
changes nothing and the refusal is printed.`,
		Example: `  nzc ledger submit --federation fed --as auditor-1 --file suspend.cmd
  nzc ledger submit --api 127.0.0.1:7700 --federation fed --as auditor-1 --file suspend.cmd`,
		Args: cobra.NoArgs,
	}
	c := addAdminFlags(cmd)
	file := cmd.Flags().String("file", "", "the signed command (nzc init suspend)")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		if *file == "" {
			return errors.New("--file FILE, the signed command, is required")
		}
		b, err := os.ReadFile(*file)
		if err != nil {
			return err
		}
		if _, err := ledger.DecodeCommand(b); err != nil {
			return fmt.Errorf("%s: %w", *file, err)
		}
		var res ledger.Result
		if err := c.call(cmd.Context(), func(ctx context.Context, api *compliance.Client) (err error) {
			res, err = api.Submit(ctx, b)
			return err
		}); err != nil {
			return err
		}
		return cli.Print(cmd.OutOrStdout(), f, res, cli.Text(func(sb *strings.Builder) {
			fmt.Fprintf(sb, "entry %d: %s\n", res.Index, res.Message)
		}))
	})
}
