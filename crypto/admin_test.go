package crypto

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"testing"
)

func TestAdminKeyIsNotTheCAKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fed")
	m, err := Provision(dir, provisionSpec())
	if err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(m.Path(m.CACert), m.Path(m.CAKey))
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
	if err != nil || fi.Mode().Perm() != PrivateFileMode {
		t.Fatalf("admin key file: %v, %v", fi, err)
	}
	pub, err := m.AdminPublicKey()
	if err != nil || !pub.Equal(admin.Public()) {
		t.Fatalf("AdminPublicKey %x, %v; want the admin key's", pub, err)
	}

	// A federation provisioned before the administrator had its own key:
	// the CA key was the administrator's.
	old, err := LoadManifest(dir)
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
