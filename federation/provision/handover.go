package provision

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/config"
	"github.com/nzcfed/nzc/party/auditor/intake"
)

// This file writes what the administrator hands a party to run on its own
// machine: its kit, with the keys the administrator made for it (`nzc init
// kit`), or, for a party that keeps its own keys, a bundle of public files
// admitting its key request (`nzc init sign`), which the party checks and
// installs next to its keys (`nzc keys install`).

// ErrFingerprintMismatch is returned when a bundle's CA is not the one the
// party confirmed out of band.
var ErrFingerprintMismatch = errors.New("the bundle's CA certificate is not the federation CA you confirmed")

// Bundle is what SignRequest wrote: what `nzc init sign` reports.
type Bundle struct {
	URI                string   `json:"uri"`
	RequestFingerprint string   `json:"request_fingerprint_sha256"`
	CAFingerprint      string   `json:"ca_fingerprint_sha256"`
	Bundle             string   `json:"bundle"`
	Files              []string `json:"files"`
}

// reservedID reports whether id names a party no request may take: the
// administrator, which signs the genesis and the registrations.
func reservedID(id string) bool { return id == intake.AdminID }

// SignRequest admits the party of the request file as approved (or, with
// renew, issues it a new certificate for the same keys), and writes its
// bundle in out, which must not exist yet. The request's fingerprint,
// confirmed with the party out of band, is required: without it a swapped
// request would be admitted. Every check on the input is made before the
// federation changes. The configuration has the addresses of the
// federation's topology file (or, without one, loopback from basePort).
func SignRequest(dir, request string, approved crypto.Peer, out, fingerprint string, hosts []string, basePort int, renew bool) (Bundle, error) {
	req, err := LoadKeyRequest(request)
	if err != nil {
		return Bundle{}, err
	}
	if req.Peer() != approved {
		return Bundle{}, fmt.Errorf("%w: %s asks for %s, but you approved %s; nothing was signed", ErrNotApproved, request, req.Peer(), approved)
	}
	if reservedID(approved.ID) {
		return Bundle{}, fmt.Errorf("%w: %q is reserved for the federation's administrator; give the party another id; nothing was signed", ErrNotApproved, approved.ID)
	}
	if fingerprint == "" {
		return Bundle{}, fmt.Errorf("%w: no request fingerprint given: confirm the fingerprint of %s (%s) with the party out of band and give it; nothing was signed", ErrNotApproved, request, req.Fingerprint())
	}
	if !sameFingerprint(fingerprint, req.Fingerprint()) {
		return Bundle{}, fmt.Errorf("%w: %s has fingerprint %s, not the %s the party gave; nothing was signed", ErrNotApproved, request, req.Fingerprint(), fingerprint)
	}
	if err := newDir(out); err != nil {
		return Bundle{}, err
	}
	topo, err := ReadTopology(dir, basePort)
	if err != nil {
		return Bundle{}, err
	}
	add, reg := AddPartyFromRequest, ""
	if renew {
		add = RenewFromRequest
	}
	m, p, err := add(dir, req, approved, AddPartyOptions{Hosts: hosts})
	if err != nil {
		return Bundle{}, err
	}
	if !renew {
		if reg, err = WriteRegistration(m, p, 0); err != nil {
			return Bundle{}, err
		}
	} else if path := filepath.Join(m.Dir, p.ID, RegistrationFile); fileExists(path) {
		reg = path // the ledger registered the hospital with the same key
	}
	cfgs, err := PartyConfigs(m, topo)
	if err != nil {
		return Bundle{}, err
	}
	tc := cfgs[p.ID].(config.Teacher)
	if reg != "" {
		tc.Registration = RegistrationFile
	}
	cfg, err := yaml.Marshal(tc)
	if err != nil {
		return Bundle{}, err
	}
	header := fmt.Sprintf("# hospital configuration of %s, written by `nzc init sign`.\n# Paths are relative to the hospital's key directory until `nzc keys install`.\n", p.ID)
	type bundleFile struct {
		name, from string // from: a file to copy; else data
		data       []byte
	}
	files := []bundleFile{
		{name: BundleCACert, from: m.Path(m.CACert)},
		{name: crypto.PartyCertFile, from: m.Path(p.Cert)},
		{name: p.ID + ".yaml", data: append([]byte(header), cfg...)},
	}
	if reg != "" {
		files = append(files, bundleFile{name: RegistrationFile, from: reg})
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return Bundle{}, fmt.Errorf("create the bundle directory: %w; %s is admitted already, so send it %s, %s and %s by hand", err, p.ID, m.Path(m.CACert), m.Path(p.Cert), reg)
	}
	s := Bundle{URI: p.URI, RequestFingerprint: req.Fingerprint(), CAFingerprint: m.CAFingerprint, Bundle: out}
	for _, f := range files {
		data := f.data
		if f.from != "" {
			if data, err = os.ReadFile(f.from); err != nil {
				return Bundle{}, err
			}
		}
		path := filepath.Join(out, f.name)
		if err := crypto.WriteFile(path, data, crypto.PublicFileMode, false); err != nil {
			return Bundle{}, err
		}
		s.Files = append(s.Files, path)
	}
	return s, nil
}

// Installed is what InstallBundle wrote: what `nzc keys install` reports.
type Installed struct {
	URI    string   `json:"uri"`
	Config string   `json:"config"`
	Files  []string `json:"files"`
}

// InstallBundle checks bundle against the keys in dir (absolute) and the
// CA fingerprint confirmed out of band, then copies its public files into
// dir and writes the party's configuration there.
func InstallBundle(dir, bundle, fingerprint string, force bool, now time.Time) (Installed, error) {
	req, err := LoadKeyRequest(filepath.Join(dir, KeyRequestFile))
	if err != nil {
		return Installed{}, fmt.Errorf("%w (is --dir the directory nzc keys new made?)", err)
	}
	p := req.Peer()
	if p.Role != crypto.RoleHospital {
		return Installed{}, fmt.Errorf("keys install sets up hospitals; %s is a %s", p, p.Role)
	}
	ca, err := crypto.LoadCert(filepath.Join(bundle, BundleCACert))
	if err != nil {
		return Installed{}, err
	}
	if got := crypto.Fingerprint(ca); !sameFingerprint(got, fingerprint) {
		return Installed{}, fmt.Errorf("%w: it is %s, you gave %s; do not install this bundle, and ask the administrator", ErrFingerprintMismatch, got, fingerprint)
	}
	cred, err := crypto.LoadCredential(filepath.Join(bundle, crypto.PartyCertFile), filepath.Join(dir, crypto.PartyKeyFile))
	if err != nil {
		return Installed{}, fmt.Errorf("the bundle's certificate is not for this party's key: %w", err)
	}
	got, err := crypto.VerifyPeer(ca, [][]byte{cred.Cert.Raw}, now, crypto.UsageClient)
	if err != nil {
		return Installed{}, err
	}
	if got != p {
		return Installed{}, fmt.Errorf("the bundle's certificate names %s, but these keys are %s's", got, p)
	}
	cfgPath := filepath.Join(bundle, p.ID+".yaml")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return Installed{}, fmt.Errorf("read the bundle's configuration: %w", err)
	}
	var c config.Teacher
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return Installed{}, fmt.Errorf("%s: %w", cfgPath, err)
	}
	if c.ID != p.ID {
		return Installed{}, fmt.Errorf("%s configures %q, but these keys are %s's", cfgPath, c.ID, p)
	}
	files := map[string][]byte{}
	names := []string{BundleCACert, crypto.PartyCertFile}
	// A registration comes with a hospital admitted after the genesis.
	if c.Registration != "" {
		names = append(names, RegistrationFile)
	}
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(bundle, name))
		if err != nil {
			return Installed{}, fmt.Errorf("the bundle lacks a file: %w", err)
		}
		files[name] = data
	}
	in := func(path string) string {
		if path == "" || filepath.IsAbs(path) {
			return path
		}
		return filepath.Join(dir, path)
	}
	c.TLS = config.TLS{CA: in(BundleCACert), Cert: in(crypto.PartyCertFile), Key: in(crypto.PartyKeyFile)}
	c.AgeIdentity, c.SigningKey = in(crypto.AgeIdentityFile), in(crypto.SigningKeyFile)
	c.Registration, c.Models, c.Data, c.State = in(c.Registration), in(c.Models), in(c.Data), in(c.State)
	if err := c.Validate(); err != nil {
		return Installed{}, fmt.Errorf("the bundle's configuration: %w", err)
	}
	out, err := yaml.Marshal(c)
	if err != nil {
		return Installed{}, err
	}
	header := fmt.Sprintf("# hospital configuration of %s, installed by `nzc keys install`.\n# Flags and NZC_* environment variables override these keys.\n", p.ID)
	files[p.ID+".yaml"] = append([]byte(header), out...)
	if !force {
		for name := range files {
			if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
				return Installed{}, fmt.Errorf("%w: %s (a bundle was installed before; use --force to replace it)", crypto.ErrExists, filepath.Join(dir, name))
			}
		}
	}
	s := Installed{URI: p.String(), Config: filepath.Join(dir, p.ID+".yaml")}
	for _, name := range append(names, p.ID+".yaml") {
		path := filepath.Join(dir, name)
		if err := crypto.WriteFile(path, files[name], crypto.PublicFileMode, force); err != nil {
			return Installed{}, err
		}
		s.Files = append(s.Files, path)
	}
	return s, nil
}

// sameFingerprint tells whether two fingerprints are one, given with or
// without colons, in either case.
func sameFingerprint(a, b string) bool {
	norm := func(s string) string {
		return strings.ToUpper(strings.NewReplacer(":", "", " ", "").Replace(strings.TrimSpace(s)))
	}
	return norm(a) == norm(b)
}

// newDir refuses out unless nothing is there yet.
func newDir(out string) error {
	if _, err := os.Lstat(out); err == nil {
		return fmt.Errorf("%w: %s; give --out a new directory", crypto.ErrExists, out)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Kit is what WriteKit wrote: what `nzc init kit` reports.
type Kit struct {
	URI     string   `json:"uri"`
	Kit     string   `json:"kit"`
	Config  string   `json:"config"`
	Private []string `json:"private_files"`
}

// WriteKit writes the kit of party id of the federation in dir to out,
// which must not exist yet, with the addresses of the federation's
// topology file (or, without one, loopback from basePort). Every kit holds
// the topology file: the compliance officer's commands find the auditors
// there.
func WriteKit(dir, id, out string, basePort int) (Kit, error) {
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
	if err := newDir(out); err != nil {
		return Kit{}, err
	}
	topo, err := ReadTopology(dir, basePort)
	if err != nil {
		return Kit{}, err
	}
	cfgs, err := PartyConfigs(m, topo)
	if err != nil {
		return Kit{}, err
	}
	// Public files: the manifest, the genesis, the CA certificate and
	// every party's certificate, public keys and registration.
	public := []string{crypto.ManifestFile, GenesisFile, m.CACert}
	if m.AdminVerifyingKey != "" {
		public = append(public, m.AdminVerifyingKey)
	}
	if fileExists(m.Path(TopologyFile)) {
		public = append(public, TopologyFile)
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
