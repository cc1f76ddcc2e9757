package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/internal/atomicfile"
	"github.com/nzcfed/nzc/party/auditor/compliance"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

func newLedgerSignRemovalCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sign-removal",
		Short: "Sign the removal of a vanished auditor with this auditor's ledger key (offline)",
		Long: `Add this auditor's signature to a removal of another auditor (--remove), kept
in --file. A vanished auditor cannot ask for its own removal, and one
auditor's certificate removes no other: a majority of the other auditors the
ledger registered sign its removal, each with its ledger signing key, and
any of their operators submits it (nzc ledger remove-signed). The first
signer creates the file, valid for --valid (at most 7 days); the others
add to it. Nothing is sent: pass the file from one operator to the next.`,
		Example: `  nzc ledger sign-removal --remove auditor-3 --as auditor-1 --key fed/auditor-1/signing.key --file remove-auditor-3.json
  nzc ledger sign-removal --remove auditor-3 --as auditor-2 --key fed/auditor-2/signing.key --file remove-auditor-3.json`,
		Args: cobra.NoArgs,
	}
	remove := cmd.Flags().String("remove", "", "the auditor to remove")
	as := cmd.Flags().String("as", "", "the signing auditor's id")
	keyFile := cmd.Flags().String("key", "", "the signing auditor's ledger signing key (signing.key, made by nzc init)")
	file := cmd.Flags().String("file", "", "the removal to create or add a signature to")
	valid := cmd.Flags().Duration("valid", 24*time.Hour, "how long a new removal stays valid (at most 168h)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		switch {
		case *remove == "" || *as == "" || *keyFile == "" || *file == "":
			return errors.New("--remove ID, --as ID, --key FILE and --file FILE are required")
		case *remove == *as:
			return fmt.Errorf("--as %s: an auditor's signature does not count towards its own removal; it leaves with nzc ledger remove-peer", *as)
		case *valid <= 0 || *valid > compliance.MaxRemovalValidity:
			return fmt.Errorf("--valid %s: give a duration up to %s", *valid, compliance.MaxRemovalValidity)
		}
		key, err := crypto.LoadPrivateKey(*keyFile)
		if err != nil {
			return err
		}
		r := compliance.Removal{Remove: *remove, NotAfter: time.Now().Add(*valid).Unix()}
		switch b, err := os.ReadFile(*file); {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return err
		default:
			if r, err = compliance.DecodeRemoval(b); err != nil {
				return fmt.Errorf("%s: %w", *file, err)
			}
			if r.Remove != *remove {
				return fmt.Errorf("%s removes %s, not %s: sign a separate file", *file, r.Remove, *remove)
			}
			// A deadline far ahead would make these signatures a valid
			// removal long after the signers have forgotten it.
			if left := time.Until(time.Unix(r.NotAfter, 0)); left <= 0 || left > compliance.MaxRemovalValidity {
				return fmt.Errorf("%s: its deadline %s is past or more than %s ahead; start a new removal file", *file,
					time.Unix(r.NotAfter, 0).UTC().Format(time.RFC3339), compliance.MaxRemovalValidity)
			}
		}
		r.Signatures = slices.DeleteFunc(r.Signatures, func(s compliance.RemovalSignature) bool { return s.Auditor == *as })
		r.Signatures = append(r.Signatures, compliance.SignRemoval(*as, key, r.Remove, r.NotAfter))
		b, err := r.Encode()
		if err != nil {
			return err
		}
		if err := atomicfile.Write(*file, b, 0o644, true); err != nil {
			return err
		}
		signers := make([]string, len(r.Signatures))
		for i, s := range r.Signatures {
			signers[i] = s.Auditor
		}
		_, err = fmt.Fprintf(cmd.OutOrStdout(), "removal of %s, valid until %s, signed by %v; a majority of the other auditors must sign it\n",
			r.Remove, time.Unix(r.NotAfter, 0).UTC().Format(time.RFC3339), signers)
		return err
	}
	return cmd
}

func newLedgerRemoveSignedCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "remove-signed",
		Short: "Remove a vanished auditor on a majority's signed removal (administrative)",
		Long: `Submit a removal signed by a majority of the other auditors (nzc ledger
sign-removal) to the auditor at --api, as that auditor (--as). It checks the
signatures against the auditors its ledger registered, and so does the raft
leader it forwards the removal to, before the membership changes; a removal
short of a majority's signatures changes nothing.`,
		Example: `  nzc ledger remove-signed --api 127.0.0.1:7700 --federation fed --as auditor-1 --file remove-auditor-3.json`,
		Args:    cobra.NoArgs,
	}
	c := addAdminFlags(cmd)
	file := cmd.Flags().String("file", "", "the signed removal (nzc ledger sign-removal)")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		if *file == "" {
			return errors.New("--file FILE, the signed removal, is required")
		}
		b, err := os.ReadFile(*file)
		if err != nil {
			return err
		}
		r, err := compliance.DecodeRemoval(b)
		if err != nil {
			return fmt.Errorf("%s: %w", *file, err)
		}
		return adminMembership(cmd, c, f, func(ctx context.Context, api *compliance.Client) (raftnode.Status, error) {
			return api.RemoveSigned(ctx, r)
		}, fmt.Sprintf("auditor %s is not a member", r.Remove))
	})
}
