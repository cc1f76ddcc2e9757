package crypto_test

import (
	"crypto/ed25519"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/crypto/cryptotest"
)

func seeded(seed byte) *rand.ChaCha8 {
	var s [32]byte
	s[0] = seed
	return rand.NewChaCha8(s)
}

// The administrator's keys are read from admin/, or, for a federation
// provisioned before the administrator had a key of its own, from the CA.
func TestAdminKeys(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fed")
	cryptotest.Federation(t, dir, cryptotest.Spec{Hospitals: 1, Auditors: 1, Students: 1, Rand: seeded(5)})
	m, err := crypto.LoadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	ca := cryptotest.CA(t, m)
	admin, err := m.AdminSigningKey()
	if err != nil || admin.Equal(ca.Key()) {
		t.Fatalf("AdminSigningKey: %v (the CA key: %v)", err, admin.Equal(ca.Key()))
	}
	if pub, err := m.AdminPublicKey(); err != nil || !pub.Equal(admin.Public()) {
		t.Fatalf("AdminPublicKey %x, %v; want the admin key's", pub, err)
	}
	old := *m
	old.AdminKey, old.AdminVerifyingKey = "", ""
	if k, err := old.AdminSigningKey(); err != nil || !k.Equal(ca.Key()) {
		t.Fatalf("old manifest's admin key: %v", err)
	}
	if pub, err := old.AdminPublicKey(); err != nil || !pub.Equal(ca.Key().Public().(ed25519.PublicKey)) {
		t.Fatalf("old manifest's admin public key: %v", err)
	}
	if _, err := crypto.LoadManifest(t.TempDir()); err == nil {
		t.Fatal("LoadManifest found a federation in an empty directory")
	}
}

// FuzzLoadManifest feeds arbitrary federation manifests to LoadManifest and
// to the look-ups every binary makes on one.
func FuzzLoadManifest(f *testing.F) {
	dir := f.TempDir()
	cryptotest.Federation(f, dir, cryptotest.Spec{Hospitals: 2, Auditors: 1, Students: 1, Rand: seeded(3)})
	good, err := os.ReadFile(filepath.Join(dir, crypto.ManifestFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"parties": [{"role": "hospital"}, null]}`))
	f.Add([]byte(`{"parties": null, "ca_cert": "/etc/passwd"}`))
	into := f.TempDir() // its manifest is rewritten for each input
	f.Fuzz(func(t *testing.T, file []byte) {
		dir := into
		if err := os.WriteFile(filepath.Join(dir, crypto.ManifestFile), file, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := crypto.LoadManifest(dir)
		if err != nil {
			return
		}
		for _, role := range []crypto.Role{crypto.RoleHospital, crypto.RoleAggregator, crypto.RoleAuditor, crypto.RoleStudent} {
			for _, p := range m.ByRole(role) {
				if p.Role != role {
					t.Fatalf("ByRole(%s) gave a %s", role, p.Role)
				}
				if q, ok := m.Party(role, p.ID); !ok || q.ID != p.ID {
					t.Fatalf("Party(%s, %s) does not find the party ByRole listed", role, p.ID)
				}
				_ = m.Path(p.Cert)
			}
		}
	})
}
