package provision

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
)

func provisionSpec() Spec {
	return Spec{Hospitals: 3, Auditors: 3, Students: 1, Hosts: []string{"fed.example.org"}, Now: t0, Rand: seeded(11)}
}

func TestProvision(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fed")
	m, err := Provision(dir, provisionSpec())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(m.Parties), 3+1+3+1+1; got != want {
		t.Fatalf("%d parties, want %d", got, want)
	}
	loaded, err := crypto.LoadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.CAFingerprint != m.CAFingerprint || len(loaded.Parties) != len(m.Parties) {
		t.Fatalf("manifest on disk differs: %+v", loaded)
	}
	ca, err := crypto.LoadCA(m.Path(m.CACert), m.Path(m.CAKey))
	if err != nil {
		t.Fatal(err)
	}
	if ca.Fingerprint() != m.CAFingerprint {
		t.Fatal("fingerprint mismatch")
	}
	for _, want := range []crypto.Peer{{Role: crypto.RoleHospital, ID: "hospital-3"}, {Role: crypto.RoleAggregator, ID: "aggregator"}, {Role: crypto.RoleAuditor, ID: "auditor-2"}, {Role: crypto.RoleStudent, ID: "student-1"}, {Role: crypto.RoleCompliance, ID: "compliance"}} {
		pf, ok := m.Party(want.Role, want.ID)
		if !ok {
			t.Fatalf("no party %v", want)
		}
		cred, err := crypto.LoadCredential(m.Path(pf.Cert), m.Path(pf.Key))
		if err != nil {
			t.Fatal(err)
		}
		got, err := crypto.VerifyPeer(ca.Cert, [][]byte{cred.Cert.Raw}, t0.Add(time.Hour), crypto.UsageServer)
		if err != nil || got != want {
			t.Fatalf("%v: VerifyPeer = %v, %v", want, got, err)
		}
		id, err := crypto.LoadIdentity(m.Path(pf.AgeIdentity))
		if err != nil || id.Recipient().String() != pf.AgeRecipient {
			t.Fatalf("%v: age identity %v does not match manifest recipient", want, err)
		}
		if HasSigningKey(want.Role) != (pf.SigningKey != "") {
			t.Fatalf("%v: signing key = %q", want, pf.SigningKey)
		}
		if pf.SigningKey != "" {
			sk, err := crypto.LoadPrivateKey(m.Path(pf.SigningKey))
			if err != nil {
				t.Fatal(err)
			}
			pk, err := crypto.LoadPublicKey(m.Path(pf.VerifyingKey))
			if err != nil || !pk.Equal(sk.Public()) {
				t.Fatalf("verifying key mismatch: %v", err)
			}
		}
	}
	// Every private file is 0600.
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Ext(p) == ".key" {
			fi, _ := d.Info()
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s has mode %o", p, fi.Mode().Perm())
			}
		}
		return nil
	})
}

func TestProvisionRefusesOverwrite(t *testing.T) {
	dir := t.TempDir()
	m, err := Provision(dir, provisionSpec())
	if err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)
	if _, err := Provision(dir, provisionSpec()); !errors.Is(err, ErrFederationExists) || !errors.Is(err, crypto.ErrExists) {
		t.Fatalf("second Provision: err = %v", err)
	}
	if !sameFiles(before, snapshot(t, dir)) {
		t.Fatal("refused Provision changed files")
	}
	spec := provisionSpec()
	spec.Force, spec.Rand = true, seeded(12)
	m2, err := Provision(dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	if m2.CAFingerprint == m.CAFingerprint {
		t.Fatal("forced Provision kept the old CA")
	}
	if _, err := Provision(t.TempDir(), Spec{Hospitals: 0, Auditors: 1, Students: 1}); err == nil {
		t.Fatal("federation without hospitals accepted")
	}
}

func TestAddParty(t *testing.T) {
	dir := t.TempDir()
	if _, err := Provision(dir, provisionSpec()); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)
	m, pf, err := AddParty(dir, crypto.RoleHospital, "", AddPartyOptions{Now: t0, Rand: seeded(13)})
	if err != nil {
		t.Fatal(err)
	}
	if pf.ID != "hospital-4" || pf.URI != "nzc://hospital/hospital-4" {
		t.Fatalf("new party = %+v", pf)
	}
	after := snapshot(t, dir)
	for p, data := range before {
		if p == crypto.ManifestFile {
			continue
		}
		if !bytes.Equal(after[p], data) {
			t.Errorf("AddParty changed %s", p)
		}
	}
	if len(m.ByRole(crypto.RoleHospital)) != 4 {
		t.Fatalf("manifest lists %d hospitals", len(m.ByRole(crypto.RoleHospital)))
	}
	ca, _ := crypto.LoadCA(m.Path(m.CACert), "")
	cred, err := crypto.LoadCredential(m.Path(pf.Cert), m.Path(pf.Key))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := crypto.VerifyPeer(ca.Cert, [][]byte{cred.Cert.Raw}, t0.Add(time.Hour), crypto.UsageClient); err != nil {
		t.Fatal(err)
	}
	// A named auditor; the same id again is refused and changes nothing.
	if _, _, err := AddParty(dir, crypto.RoleAuditor, "regulator", AddPartyOptions{Now: t0}); err != nil {
		t.Fatal(err)
	}
	before = snapshot(t, dir)
	for _, role := range []crypto.Role{crypto.RoleAuditor, crypto.RoleStudent} {
		if _, _, err := AddParty(dir, role, "regulator", AddPartyOptions{Now: t0}); !errors.Is(err, crypto.ErrExists) {
			t.Fatalf("duplicate id as %s: err = %v", role, err)
		}
	}
	if !sameFiles(before, snapshot(t, dir)) {
		t.Fatal("refused AddParty changed files")
	}
	// Force replaces only that party.
	if _, _, err := AddParty(dir, crypto.RoleAuditor, "regulator", AddPartyOptions{Now: t0, Force: true}); err != nil {
		t.Fatal(err)
	}
	after = snapshot(t, dir)
	if bytes.Equal(after["regulator/tls.key"], before["regulator/tls.key"]) {
		t.Fatal("forced AddParty kept the old key")
	}
	if !bytes.Equal(after["hospital-1/tls.key"], before["hospital-1/tls.key"]) {
		t.Fatal("forced AddParty touched another party")
	}
	if _, _, err := AddParty(t.TempDir(), crypto.RoleHospital, "", AddPartyOptions{}); err == nil {
		t.Fatal("AddParty without a federation succeeded")
	}
	if _, _, err := AddParty(dir, "doctor", "", AddPartyOptions{}); err == nil {
		t.Fatal("AddParty with unknown role succeeded")
	}
}

func snapshot(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = data
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameFiles(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(b[k], v) {
			return false
		}
	}
	return true
}

func TestAdminKeyIsNotTheCAKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fed")
	m, err := Provision(dir, provisionSpec())
	if err != nil {
		t.Fatal(err)
	}
	ca, err := crypto.LoadCA(m.Path(m.CACert), m.Path(m.CAKey))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := m.AdminSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	if admin.Equal(ca.Key()) {
		t.Fatal("the administrator signs with the CA key")
	}
	if filepath.Dir(m.Path(m.AdminKey)) == filepath.Dir(m.Path(m.CAKey)) {
		t.Fatal("the administrator key shares the CA key's directory, so they cannot be kept apart")
	}
	fi, err := os.Stat(m.Path(m.AdminKey))
	if err != nil || fi.Mode().Perm() != crypto.PrivateFileMode {
		t.Fatalf("admin key file: %v, %v", fi, err)
	}
	pub, err := m.AdminPublicKey()
	if err != nil || !pub.Equal(admin.Public()) {
		t.Fatalf("AdminPublicKey %x, %v; want the admin key's", pub, err)
	}

	// A federation provisioned before the administrator had its own key:
	// the CA key was the administrator's.
	old, err := crypto.LoadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	old.AdminKey, old.AdminVerifyingKey = "", ""
	if k, err := old.AdminSigningKey(); err != nil || !k.Equal(ca.Key()) {
		t.Fatalf("old manifest's admin key: %v", err)
	}
	if pub, err := old.AdminPublicKey(); err != nil || !pub.Equal(ca.Key().Public().(ed25519.PublicKey)) {
		t.Fatalf("old manifest's admin public key: %v", err)
	}
}
