package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/cmd/internal/config"
	"github.com/nzcfed/nzc/crypto"
)

// signSummary is what `nzc init sign` reports.
type signSummary struct {
	URI                string   `json:"uri"`
	RequestFingerprint string   `json:"request_fingerprint_sha256"`
	CAFingerprint      string   `json:"ca_fingerprint_sha256"`
	Bundle             string   `json:"bundle"`
	Files              []string `json:"files"`
}

func newInitSignCommand() *cobra.Command {
	var (
		dir, request, role, id, out, fingerprint string
		hosts                                    []string
		basePort                                 int
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

A request for another role or id than approved is refused and changes
nothing. Confirm the request's fingerprint with the hospital out of band
(--fingerprint checks it for you).`,
		Example: `  nzc init sign --dir federation --request request.json --role hospital --id hospital-4 --out hospital-4-bundle`,
		Args:    cobra.NoArgs,
	}
	cmd.Flags().StringVar(&dir, "dir", "federation", "directory of an existing federation")
	cmd.Flags().StringVar(&request, "request", "", "the request.json the party made with nzc keys new")
	cmd.Flags().StringVar(&role, "role", "", "the role you approve for this party (hospital)")
	cmd.Flags().StringVar(&id, "id", "", "the id you approve for this party")
	cmd.Flags().StringVar(&out, "out", "", "new directory for the bundle to send back to the party")
	cmd.Flags().StringVar(&fingerprint, "fingerprint", "", "the request fingerprint the party told you out of band; refused if it differs")
	cmd.Flags().StringSliceVar(&hosts, "hosts", nil, "extra DNS names or IP addresses for the certificate, besides the request's")
	cmd.Flags().IntVar(&basePort, "base-port", 7400, "first port of the federation's loopback addresses (as given to init)")
	markRequired(cmd, "request", "role", "id", "out")
	cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		r, err := crypto.ParseRole(role)
		if err != nil {
			return fmt.Errorf("--role: %w", err)
		}
		if r != crypto.RoleHospital {
			return fmt.Errorf("%w: only hospitals join a federation after its genesis; the other parties are named in the genesis by nzc init", crypto.ErrNotApproved)
		}
		dir, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		s, err := signRequest(dir, request, crypto.Peer{Role: r, ID: id}, out, fingerprint, hosts, ports{basePort})
		if err != nil {
			return err
		}
		return cli.Print(cmd.OutOrStdout(), f, s, func(w io.Writer) error {
			_, err := fmt.Fprintf(w, "issued a certificate to %s (request %s)\nbundle for the party, public files only: %s\nthe party installs it with:\n  nzc keys install --dir <its key directory> --bundle %s --ca-fingerprint %s\n",
				s.URI, s.RequestFingerprint, s.Bundle, filepath.Base(s.Bundle), s.CAFingerprint)
			return err
		})
	})
	return cmd
}

// signRequest admits the party of the request file as approved, and writes
// its bundle in out, which must not exist yet. Every check on the input is
// made before the federation changes.
func signRequest(dir, request string, approved crypto.Peer, out, fingerprint string, hosts []string, pt ports) (signSummary, error) {
	req, err := crypto.LoadKeyRequest(request)
	if err != nil {
		return signSummary{}, err
	}
	if req.Peer() != approved {
		return signSummary{}, fmt.Errorf("%w: %s asks for %s, but you approved %s; nothing was signed", crypto.ErrNotApproved, request, req.Peer(), approved)
	}
	if fingerprint != "" && normalizeFingerprint(fingerprint) != normalizeFingerprint(req.Fingerprint()) {
		return signSummary{}, fmt.Errorf("%w: %s has fingerprint %s, not the %s the party gave; nothing was signed", crypto.ErrNotApproved, request, req.Fingerprint(), fingerprint)
	}
	if _, err := os.Lstat(out); err == nil {
		return signSummary{}, fmt.Errorf("%w: %s; give --out a new directory", crypto.ErrExists, out)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return signSummary{}, err
	}
	m, p, err := crypto.AddPartyFromRequest(dir, req, approved, crypto.AddPartyOptions{Hosts: hosts})
	if err != nil {
		return signSummary{}, err
	}
	reg, err := writeRegistration(m, p)
	if err != nil {
		return signSummary{}, err
	}
	cfgs, err := partyConfigs(m, pt)
	if err != nil {
		return signSummary{}, err
	}
	tc := cfgs[p.ID].(config.Teacher)
	tc.Registration = RegistrationFile
	cfg, err := yaml.Marshal(tc)
	if err != nil {
		return signSummary{}, err
	}
	header := fmt.Sprintf("# hospital configuration of %s, written by `nzc init sign`.\n# Paths are relative to the hospital's key directory until `nzc keys install`.\n", p.ID)
	files := []struct {
		name string
		from string
		data []byte
	}{
		{name: bundleCACert, from: m.Path(m.CACert)},
		{name: crypto.PartyCertFile, from: m.Path(p.Cert)},
		{name: RegistrationFile, from: reg},
		{name: p.ID + ".yaml", data: append([]byte(header), cfg...)},
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return signSummary{}, fmt.Errorf("create the bundle directory: %w; %s is admitted already, so send it %s, %s and %s by hand", err, p.ID, m.Path(m.CACert), m.Path(p.Cert), reg)
	}
	s := signSummary{URI: p.URI, RequestFingerprint: req.Fingerprint(), CAFingerprint: m.CAFingerprint, Bundle: out}
	for _, f := range files {
		data := f.data
		if f.from != "" {
			if data, err = os.ReadFile(f.from); err != nil {
				return signSummary{}, err
			}
		}
		path := filepath.Join(out, f.name)
		if err := crypto.WriteFile(path, data, crypto.PublicFileMode, false); err != nil {
			return signSummary{}, err
		}
		s.Files = append(s.Files, path)
	}
	return s, nil
}
