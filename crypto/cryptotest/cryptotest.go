// Package cryptotest is for tests only: it loads the files of a
// federation that crypto.Provision made (its CA, a party's TLS credential,
// age identity and ledger signing key), failing the test when one is
// missing or invalid.
package cryptotest

import (
	"crypto/ed25519"
	"crypto/x509"
	"testing"

	"github.com/nzcfed/nzc/crypto"
)

// CACert is the federation CA's certificate.
func CACert(t testing.TB, m *crypto.Manifest) *x509.Certificate {
	t.Helper()
	v, err := crypto.LoadCert(m.Path(m.CACert))
	check(t, err)
	return v
}

// CA is the federation CA with its key, for issuing certificates and
// signing as the administrator.
func CA(t testing.TB, m *crypto.Manifest) *crypto.CA {
	t.Helper()
	v, err := crypto.LoadCA(m.Path(m.CACert), m.Path(m.CAKey))
	check(t, err)
	return v
}

// Credential is party p's TLS certificate and key.
func Credential(t testing.TB, m *crypto.Manifest, p crypto.PartyFiles) *crypto.Credential {
	t.Helper()
	v, err := crypto.LoadCredential(m.Path(p.Cert), m.Path(p.Key))
	check(t, err)
	return v
}

// Identity is party p's age identity.
func Identity(t testing.TB, m *crypto.Manifest, p crypto.PartyFiles) *crypto.Identity {
	t.Helper()
	v, err := crypto.LoadIdentity(m.Path(p.AgeIdentity))
	check(t, err)
	return v
}

// SigningKey is party p's ledger signing key.
func SigningKey(t testing.TB, m *crypto.Manifest, p crypto.PartyFiles) ed25519.PrivateKey {
	t.Helper()
	v, err := crypto.LoadPrivateKey(m.Path(p.SigningKey))
	check(t, err)
	return v
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
