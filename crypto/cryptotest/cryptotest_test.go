package cryptotest

import (
	"path/filepath"
	"testing"

	"github.com/nzcfed/nzc/crypto"
)

// Every helper loads what Federation wrote, and the files fit together: the
// party's certificate is the CA's, and its key pairs match the manifest.
// (federation/provision's tests check that Federation lays a federation out
// as Provision does.)
func TestLoadsAFederation(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fed")
	m := Federation(t, dir, Spec{Hospitals: 1, Auditors: 1, Students: 1})
	if loaded, err := crypto.LoadManifest(dir); err != nil || len(loaded.Parties) != len(m.Parties) || loaded.CAFingerprint != m.CAFingerprint {
		t.Fatalf("the manifest on disk is not the one returned: %+v, %v", loaded, err)
	}
	h := m.ByRole(crypto.RoleHospital)[0]
	if !CA(t, m).Cert.Equal(CACert(t, m)) {
		t.Error("CA and CACert load different certificates")
	}
	p, err := Credential(t, m, h).Peer()
	if err != nil || p != (crypto.Peer{Role: crypto.RoleHospital, ID: h.ID}) {
		t.Errorf("credential of %s names %v (%v)", h.ID, p, err)
	}
	if Identity(t, m, h).Recipient().String() != h.AgeRecipient {
		t.Errorf("identity of %s is not its recipient %s", h.ID, h.AgeRecipient)
	}
	if len(SigningKey(t, m, h)) == 0 {
		t.Errorf("no signing key for %s", h.ID)
	}
}
