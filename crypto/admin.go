package crypto

import (
	"crypto/ed25519"
	"fmt"
)

// The federation administrator signs the ledger's genesis and the
// registrations of parties added later. Its key is not the CA key: the CA
// key only issues certificates, and the two can be kept on different
// machines by different people. A manifest written before the administrator
// had a key of its own names none; its CA key is then the administrator's,
// as it was when that federation's genesis was signed.

// AdminSigningKey loads the administrator's private signing key (or, for a
// federation provisioned before it existed, the CA key).
func (m *Manifest) AdminSigningKey() (ed25519.PrivateKey, error) {
	path := m.AdminKey
	if path == "" {
		path = m.CAKey
	}
	key, err := LoadPrivateKey(m.Path(path))
	if err != nil {
		return nil, fmt.Errorf("the administrator's signing key: %w", err)
	}
	return key, nil
}

// AdminPublicKey returns the administrator's public key, the one the
// ledger's genesis names as federation-admin: from admin/admin.pub, or from
// the CA certificate for a federation provisioned before the administrator
// had a key of its own. It reads public files only.
func (m *Manifest) AdminPublicKey() (ed25519.PublicKey, error) {
	if m.AdminVerifyingKey != "" {
		pub, err := LoadPublicKey(m.Path(m.AdminVerifyingKey))
		if err != nil {
			return nil, fmt.Errorf("the administrator's public key: %w", err)
		}
		return pub, nil
	}
	ca, err := LoadCert(m.Path(m.CACert))
	if err != nil {
		return nil, err
	}
	pub, ok := ca.PublicKey.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("federation %s: the CA certificate has no ed25519 key", m.Dir)
	}
	return pub, nil
}
