package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/internal/launch"
)

// kitSummary is what `nzc init kit` reports.
type kitSummary struct {
	URI     string   `json:"uri"`
	Kit     string   `json:"kit"`
	Config  string   `json:"config"`
	Private []string `json:"private_files"`
}

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

Addresses in the configuration are the loopback ones nzc init wrote: set the
real ones (aggregator, auditors, peers, listen) before starting the party.`,
		Example: `  nzc init kit --dir federation --party auditor-1 --out auditor-1-kit`,
		Args:    cobra.NoArgs,
	}
	cmd.Flags().StringVar(&dir, "dir", "federation", "directory of an existing federation")
	cmd.Flags().StringVar(&party, "party", "", "the party's id (e.g. auditor-1)")
	cmd.Flags().StringVar(&out, "out", "", "new directory for the kit")
	cmd.Flags().IntVar(&basePort, "base-port", 7400, "first port of the federation's loopback addresses (as given to init)")
	markRequired(cmd, "party", "out")
	cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		dir, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		s, err := writeKit(dir, party, out, launch.Ports{Base: basePort})
		if err != nil {
			return err
		}
		return cli.Print(cmd.OutOrStdout(), f, s, func(w io.Writer) error {
			_, err := fmt.Fprintf(w, "kit of %s in %s\nconfiguration (paths relative to the kit): %s\nprivate files, mode 0600: %s\n",
				s.URI, s.Kit, s.Config, strings.Join(s.Private, ", "))
			return err
		})
	})
	return cmd
}

// writeKit writes the kit of party id of the federation in dir to out,
// which must not exist yet.
func writeKit(dir, id, out string, pt launch.Ports) (kitSummary, error) {
	m, err := crypto.LoadManifest(dir)
	if err != nil {
		return kitSummary{}, err
	}
	var p crypto.PartyFiles
	found := false
	for _, q := range m.Parties {
		if q.ID == id {
			p, found = q, true
		}
	}
	if !found {
		return kitSummary{}, fmt.Errorf("no party %q in the federation in %s; nzc init lists them", id, dir)
	}
	if _, err := os.Lstat(out); err == nil {
		return kitSummary{}, fmt.Errorf("%w: %s; give --out a new directory", crypto.ErrExists, out)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return kitSummary{}, err
	}
	cfgs, err := launch.PartyConfigs(m, pt)
	if err != nil {
		return kitSummary{}, err
	}
	// Public files: the manifest, the genesis, the CA certificate and
	// every party's certificate, public keys and registration.
	public := []string{crypto.ManifestFile, launch.GenesisFile, m.CACert}
	if m.AdminVerifyingKey != "" {
		public = append(public, m.AdminVerifyingKey)
	}
	for _, q := range m.Parties {
		public = append(public, q.Cert, filepath.Join(q.ID, crypto.AgeRecipientFile))
		if q.VerifyingKey != "" {
			public = append(public, q.VerifyingKey)
		}
		if _, err := os.Stat(m.Path(filepath.Join(q.ID, launch.RegistrationFile))); err == nil {
			public = append(public, filepath.Join(q.ID, launch.RegistrationFile))
		}
	}
	var private []string
	for _, f := range []string{p.Key, p.AgeIdentity, p.SigningKey} {
		if f != "" {
			private = append(private, f)
		}
	}
	files := map[string][]byte{}
	for _, rel := range append(append([]string(nil), public...), private...) {
		data, err := os.ReadFile(m.Path(rel))
		if err != nil {
			return kitSummary{}, fmt.Errorf("the federation lacks a file: %w", err)
		}
		files[rel] = data
	}
	s := kitSummary{URI: p.URI, Kit: out}
	// The compliance officer runs no service: its kit is a federation
	// directory for nzc ledger, without a configuration.
	var cfg []byte
	if c, ok := cfgs[p.ID]; ok {
		enc, err := relativeConfig(c, m.Dir)
		if err != nil {
			return kitSummary{}, err
		}
		header := fmt.Sprintf("# %s configuration of %s, written by `nzc init kit`.\n# Paths are relative to the kit: run the party in it.\n", p.Role, p.ID)
		cfg, s.Config = append([]byte(header), enc...), filepath.Join(out, p.ID+".yaml")
	}
	for _, rel := range public {
		if err := writeKitFile(out, rel, files[rel], crypto.PublicFileMode); err != nil {
			return kitSummary{}, err
		}
	}
	for _, rel := range private {
		if err := writeKitFile(out, rel, files[rel], crypto.PrivateFileMode); err != nil {
			return kitSummary{}, err
		}
		s.Private = append(s.Private, filepath.Join(out, rel))
	}
	if cfg == nil {
		return s, nil
	}
	return s, writeKitFile(out, p.ID+".yaml", cfg, crypto.PublicFileMode)
}

func writeKitFile(out, rel string, data []byte, perm fs.FileMode) error {
	path := filepath.Join(out, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create the kit: %w", err)
	}
	return crypto.WriteFile(path, data, perm, false)
}

// relativeConfig encodes a party's configuration with every path under
// the federation directory dir made relative to it.
func relativeConfig(c any, dir string) ([]byte, error) {
	var n yaml.Node
	if err := n.Encode(c); err != nil {
		return nil, err
	}
	prefix := dir + string(filepath.Separator)
	var walk func(*yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.ScalarNode {
			n.Value = strings.TrimPrefix(n.Value, prefix)
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&n)
	return yaml.Marshal(&n)
}
