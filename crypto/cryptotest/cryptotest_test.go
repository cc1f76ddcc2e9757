package cryptotest

import (
	"path/filepath"
	"testing"

	"github.com/nzcfed/nzc/crypto"
)

// Every helper loads what Provision wrote, and the files fit together: the
// party's certificate is the CA's, and its key pairs match the manifest.
func TestLoadsAProvisionedFederation(t *testing.T) {
	m, err := crypto.Provision(filepath.Join(t.TempDir(), "fed"), crypto.ProvisionSpec{Hospitals: 1, Auditors: 1, Students: 1})
	if err != nil {
		t.Fatal(err)
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
