// Package cryptotest is for tests only. [Federation] builds a small
// federation from crypto's primitives, in the layout federation/provision
// writes (so that the layers below provisioning can test against one
// without importing it), and the other helpers load a federation's files
// (its CA, a party's TLS credential, age identity and ledger signing key),
// failing the test when one is missing or invalid.
package cryptotest

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
)

// Spec describes a federation for Federation to build.
type Spec struct {
	Hospitals, Auditors, Students int // each at least 1
	// Now is the start of validity; zero means the current time.
	Now time.Time
	// Rand supplies the CA's, certificates' and signing keys; nil means
	// crypto/rand. (age identities always use crypto/rand.)
	Rand io.Reader
}

// Federation builds in dir a federation of spec's parties, named and laid
// out as federation/provision's Provision names and lays them out: a CA
// valid for ten years, an administrator signing key apart from it,
// hospital-1…, aggregator, auditor-1…, student-1… and compliance, each with
// a TLS certificate valid for two years (for 127.0.0.1, ::1 and localhost)
// and an age identity, and an ed25519 signing key for the aggregator, the
// auditors and the hospitals; then the manifest that lists them.
func Federation(t testing.TB, dir string, spec Spec) *crypto.Manifest {
	t.Helper()
	if spec.Hospitals < 1 || spec.Auditors < 1 || spec.Students < 1 {
		t.Fatalf("cryptotest: a federation needs at least 1 hospital, 1 auditor and 1 student (got %d, %d, %d)",
			spec.Hospitals, spec.Auditors, spec.Students)
	}
	now, rnd := spec.Now, spec.Rand
	if now.IsZero() {
		now = time.Now()
	}
	if rnd == nil {
		rnd = rand.Reader
	}
	const year = 365 * 24 * time.Hour
	notBefore := now.Add(-time.Minute).UTC().Truncate(time.Second)
	ca, err := crypto.NewCA(rnd, "NZC federation CA", notBefore, notBefore.Add(10*year))
	check(t, err)
	check(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(crypto.CAKeyFile)), 0o700))
	check(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(crypto.AdminKeyFile)), 0o700))
	check(t, crypto.WritePrivateKey(filepath.Join(dir, crypto.CAKeyFile), ca.Key(), false))
	check(t, crypto.WriteCert(filepath.Join(dir, crypto.CACertFile), ca.Cert, false))
	admin, err := crypto.GenerateSigningKey(rnd)
	check(t, err)
	check(t, crypto.WriteSigningKey(filepath.Join(dir, crypto.AdminKeyFile), filepath.Join(dir, crypto.AdminVerifyingKeyFile), admin, false))
	m := &crypto.Manifest{Dir: dir, Name: ca.Cert.Subject.CommonName, CAFingerprint: ca.Fingerprint(),
		CACert: crypto.CACertFile, CAKey: crypto.CAKeyFile,
		AdminKey: crypto.AdminKeyFile, AdminVerifyingKey: crypto.AdminVerifyingKeyFile, Created: now.UTC()}
	var peers []crypto.Peer
	add := func(role crypto.Role, n int) {
		for i := 1; i <= n; i++ {
			peers = append(peers, crypto.Peer{Role: role, ID: string(role) + "-" + strconv.Itoa(i)})
		}
	}
	add(crypto.RoleHospital, spec.Hospitals)
	peers = append(peers, crypto.Peer{Role: crypto.RoleAggregator, ID: string(crypto.RoleAggregator)})
	add(crypto.RoleAuditor, spec.Auditors)
	add(crypto.RoleStudent, spec.Students)
	peers = append(peers, crypto.Peer{Role: crypto.RoleCompliance, ID: string(crypto.RoleCompliance)})
	for _, p := range peers {
		m.Parties = append(m.Parties, party(t, dir, ca, rnd, p, notBefore, notBefore.Add(2*year)))
	}
	data, err := json.MarshalIndent(m, "", "  ")
	check(t, err)
	check(t, crypto.WriteFile(filepath.Join(dir, crypto.ManifestFile), append(data, '\n'), crypto.PublicFileMode, false))
	return m
}

// party issues and writes p's keys in dir/<id>/.
func party(t testing.TB, dir string, ca *crypto.CA, rnd io.Reader, p crypto.Peer, notBefore, notAfter time.Time) crypto.PartyFiles {
	t.Helper()
	check(t, os.MkdirAll(filepath.Join(dir, p.ID), 0o700))
	cred, err := ca.Issue(rnd, crypto.IssueRequest{Peer: p, NotBefore: notBefore, NotAfter: notAfter})
	check(t, err)
	age, err := crypto.GenerateIdentity()
	check(t, err)
	pf := crypto.PartyFiles{
		Role: p.Role, ID: p.ID, URI: p.String(),
		Cert:         filepath.Join(p.ID, crypto.PartyCertFile),
		Key:          filepath.Join(p.ID, crypto.PartyKeyFile),
		AgeIdentity:  filepath.Join(p.ID, crypto.AgeIdentityFile),
		AgeRecipient: age.Recipient().String(),
		NotAfter:     cred.Cert.NotAfter.UTC(),
	}
	check(t, crypto.WriteCredential(filepath.Join(dir, pf.Cert), filepath.Join(dir, pf.Key), cred, false))
	check(t, crypto.WriteIdentity(filepath.Join(dir, pf.AgeIdentity), age, false))
	check(t, crypto.WriteRecipient(filepath.Join(dir, p.ID, crypto.AgeRecipientFile), age.Recipient(), false))
	if p.Role == crypto.RoleAggregator || p.Role == crypto.RoleAuditor || p.Role == crypto.RoleHospital {
		key, err := crypto.GenerateSigningKey(rnd)
		check(t, err)
		pf.SigningKey = filepath.Join(p.ID, crypto.SigningKeyFile)
		pf.VerifyingKey = filepath.Join(p.ID, crypto.VerifyingKeyFile)
		check(t, crypto.WriteSigningKey(filepath.Join(dir, pf.SigningKey), filepath.Join(dir, pf.VerifyingKey), key, false))
	}
	return pf
}

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
