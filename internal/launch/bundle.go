package launch

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
	"github.com/nzcfed/nzc/internal/config"
)

// This file admits a party that keeps its own keys: the administrator
// signs its key request into a bundle of public files (`nzc init sign`),
// and the party checks and installs the bundle next to its keys (`nzc keys
// install`).

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

// SignRequest admits the party of the request file as approved (or, with
// renew, issues it a new certificate for the same keys), and writes its
// bundle in out, which must not exist yet. Every check on the input is made
// before the federation changes.
func SignRequest(dir, request string, approved crypto.Peer, out, fingerprint string, hosts []string, pt Ports, renew bool) (Bundle, error) {
	req, err := crypto.LoadKeyRequest(request)
	if err != nil {
		return Bundle{}, err
	}
	if req.Peer() != approved {
		return Bundle{}, fmt.Errorf("%w: %s asks for %s, but you approved %s; nothing was signed", crypto.ErrNotApproved, request, req.Peer(), approved)
	}
	if fingerprint != "" && !sameFingerprint(fingerprint, req.Fingerprint()) {
		return Bundle{}, fmt.Errorf("%w: %s has fingerprint %s, not the %s the party gave; nothing was signed", crypto.ErrNotApproved, request, req.Fingerprint(), fingerprint)
	}
	if _, err := os.Lstat(out); err == nil {
		return Bundle{}, fmt.Errorf("%w: %s; give --out a new directory", crypto.ErrExists, out)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Bundle{}, err
	}
	add, reg := crypto.AddPartyFromRequest, ""
	if renew {
		add = crypto.RenewFromRequest
	}
	m, p, err := add(dir, req, approved, crypto.AddPartyOptions{Hosts: hosts})
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
	cfgs, err := PartyConfigs(m, pt)
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
	req, err := crypto.LoadKeyRequest(filepath.Join(dir, crypto.KeyRequestFile))
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

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
