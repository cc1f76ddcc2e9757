package crypto

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Layout of a federation directory. Paths in a [Manifest] are relative to it.
const (
	ManifestFile = "federation.json"
	CACertFile   = "ca/ca.crt"
	CAKeyFile    = "ca/ca.key"
	// The administrator's signing key, separate from the CA key: it signs
	// the ledger's genesis and the registrations of parties added later.
	AdminKeyFile          = "admin/admin.key"
	AdminVerifyingKeyFile = "admin/admin.pub"
	// Files in each party's directory, <dir>/<id>/.
	PartyCertFile    = "tls.crt"
	PartyKeyFile     = "tls.key"
	AgeIdentityFile  = "age.key"
	AgeRecipientFile = "age.pub"
	SigningKeyFile   = "sign.key"
	VerifyingKeyFile = "sign.pub"
)

// Manifest lists what a federation directory holds: public facts only.
// Paths are relative to Dir. Every party reads it ([LoadManifest]);
// federation/provision writes it.
type Manifest struct {
	Dir           string `json:"-"`
	Name          string `json:"name"`
	CAFingerprint string `json:"ca_fingerprint_sha256"`
	CACert        string `json:"ca_cert"`
	CAKey         string `json:"ca_key"`
	// AdminKey and AdminVerifyingKey are the administrator's signing key
	// pair. A manifest written before the administrator had a key of its
	// own has neither; its CA key is then the administrator's.
	AdminKey          string       `json:"admin_key,omitempty"`
	AdminVerifyingKey string       `json:"admin_verifying_key,omitempty"`
	Parties           []PartyFiles `json:"parties"`
	Created           time.Time    `json:"created"`
}

// PartyFiles are one party's files and public keys.
type PartyFiles struct {
	Role         Role      `json:"role"`
	ID           string    `json:"id"`
	URI          string    `json:"uri"`
	Cert         string    `json:"cert"`
	Key          string    `json:"key"`
	AgeIdentity  string    `json:"age_identity"`
	AgeRecipient string    `json:"age_recipient"` // the age1… public key itself
	SigningKey   string    `json:"signing_key,omitempty"`
	VerifyingKey string    `json:"verifying_key,omitempty"`
	NotAfter     time.Time `json:"cert_not_after"`
}

// Peer returns the party's identity.
func (p PartyFiles) Peer() Peer { return Peer{Role: p.Role, ID: p.ID} }

// Path returns rel joined to the federation directory.
func (m *Manifest) Path(rel string) string {
	if rel == "" || filepath.IsAbs(rel) {
		return rel
	}
	return filepath.Join(m.Dir, rel)
}

// Party returns the entry of the party with the given role and id.
func (m *Manifest) Party(role Role, id string) (PartyFiles, bool) {
	for _, p := range m.Parties {
		if p.Role == role && p.ID == id {
			return p, true
		}
	}
	return PartyFiles{}, false
}

// ByRole returns the parties with the given role, in manifest order.
func (m *Manifest) ByRole(role Role) []PartyFiles {
	var out []PartyFiles
	for _, p := range m.Parties {
		if p.Role == role {
			out = append(out, p)
		}
	}
	return out
}

// LoadManifest reads dir's federation manifest.
func LoadManifest(dir string) (*Manifest, error) {
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no federation in %s (no %s): provision one first", dir, ManifestFile)
	}
	if err != nil {
		return nil, fmt.Errorf("read federation manifest: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	m.Dir = dir
	return &m, nil
}
