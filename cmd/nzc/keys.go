package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/provision"
)

// A party that keeps its own keys:
//
//	party:          nzc keys new --role hospital --id hospital-4 --out keys
//	                (sends keys/request.json to the administrator)
//	administrator:  nzc init sign --dir federation --request request.json \
//	                    --role hospital --id hospital-4 --fingerprint <read out> \
//	                    --out hospital-4-bundle
//	                (sends the bundle back: public files only)
//	party:          nzc keys install --dir keys --bundle hospital-4-bundle \
//	                    --ca-fingerprint <the fingerprint confirmed out of band>

func newKeysCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Make this party's keys where it runs, and install the certificate the administrator issued",
		Long: `keys lets a party keep its private keys: it makes them on the party's own
machine (keys new), sends the administrator a request holding only their
public parts, and installs the bundle the administrator returns (keys
install). The administrator signs requests with nzc init sign.`,
		Example: `  nzc keys new --role hospital --id hospital-4 --out /var/lib/nzc/keys
  nzc keys install --dir /var/lib/nzc/keys --bundle hospital-4-bundle --ca-fingerprint 3A:9F:…`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newKeysNewCommand(), newKeysInstallCommand())
	return cmd
}

// keysNewSummary is what `nzc keys new` reports.
type keysNewSummary struct {
	Dir         string   `json:"dir"`
	URI         string   `json:"uri"`
	Request     string   `json:"request"`
	Fingerprint string   `json:"request_fingerprint_sha256"`
	Private     []string `json:"private_files"`
}

func newKeysNewCommand() *cobra.Command {
	var (
		role, id, out string
		hosts         []string
	)
	cmd := &cobra.Command{
		Use:   "new",
		Short: "Make this party's key pairs here, and a request for the administrator with their public parts",
		Long: `new makes the party's TLS key, age identity and (for hospitals, auditors and
the aggregator) ledger signing key in --out, private files with mode 0600,
and request.json beside them: the public keys, each signed by its private
half. Send request.json to the administrator and confirm its fingerprint
with them out of band. Existing keys are never replaced.`,
		Example: `  nzc keys new --role hospital --id hospital-4 --out keys
  nzc keys new --role hospital --id st-marys --out keys --hosts teacher.st-marys.example.org`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&role, "role", "", "the party's role: "+roleList())
	cmd.Flags().StringVar(&id, "id", "", "the party's id, as agreed with the administrator (e.g. hospital-4)")
	cmd.Flags().StringVar(&out, "out", "", "directory for the keys and the request (created, mode 0700)")
	cmd.Flags().StringSliceVar(&hosts, "hosts", nil, "DNS names or IP addresses the party is reached at, besides loopback")
	markRequired(cmd, "role", "id", "out")
	cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		r, err := crypto.ParseRole(role)
		if err != nil {
			return fmt.Errorf("--role: %w", err)
		}
		dir, err := filepath.Abs(out)
		if err != nil {
			return err
		}
		req, err := provision.NewKeyRequest(dir, crypto.Peer{Role: r, ID: id}, hosts, nil)
		if err != nil {
			return err
		}
		s := keysNewSummary{Dir: dir, URI: req.Peer().String(), Request: filepath.Join(dir, provision.KeyRequestFile), Fingerprint: req.Fingerprint()}
		for _, name := range []string{crypto.PartyKeyFile, crypto.AgeIdentityFile, crypto.SigningKeyFile} {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				s.Private = append(s.Private, filepath.Join(dir, name))
			}
		}
		return cli.Print(cmd.OutOrStdout(), f, s, cli.Textf("keys of %s in %s\nprivate (mode 0600, never send them): %s\n\nsend the administrator: %s\nrequest fingerprint (SHA-256), to confirm with the administrator out of band:\n  %s\n",
			s.URI, s.Dir, strings.Join(s.Private, ", "), s.Request, s.Fingerprint))
	})
	return cmd
}

// markRequired marks flags of cmd that have no default.
func markRequired(cmd *cobra.Command, names ...string) {
	for _, n := range names {
		if err := cmd.MarkFlagRequired(n); err != nil {
			panic("nzc: no flag --" + n + " to require")
		}
	}
}

func roleList() string {
	var rs []string
	for _, r := range crypto.Roles() {
		rs = append(rs, string(r))
	}
	return strings.Join(rs, ", ")
}

func newKeysInstallCommand() *cobra.Command {
	var (
		dir, bundle, fingerprint string
		force                    bool
	)
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Check the administrator's bundle against this party's keys and write its configuration",
		Long: `install checks the bundle nzc init sign made for this party: its CA
certificate must have the fingerprint you confirmed out of band, and its
certificate must name this party and hold the public half of this party's
own TLS key. It then copies the certificates and the ledger registration
next to the keys and writes the party's configuration with absolute paths.
Nothing is written unless every check passes.`,
		Example: `  nzc keys install --dir keys --bundle hospital-4-bundle --ca-fingerprint 3A:9F:…`,
		Args:    cobra.NoArgs,
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the directory nzc keys new made")
	cmd.Flags().StringVar(&bundle, "bundle", "", "the bundle directory nzc init sign made")
	cmd.Flags().StringVar(&fingerprint, "ca-fingerprint", "", "the federation CA's SHA-256 fingerprint, as confirmed with the administrator out of band")
	cmd.Flags().BoolVar(&force, "force", false, "replace certificates and configuration installed before (a renewed certificate)")
	markRequired(cmd, "dir", "bundle", "ca-fingerprint")
	cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		dir, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		s, err := provision.InstallBundle(dir, bundle, fingerprint, force, time.Now())
		if err != nil {
			return err
		}
		return cli.Print(cmd.OutOrStdout(), f, s, cli.Textf("installed the certificate of %s\nconfiguration: %s\ntrain its teachers with: nzc-teacher train --config %s --data DATA\nthen start it with: nzc-teacher run --config %s\n", s.URI, s.Config, s.Config, s.Config))
	})
	return cmd
}
