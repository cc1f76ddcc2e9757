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
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/internal/config"
	"github.com/nzcfed/nzc/internal/launch"
)

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

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

A request for another role or id than approved is refused and changes
nothing. Confirm the request's fingerprint with the hospital out of band
(--fingerprint checks it for you).

With --renew, sign issues a new certificate to a hospital already in the
federation, for the same keys (its original request): the ledger and the
students keep its signing key and age recipient, so only the certificate
changes. The hospital installs the bundle with nzc keys install --force.`,
		Example: `  nzc init sign --dir federation --request request.json --role hospital --id hospital-4 --out hospital-4-bundle

  # Two years later, a new certificate for the same keys:
  nzc init sign --dir federation --request request.json --role hospital --id hospital-4 --renew --out hospital-4-renewed`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&dir, "dir", "federation", "directory of an existing federation")
	cmd.Flags().StringVar(&request, "request", "", "the request.json the party made with nzc keys new")
	cmd.Flags().StringVar(&role, "role", "", "the role you approve for this party (hospital)")
	cmd.Flags().StringVar(&id, "id", "", "the id you approve for this party")
	cmd.Flags().StringVar(&out, "out", "", "new directory for the bundle to send back to the party")
	cmd.Flags().StringVar(&fingerprint, "fingerprint", "", "the request fingerprint the party told you out of band; refused if it differs")
	cmd.Flags().StringSliceVar(&hosts, "hosts", nil, "extra DNS names or IP addresses for the certificate, besides the request's")
	cmd.Flags().IntVar(&basePort, "base-port", 7400, "first port of the federation's loopback addresses (as given to init)")
	cmd.Flags().BoolVar(&renew, "renew", false, "issue a new certificate to a hospital already admitted, for the same keys")
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
		s, err := signRequest(dir, request, crypto.Peer{Role: r, ID: id}, out, fingerprint, hosts, launch.Ports{Base: basePort}, renew)
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

// signRequest admits the party of the request file as approved (or, with
// renew, issues it a new certificate for the same keys), and writes its
// bundle in out, which must not exist yet. Every check on the input is made
// before the federation changes.
func signRequest(dir, request string, approved crypto.Peer, out, fingerprint string, hosts []string, pt launch.Ports, renew bool) (signSummary, error) {
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
	add, reg := crypto.AddPartyFromRequest, ""
	if renew {
		add = crypto.RenewFromRequest
	}
	m, p, err := add(dir, req, approved, crypto.AddPartyOptions{Hosts: hosts})
	if err != nil {
		return signSummary{}, err
	}
	if !renew {
		if reg, err = launch.WriteRegistration(m, p, 0); err != nil {
			return signSummary{}, err
		}
	} else if path := filepath.Join(m.Dir, p.ID, launch.RegistrationFile); fileExists(path) {
		reg = path // the ledger registered the hospital with the same key
	}
	cfgs, err := launch.PartyConfigs(m, pt)
	if err != nil {
		return signSummary{}, err
	}
	tc := cfgs[p.ID].(config.Teacher)
	if reg != "" {
		tc.Registration = launch.RegistrationFile
	}
	cfg, err := yaml.Marshal(tc)
	if err != nil {
		return signSummary{}, err
	}
	header := fmt.Sprintf("# hospital configuration of %s, written by `nzc init sign`.\n# Paths are relative to the hospital's key directory until `nzc keys install`.\n", p.ID)
	type bundleFile struct {
		name, from string // from: a file to copy; else data
		data       []byte
	}
	files := []bundleFile{
		{name: launch.BundleCACert, from: m.Path(m.CACert)},
		{name: crypto.PartyCertFile, from: m.Path(p.Cert)},
		{name: p.ID + ".yaml", data: append([]byte(header), cfg...)},
	}
	if reg != "" {
		files = append(files, bundleFile{name: launch.RegistrationFile, from: reg})
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
