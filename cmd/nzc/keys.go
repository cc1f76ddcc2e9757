package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/internal/config"
	"github.com/nzcfed/nzc/internal/launch"
)

// A party that keeps its own keys:
//
//	party:          nzc keys new --role hospital --id hospital-4 --out keys
//	                (sends keys/request.json to the administrator)
//	administrator:  nzc init sign --dir federation --request request.json \
//	                    --role hospital --id hospital-4 --out hospital-4-bundle
//	                (sends the bundle back: public files only)
//	party:          nzc keys install --dir keys --bundle hospital-4-bundle \
//	                    --ca-fingerprint <the fingerprint confirmed out of band>

// ErrFingerprintMismatch is returned when a bundle's CA is not the one the
// party confirmed out of band.
var ErrFingerprintMismatch = errors.New("the bundle's CA certificate is not the federation CA you confirmed")

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
		req, err := crypto.NewKeyRequest(dir, crypto.Peer{Role: r, ID: id}, hosts, nil)
		if err != nil {
			return err
		}
		s := keysNewSummary{Dir: dir, URI: req.Peer().String(), Request: filepath.Join(dir, crypto.KeyRequestFile), Fingerprint: req.Fingerprint()}
		for _, name := range []string{crypto.PartyKeyFile, crypto.AgeIdentityFile, crypto.SigningKeyFile} {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				s.Private = append(s.Private, filepath.Join(dir, name))
			}
		}
		return cli.Print(cmd.OutOrStdout(), f, s, func(w io.Writer) error {
			_, err := fmt.Fprintf(w, "keys of %s in %s\nprivate (mode 0600, never send them): %s\n\nsend the administrator: %s\nrequest fingerprint (SHA-256), to confirm with the administrator out of band:\n  %s\n",
				s.URI, s.Dir, strings.Join(s.Private, ", "), s.Request, s.Fingerprint)
			return err
		})
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

// keysInstallSummary is what `nzc keys install` reports.
type keysInstallSummary struct {
	URI    string   `json:"uri"`
	Config string   `json:"config"`
	Files  []string `json:"files"`
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
		s, err := installBundle(dir, bundle, fingerprint, force, time.Now())
		if err != nil {
			return err
		}
		return cli.Print(cmd.OutOrStdout(), f, s, func(w io.Writer) error {
			_, err := fmt.Fprintf(w, "installed the certificate of %s\nconfiguration: %s\nstart it with: nzc-teacher --config %s\n", s.URI, s.Config, s.Config)
			return err
		})
	})
	return cmd
}

// installBundle checks bundle against the keys in dir (absolute) and the
// CA fingerprint confirmed out of band, then copies its public files into
// dir and writes the party's configuration there.
func installBundle(dir, bundle, fingerprint string, force bool, now time.Time) (keysInstallSummary, error) {
	req, err := crypto.LoadKeyRequest(filepath.Join(dir, crypto.KeyRequestFile))
	if err != nil {
		return keysInstallSummary{}, fmt.Errorf("%w (is --dir the directory nzc keys new made?)", err)
	}
	p := req.Peer()
	if p.Role != crypto.RoleHospital {
		return keysInstallSummary{}, fmt.Errorf("keys install sets up hospitals; %s is a %s", p, p.Role)
	}
	ca, err := crypto.LoadCert(filepath.Join(bundle, launch.BundleCACert))
	if err != nil {
		return keysInstallSummary{}, err
	}
	if got := crypto.Fingerprint(ca); normalizeFingerprint(got) != normalizeFingerprint(fingerprint) {
		return keysInstallSummary{}, fmt.Errorf("%w: it is %s, you gave %s; do not install this bundle, and ask the administrator", ErrFingerprintMismatch, got, fingerprint)
	}
	cred, err := crypto.LoadCredential(filepath.Join(bundle, crypto.PartyCertFile), filepath.Join(dir, crypto.PartyKeyFile))
	if err != nil {
		return keysInstallSummary{}, fmt.Errorf("the bundle's certificate is not for this party's key: %w", err)
	}
	got, err := crypto.VerifyPeer(ca, [][]byte{cred.Cert.Raw}, now, crypto.UsageClient)
	if err != nil {
		return keysInstallSummary{}, err
	}
	if got != p {
		return keysInstallSummary{}, fmt.Errorf("the bundle's certificate names %s, but these keys are %s's", got, p)
	}
	cfgPath := filepath.Join(bundle, p.ID+".yaml")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return keysInstallSummary{}, fmt.Errorf("read the bundle's configuration: %w", err)
	}
	var c config.Teacher
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return keysInstallSummary{}, fmt.Errorf("%s: %w", cfgPath, err)
	}
	if c.ID != p.ID {
		return keysInstallSummary{}, fmt.Errorf("%s configures %q, but these keys are %s's", cfgPath, c.ID, p)
	}
	files := map[string][]byte{}
	names := []string{launch.BundleCACert, crypto.PartyCertFile}
	// A registration comes with a hospital admitted after the genesis.
	if c.Registration != "" {
		names = append(names, launch.RegistrationFile)
	}
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(bundle, name))
		if err != nil {
			return keysInstallSummary{}, fmt.Errorf("the bundle lacks a file: %w", err)
		}
		files[name] = data
	}
	in := func(path string) string {
		if path == "" || filepath.IsAbs(path) {
			return path
		}
		return filepath.Join(dir, path)
	}
	c.TLS = config.TLS{CA: in(launch.BundleCACert), Cert: in(crypto.PartyCertFile), Key: in(crypto.PartyKeyFile)}
	c.AgeIdentity, c.SigningKey = in(crypto.AgeIdentityFile), in(crypto.SigningKeyFile)
	c.Registration, c.Models, c.Data, c.State = in(c.Registration), in(c.Models), in(c.Data), in(c.State)
	if err := c.Validate(); err != nil {
		return keysInstallSummary{}, fmt.Errorf("the bundle's configuration: %w", err)
	}
	out, err := yaml.Marshal(c)
	if err != nil {
		return keysInstallSummary{}, err
	}
	header := fmt.Sprintf("# hospital configuration of %s, installed by `nzc keys install`.\n# Flags and NZC_* environment variables override these keys.\n", p.ID)
	files[p.ID+".yaml"] = append([]byte(header), out...)
	if !force {
		for name := range files {
			if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
				return keysInstallSummary{}, fmt.Errorf("%w: %s (a bundle was installed before; use --force to replace it)", crypto.ErrExists, filepath.Join(dir, name))
			}
		}
	}
	s := keysInstallSummary{URI: p.String(), Config: filepath.Join(dir, p.ID+".yaml")}
	for _, name := range append(names, p.ID+".yaml") {
		path := filepath.Join(dir, name)
		if err := crypto.WriteFile(path, files[name], crypto.PublicFileMode, force); err != nil {
			return keysInstallSummary{}, err
		}
		s.Files = append(s.Files, path)
	}
	return s, nil
}

// normalizeFingerprint lets a fingerprint be given with or without colons,
// in either case.
func normalizeFingerprint(s string) string {
	return strings.ToUpper(strings.NewReplacer(":", "", " ", "").Replace(strings.TrimSpace(s)))
}
