package launch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/nzcfed/nzc/crypto"
)

// This file writes a kit: what one party of a federation needs to run on
// its own machine (`nzc init kit`).

// Kit is what WriteKit wrote: what `nzc init kit` reports.
type Kit struct {
	URI     string   `json:"uri"`
	Kit     string   `json:"kit"`
	Config  string   `json:"config"`
	Private []string `json:"private_files"`
}

// WriteKit writes the kit of party id of the federation in dir to out,
// which must not exist yet.
func WriteKit(dir, id, out string, pt Ports) (Kit, error) {
	m, err := crypto.LoadManifest(dir)
	if err != nil {
		return Kit{}, err
	}
	var p crypto.PartyFiles
	found := false
	for _, q := range m.Parties {
		if q.ID == id {
			p, found = q, true
		}
	}
	if !found {
		return Kit{}, fmt.Errorf("no party %q in the federation in %s; nzc init lists them", id, dir)
	}
	if _, err := os.Lstat(out); err == nil {
		return Kit{}, fmt.Errorf("%w: %s; give --out a new directory", crypto.ErrExists, out)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Kit{}, err
	}
	cfgs, err := PartyConfigs(m, pt)
	if err != nil {
		return Kit{}, err
	}
	// Public files: the manifest, the genesis, the CA certificate and
	// every party's certificate, public keys and registration.
	public := []string{crypto.ManifestFile, GenesisFile, m.CACert}
	if m.AdminVerifyingKey != "" {
		public = append(public, m.AdminVerifyingKey)
	}
	for _, q := range m.Parties {
		public = append(public, q.Cert, filepath.Join(q.ID, crypto.AgeRecipientFile))
		if q.VerifyingKey != "" {
			public = append(public, q.VerifyingKey)
		}
		if _, err := os.Stat(m.Path(filepath.Join(q.ID, RegistrationFile))); err == nil {
			public = append(public, filepath.Join(q.ID, RegistrationFile))
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
			return Kit{}, fmt.Errorf("the federation lacks a file: %w", err)
		}
		files[rel] = data
	}
	s := Kit{URI: p.URI, Kit: out}
	// The compliance officer runs no service: its kit is a federation
	// directory for nzc ledger, without a configuration.
	var cfg []byte
	if c, ok := cfgs[p.ID]; ok {
		enc, err := relativeConfig(c, m.Dir)
		if err != nil {
			return Kit{}, err
		}
		header := fmt.Sprintf("# %s configuration of %s, written by `nzc init kit`.\n# Paths are relative to the kit: run the party in it.\n", p.Role, p.ID)
		cfg, s.Config = append([]byte(header), enc...), filepath.Join(out, p.ID+".yaml")
	}
	for _, rel := range public {
		if err := writeKitFile(out, rel, files[rel], crypto.PublicFileMode); err != nil {
			return Kit{}, err
		}
	}
	for _, rel := range private {
		if err := writeKitFile(out, rel, files[rel], crypto.PrivateFileMode); err != nil {
			return Kit{}, err
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
