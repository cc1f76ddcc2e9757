package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/config"
	"github.com/nzcfed/nzc/federation/provision"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/intake"
	"github.com/nzcfed/nzc/party/teacher"
)

// TestKeyRequestFlow runs the flow of a hospital that keeps its own keys,
// as the commands run it, and checks after every step that the
// administrator's directory holds none of the hospital's private keys.
func TestKeyRequestFlow(t *testing.T) {
	root := t.TempDir()
	admin, keys := filepath.Join(root, "admin"), filepath.Join(root, "hospital-4-keys")
	bundle := filepath.Join(root, "bundle")
	mustRunNZC(t, "init", "--dir", admin, "--hospitals", "2", "--auditors", "1", "--students", "1")
	out := mustRunNZC(t, "keys", "new", "--role", "hospital", "--id", "hospital-4", "--out", keys, "--format", "json")
	var made keysNewSummary
	if err := json.Unmarshal([]byte(out), &made); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(made.Private) != 3 {
		t.Fatalf("private files %v, want tls.key, age.key and sign.key", made.Private)
	}
	for _, p := range made.Private {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, %v", p, fi, err)
		}
	}
	secrets := hospitalSecrets(t, keys)
	noSecrets := func(step string) {
		t.Helper()
		for _, d := range []string{admin, bundle} {
			if p := fileHolding(t, d, secrets); p != "" {
				t.Fatalf("after %s, %s holds a private key of hospital-4", step, p)
			}
		}
	}
	noSecrets("keys new")
	manifest := func() []byte {
		b, err := os.ReadFile(filepath.Join(admin, crypto.ManifestFile))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	before := manifest()
	request := filepath.Join(keys, provision.KeyRequestFile)
	for _, tc := range []struct {
		name string
		args []string
		want error
	}{
		{"another id", []string{"--role", "hospital", "--id", "hospital-5", "--fingerprint", made.Fingerprint}, provision.ErrNotApproved},
		{"another role", []string{"--role", "auditor", "--id", "hospital-4", "--fingerprint", made.Fingerprint}, provision.ErrNotApproved},
		{"a role that joins only at the genesis", []string{"--role", "student", "--id", "hospital-4", "--fingerprint", made.Fingerprint}, provision.ErrNotApproved},
		{"another fingerprint", []string{"--role", "hospital", "--id", "hospital-4", "--fingerprint", "00:11"}, provision.ErrNotApproved},
		{"an id already used", []string{"--role", "hospital", "--id", "hospital-1", "--fingerprint", made.Fingerprint}, provision.ErrNotApproved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"init", "sign", "--dir", admin, "--request", request, "--out", bundle}, tc.args...)
			if _, err := runNZC(t, args...); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if !bytes.Equal(manifest(), before) {
				t.Fatal("a refused request changed the federation")
			}
			for _, p := range []string{bundle, filepath.Join(admin, "hospital-4")} {
				if _, err := os.Lstat(p); err == nil {
					t.Fatalf("a refused request left %s", p)
				}
			}
		})
	}
	// Without the fingerprint confirmed out of band nothing is signed,
	// from the command or from the library.
	if _, err := runNZC(t, "init", "sign", "--dir", admin, "--request", request, "--role", "hospital", "--id", "hospital-4", "--out", bundle); err == nil || !strings.Contains(err.Error(), "fingerprint") {
		t.Fatalf("init sign without --fingerprint: %v", err)
	}
	if _, err := provision.SignRequest(admin, request, crypto.Peer{Role: crypto.RoleHospital, ID: "hospital-4"}, bundle, "", nil, 7400, false); !errors.Is(err, provision.ErrNotApproved) {
		t.Fatalf("SignRequest without a fingerprint: %v, want ErrNotApproved", err)
	}
	// The administrator's id is reserved, whatever a request asks.
	adminKeys := filepath.Join(root, "admin-keys")
	mustRunNZC(t, "keys", "new", "--role", "hospital", "--id", "federation-admin", "--out", adminKeys)
	adminReq, err := provision.LoadKeyRequest(filepath.Join(adminKeys, provision.KeyRequestFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runNZC(t, "init", "sign", "--dir", admin, "--request", filepath.Join(adminKeys, provision.KeyRequestFile), "--role", "hospital", "--id", "federation-admin",
		"--fingerprint", adminReq.Fingerprint(), "--out", bundle); !errors.Is(err, provision.ErrNotApproved) {
		t.Fatalf("admitting federation-admin: %v, want ErrNotApproved", err)
	}
	if !bytes.Equal(manifest(), before) {
		t.Fatal("a refused request changed the federation")
	}
	out = mustRunNZC(t, "init", "sign", "--dir", admin, "--request", request, "--role", "hospital", "--id", "hospital-4",
		"--fingerprint", made.Fingerprint, "--out", bundle, "--format", "json")
	var signed provision.Bundle
	if err := json.Unmarshal([]byte(out), &signed); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	noSecrets("init sign")
	m, err := crypto.LoadManifest(admin)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := m.Party(crypto.RoleHospital, "hospital-4")
	if !ok || p.Key != "" || p.SigningKey != "" || p.AgeIdentity != "" {
		t.Fatalf("manifest entry of hospital-4: %+v", p)
	}
	// The registration is signed by the administrator key, not the CA key.
	reg, err := os.ReadFile(filepath.Join(bundle, provision.RegistrationFile))
	if err != nil {
		t.Fatal(err)
	}
	regs, err := teacher.Registrations(reg)
	if err != nil {
		t.Fatal(err)
	}
	adminPub, err := m.AdminPublicKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, reg := range regs {
		c, err := ledger.DecodeCommand(reg)
		if err != nil {
			t.Fatal(err)
		}
		if !c.Verify(adminPub) {
			t.Fatal("the registration does not verify with the administrator key")
		}
	}

	// The party installs only a bundle from the CA it confirmed.
	if _, err := runNZC(t, "keys", "install", "--dir", keys, "--bundle", bundle, "--ca-fingerprint", "AB:CD"); !errors.Is(err, provision.ErrFingerprintMismatch) {
		t.Fatalf("install with another fingerprint: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(keys, "hospital-4.yaml")); err == nil {
		t.Fatal("a refused install wrote a configuration")
	}
	mustRunNZC(t, "keys", "install", "--dir", keys, "--bundle", bundle, "--ca-fingerprint", signed.CAFingerprint)
	h := loadAs(t, filepath.Join(keys, "hospital-4.yaml"), config.DefaultTeacher())
	if filepath.Dir(h.TLS.Key) != keys || filepath.Dir(h.SigningKey) != keys || filepath.Dir(h.Registration) != keys {
		t.Fatalf("installed configuration does not use the party's own keys: %+v", h)
	}
	cred, err := crypto.LoadCredential(h.TLS.Cert, h.TLS.Key)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := cred.Peer(); err != nil || got != (crypto.Peer{Role: crypto.RoleHospital, ID: "hospital-4"}) {
		t.Fatalf("installed certificate names %v (%v)", got, err)
	}
	if _, err := runNZC(t, "keys", "install", "--dir", keys, "--bundle", bundle, "--ca-fingerprint", signed.CAFingerprint); !errors.Is(err, crypto.ErrExists) {
		t.Fatalf("a second install without --force: %v", err)
	}
	noSecrets("keys install")

	// The same request again admits nothing new; with --renew it gets a
	// new certificate for the same keys, installed with --force.
	renewed := filepath.Join(root, "renewed")
	if _, err := runNZC(t, "init", "sign", "--dir", admin, "--request", request, "--role", "hospital", "--id", "hospital-4", "--fingerprint", made.Fingerprint, "--out", renewed); !errors.Is(err, crypto.ErrExists) {
		t.Fatalf("admitting hospital-4 twice: %v", err)
	}
	mustRunNZC(t, "init", "sign", "--dir", admin, "--request", request, "--role", "hospital", "--id", "hospital-4", "--fingerprint", made.Fingerprint, "--renew", "--out", renewed)
	noSecrets("init sign --renew")
	old, err := os.ReadFile(h.TLS.Cert)
	if err != nil {
		t.Fatal(err)
	}
	mustRunNZC(t, "keys", "install", "--dir", keys, "--bundle", renewed, "--ca-fingerprint", signed.CAFingerprint, "--force")
	now, err := os.ReadFile(h.TLS.Cert)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(old, now) {
		t.Fatal("the renewed certificate was not installed")
	}
	if _, err := crypto.LoadCredential(h.TLS.Cert, h.TLS.Key); err != nil {
		t.Fatalf("the renewed certificate does not go with the hospital's key: %v", err)
	}
}

// TestKeysInstallRefusesAnotherPartysBundle: a bundle made for another
// request does not go with these keys.
func TestKeysInstallRefusesAnotherPartysBundle(t *testing.T) {
	root := t.TempDir()
	admin := filepath.Join(root, "admin")
	mustRunNZC(t, "init", "--dir", admin, "--hospitals", "1", "--auditors", "1", "--students", "1")
	for _, id := range []string{"hospital-4", "hospital-5"} {
		mustRunNZC(t, "keys", "new", "--role", "hospital", "--id", id, "--out", filepath.Join(root, id))
	}
	req5, err := provision.LoadKeyRequest(filepath.Join(root, "hospital-5", provision.KeyRequestFile))
	if err != nil {
		t.Fatal(err)
	}
	mustRunNZC(t, "init", "sign", "--dir", admin, "--request", filepath.Join(root, "hospital-5", provision.KeyRequestFile),
		"--role", "hospital", "--id", "hospital-5", "--fingerprint", req5.Fingerprint(), "--out", filepath.Join(root, "bundle-5"))
	m, err := crypto.LoadManifest(admin)
	if err != nil {
		t.Fatal(err)
	}
	_, err = runNZC(t, "keys", "install", "--dir", filepath.Join(root, "hospital-4"), "--bundle", filepath.Join(root, "bundle-5"), "--ca-fingerprint", m.CAFingerprint)
	if err == nil {
		t.Fatal("hospital-4 installed hospital-5's bundle")
	}
	t.Log(err)
}

// hospitalSecrets are the private keys in a directory nzc keys new made,
// as the bytes any file holding them would contain.
func hospitalSecrets(t *testing.T, keys string) [][]byte {
	t.Helper()
	var out [][]byte
	for _, f := range []string{crypto.PartyKeyFile, crypto.SigningKeyFile} {
		k, err := crypto.LoadPrivateKey(filepath.Join(keys, f))
		if err != nil {
			t.Fatal(err)
		}
		pem, err := crypto.EncodeKeyPEM(k)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, k.Seed(), pem)
	}
	id, err := crypto.LoadIdentity(filepath.Join(keys, crypto.AgeIdentityFile))
	if err != nil {
		t.Fatal(err)
	}
	return append(out, []byte(id.SecretString()))
}

// fileHolding returns a file under dir that contains one of secrets, or "".
func fileHolding(t *testing.T, dir string, secrets [][]byte) string {
	t.Helper()
	found := ""
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil // a directory not made yet holds nothing
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, s := range secrets {
			if bytes.Contains(data, s) {
				found = path
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestInitSignsWithTheAdministratorKey: in one-machine mode too, the
// genesis is signed by the administrator key, which is not the CA key.
func TestInitSignsWithTheAdministratorKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fed")
	mustRunNZC(t, "init", "--dir", dir, "--hospitals", "1", "--auditors", "1", "--students", "1")
	m, err := crypto.LoadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := intake.ReadGenesis(filepath.Join(dir, provision.GenesisFile))
	if err != nil {
		t.Fatal(err)
	}
	g, err := ledger.DecodeCommand(cmds[0])
	if err != nil {
		t.Fatal(err)
	}
	adminPub, err := m.AdminPublicKey()
	if err != nil {
		t.Fatal(err)
	}
	ca, err := crypto.LoadCert(m.Path(m.CACert))
	if err != nil {
		t.Fatal(err)
	}
	if !g.Verify(adminPub) || g.Verify(ca.PublicKey.(ed25519.PublicKey)) {
		t.Fatal("the genesis is not signed by the administrator key alone")
	}
	mustRunNZC(t, "init", "add-hospital", "--dir", dir)
	reg, err := os.ReadFile(filepath.Join(dir, "hospital-2", provision.RegistrationFile))
	if err != nil {
		t.Fatal(err)
	}
	regs, err := teacher.Registrations(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, reg := range regs {
		if c, err := ledger.DecodeCommand(reg); err != nil || !c.Verify(adminPub) {
			t.Fatalf("add-hospital's registration is not signed by the administrator key: %v", err)
		}
	}
}

// TestInitKit: a party's kit holds its own private keys and no other's,
// and a configuration whose paths, relative to the kit, all exist in it.
func TestInitKit(t *testing.T) {
	root := t.TempDir()
	fed := filepath.Join(root, "fed")
	mustRunNZC(t, "init", "--dir", fed, "--hospitals", "2", "--auditors", "3", "--students", "1")
	for _, id := range []string{"auditor-2", "hospital-1", "aggregator", "student-1", "compliance"} {
		t.Run(id, func(t *testing.T) {
			kit := filepath.Join(root, id+"-kit")
			mustRunNZC(t, "init", "kit", "--dir", fed, "--party", id, "--out", kit)
			err := filepath.WalkDir(kit, func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				data, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				rel, _ := filepath.Rel(kit, path)
				secret := bytes.Contains(data, []byte("PRIVATE KEY")) || bytes.Contains(data, []byte("AGE-SECRET-KEY"))
				if secret && filepath.Dir(rel) != id {
					t.Errorf("the kit of %s holds %s, a private key not its own", id, rel)
				}
				if fi, _ := d.Info(); secret && fi.Mode().Perm() != 0o600 {
					t.Errorf("%s has mode %04o", rel, fi.Mode().Perm())
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			cfg := filepath.Join(kit, id+".yaml")
			if id == "compliance" {
				if _, err := os.Stat(cfg); err == nil {
					t.Fatal("the compliance officer's kit has a configuration")
				}
				return
			}
			raw, err := os.ReadFile(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(raw, []byte(fed)) {
				t.Fatalf("the configuration names the administrator's directory:\n%s", raw)
			}
			var paths []string
			switch {
			case strings.HasPrefix(id, "auditor"):
				c := loadAs(t, cfg, config.DefaultAuditor())
				paths = []string{c.TLS.CA, c.TLS.Cert, c.TLS.Key, c.SigningKey}
			case strings.HasPrefix(id, "hospital"):
				c := loadAs(t, cfg, config.DefaultTeacher())
				paths = []string{c.TLS.CA, c.TLS.Cert, c.TLS.Key, c.SigningKey, c.AgeIdentity}
			case id == "aggregator":
				c := loadAs(t, cfg, config.DefaultAggregator())
				paths = []string{c.TLS.CA, c.TLS.Cert, c.TLS.Key, c.SigningKey, c.AgeIdentity}
			default:
				c := loadAs(t, cfg, config.DefaultStudent())
				paths = []string{c.TLS.CA, c.TLS.Cert, c.TLS.Key, c.AgeIdentity}
			}
			for _, p := range paths {
				if filepath.IsAbs(p) {
					t.Errorf("path %s is not relative to the kit", p)
				}
				if _, err := os.Stat(filepath.Join(kit, p)); err != nil {
					t.Errorf("the kit lacks %s: %v", p, err)
				}
			}
		})
	}
	if _, err := runNZC(t, "init", "kit", "--dir", fed, "--party", "hospital-9", "--out", filepath.Join(root, "x")); err == nil {
		t.Fatal("a kit for a party the federation does not have")
	}
}
