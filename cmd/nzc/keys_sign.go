package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/provision"
)

func newInitSignCommand() *cobra.Command {
	var (
		dir, request, role, id, out, fingerprint string
		hosts                                    []string
		basePort                                 int
		renew                                    bool
	)
	cmd := &cobra.Command{
		Use:   "sign",
		Short: "Admit a hospital that made its own keys: issue its certificate and sign its ledger registration",
		Long: `sign reads a key request made by nzc keys new, checks that it asks for
exactly the role and id you approve (--role, --id) and that its keys prove
possession, issues a certificate for its TLS key with the CA key, signs the
hospital's ledger registration with the administrator key, and writes a
bundle of public files for the hospital: the CA certificate, its
certificate, its registration and its configuration. No private key of the
hospital is ever read or written.

A request for another role or id than approved, for the reserved id
federation-admin, or whose fingerprint is not the one the hospital confirmed
out of band (--fingerprint, required) is refused and changes nothing.

With --renew, sign issues a new certificate to a hospital already in the
federation, for the same keys (its original request): the ledger and the
students keep its signing key and age recipient, so only the certificate
changes. The hospital installs the bundle with nzc keys install --force.`,
		Example: `  nzc init sign --dir federation --request request.json --role hospital --id hospital-4 --fingerprint <the request fingerprint> --out hospital-4-bundle

  # Two years later, a new certificate for the same keys:
  nzc init sign --dir federation --request request.json --role hospital --id hospital-4 --fingerprint <the request fingerprint> --renew --out hospital-4-renewed`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&dir, "dir", "federation", "directory of an existing federation")
	cmd.Flags().StringVar(&request, "request", "", "the request.json the party made with nzc keys new")
	cmd.Flags().StringVar(&role, "role", "", "the role you approve for this party (hospital)")
	cmd.Flags().StringVar(&id, "id", "", "the id you approve for this party")
	cmd.Flags().StringVar(&out, "out", "", "new directory for the bundle to send back to the party")
	cmd.Flags().StringVar(&fingerprint, "fingerprint", "", "the request fingerprint the party told you out of band; refused if it differs")
	cmd.Flags().StringSliceVar(&hosts, "hosts", nil, "extra DNS names or IP addresses for the certificate, besides the request's")
	cmd.Flags().IntVar(&basePort, "base-port", 7400, "first port of a federation made without a topology file (topology.yaml, written by init since it takes hosts)")
	cmd.Flags().BoolVar(&renew, "renew", false, "issue a new certificate to a hospital already admitted, for the same keys")
	markRequired(cmd, "request", "role", "id", "out", "fingerprint")
	cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		r, err := crypto.ParseRole(role)
		if err != nil {
			return fmt.Errorf("--role: %w", err)
		}
		if r != crypto.RoleHospital {
			return fmt.Errorf("%w: only hospitals join a federation after its genesis; the other parties are named in the genesis by nzc init", provision.ErrNotApproved)
		}
		dir, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		s, err := provision.SignRequest(dir, request, crypto.Peer{Role: r, ID: id}, out, fingerprint, hosts, basePort, renew)
		if err != nil {
			return err
		}
		return cli.Print(cmd.OutOrStdout(), f, s, cli.Textf("issued a certificate to %s (request %s)\nbundle for the party, public files only: %s\nthe party installs it with:\n  nzc keys install --dir <its key directory> --bundle %s --ca-fingerprint %s\n",
			s.URI, s.RequestFingerprint, s.Bundle, filepath.Base(s.Bundle), s.CAFingerprint))
	})
	return cmd
}
