package crypto

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func seeded(seed byte) *rand.ChaCha8 {
	var s [32]byte
	s[0] = seed
	return rand.NewChaCha8(s)
}

func newTestCA(t *testing.T, seed byte) *CA {
	t.Helper()
	ca, err := NewCA(seeded(seed), "test CA", t0, t0.Add(365*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func issue(t *testing.T, ca *CA, p Peer, from, to time.Time) *Credential {
	t.Helper()
	c, err := ca.Issue(seeded(7), IssueRequest{Peer: p, Hosts: []string{"agg.example.org", "10.1.2.3"}, NotBefore: from, NotAfter: to})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestIssueAndVerifyPeer(t *testing.T) {
	ca := newTestCA(t, 1)
	want := Peer{Role: RoleHospital, ID: "hospital-1"}
	cred := issue(t, ca, want, t0, t0.Add(24*time.Hour))
	for _, u := range []Usage{UsageClient, UsageServer} {
		got, err := VerifyPeer(ca.Cert, [][]byte{cred.Cert.Raw}, t0.Add(time.Hour), u)
		if err != nil {
			t.Fatalf("usage %d: %v", u, err)
		}
		if got != want {
			t.Fatalf("peer = %v, want %v", got, want)
		}
	}
	c := cred.Cert
	if got := c.URIs[0].String(); got != "nzc://hospital/hospital-1" {
		t.Errorf("URI SAN = %q", got)
	}
	if !slicesContains(c.DNSNames, "localhost") || !slicesContains(c.DNSNames, "agg.example.org") {
		t.Errorf("DNS SANs = %v", c.DNSNames)
	}
	var ips []string
	for _, ip := range c.IPAddresses {
		ips = append(ips, ip.String())
	}
	if !slicesContains(ips, "127.0.0.1") || !slicesContains(ips, "10.1.2.3") {
		t.Errorf("IP SANs = %v", ips)
	}
	if err := c.VerifyHostname("127.0.0.1"); err != nil {
		t.Errorf("loopback not valid: %v", err)
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestVerifyPeerRejects(t *testing.T) {
	ca := newTestCA(t, 1)
	other := newTestCA(t, 2)
	p := Peer{Role: RoleStudent, ID: "student-1"}
	good := issue(t, ca, p, t0, t0.Add(24*time.Hour))
	foreign := issue(t, other, p, t0, t0.Add(24*time.Hour))
	noURI := rawCert(t, ca, nil)
	tests := []struct {
		name string
		raw  [][]byte
		now  time.Time
		want error
	}{
		{"other CA", [][]byte{foreign.Cert.Raw}, t0.Add(time.Hour), ErrUntrustedCertificate},
		{"expired", [][]byte{good.Cert.Raw}, t0.Add(25 * time.Hour), ErrCertificateExpired},
		{"not yet valid", [][]byte{good.Cert.Raw}, t0.Add(-time.Hour), ErrCertificateExpired},
		{"no certificate", nil, t0.Add(time.Hour), ErrBadCertificate},
		{"garbage", [][]byte{[]byte("junk")}, t0.Add(time.Hour), ErrBadCertificate},
		{"no party URI", [][]byte{noURI.Raw}, t0.Add(time.Hour), ErrNoPeerIdentity},
		{"CA itself", [][]byte{ca.Cert.Raw}, t0.Add(time.Hour), ErrBadCertificate},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := VerifyPeer(ca.Cert, tc.raw, tc.now, UsageClient)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			var pe *PeerCertError
			if !errors.As(err, &pe) {
				t.Fatalf("err is %T, want *PeerCertError", err)
			}
		})
	}
	// A leaf valid at a time the CA is not: the error blames the CA.
	long, err := ca.Issue(seeded(8), IssueRequest{Peer: p, NotBefore: t0.Add(-48 * time.Hour), NotAfter: t0.Add(24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = VerifyPeer(ca.Cert, [][]byte{long.Cert.Raw}, t0.Add(-time.Hour), UsageClient)
	if !errors.Is(err, ErrCertificateExpired) || !strings.Contains(err.Error(), "CA certificate") {
		t.Errorf("CA not yet valid: %v", err)
	}
	_, err = VerifyPeer(ca.Cert, [][]byte{foreign.Cert.Raw}, t0.Add(time.Hour), UsageServer)
	if err == nil || !strings.Contains(err.Error(), ca.Fingerprint()) {
		t.Errorf("untrusted error should name the expected CA fingerprint: %v", err)
	}
}

// rawCert issues a client/server certificate with the given URIs, bypassing
// Issue's validation.
func rawCert(t *testing.T, ca *CA, uris []*url.URL) *x509.Certificate {
	t.Helper()
	pub, _, _ := ed25519.GenerateKey(seeded(9))
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(99),
		Subject:      pkix.Name{CommonName: "odd"},
		NotBefore:    t0, NotAfter: t0.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		URIs:        uris,
	}
	der, err := x509.CreateCertificate(nil, tmpl, ca.Cert, pub, ca.Key())
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestPeerFromCertMalformed(t *testing.T) {
	ca := newTestCA(t, 1)
	mustURL := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	tests := []struct {
		uris []string
		ok   bool
	}{
		{[]string{"nzc://auditor/auditor-3"}, true},
		{[]string{"https://example.org/", "nzc://compliance/compliance"}, true},
		{nil, false},
		{[]string{"nzc://doctor/x"}, false},
		{[]string{"nzc://hospital/"}, false},
		{[]string{"nzc://hospital/Hospital-1"}, false},
		{[]string{"nzc://hospital/a/b"}, false},
		{[]string{"nzc://hospital/-a"}, false},
		{[]string{"nzc://hospital:8/a"}, false},
		{[]string{"nzc://hospital/a?x=1"}, false},
		{[]string{"nzc://hospital/" + strings.Repeat("a", 64)}, false},
		{[]string{"nzc://hospital/a", "nzc://hospital/b"}, false},
	}
	for _, tc := range tests {
		var us []*url.URL
		for _, s := range tc.uris {
			us = append(us, mustURL(s))
		}
		_, err := PeerFromCert(rawCert(t, ca, us))
		if (err == nil) != tc.ok {
			t.Errorf("%v: err = %v, want ok=%v", tc.uris, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrNoPeerIdentity) {
			t.Errorf("%v: err = %v, want ErrNoPeerIdentity", tc.uris, err)
		}
	}
}

func TestIssueRejectsBadPeer(t *testing.T) {
	ca := newTestCA(t, 1)
	for _, p := range []Peer{{"doctor", "x"}, {RoleHospital, ""}, {RoleHospital, "A"}, {RoleHospital, "a/b"}} {
		if _, err := ca.Issue(seeded(3), IssueRequest{Peer: p, NotBefore: t0, NotAfter: t0.Add(time.Hour)}); err == nil {
			t.Errorf("Issue(%v) succeeded", p)
		}
	}
	if _, err := ca.Issue(seeded(3), IssueRequest{Peer: Peer{RoleHospital, "h"}, NotBefore: t0, NotAfter: t0}); err == nil {
		t.Error("Issue with empty validity succeeded")
	}
	pub := &CA{Cert: ca.Cert}
	if _, err := pub.Issue(seeded(3), IssueRequest{Peer: Peer{RoleHospital, "h"}, NotBefore: t0, NotAfter: t0.Add(time.Hour)}); err == nil {
		t.Error("CA without key issued a certificate")
	}
}

func TestExpectRole(t *testing.T) {
	p := Peer{Role: RoleStudent, ID: "student-1"}
	if err := p.Expect(RoleStudent); err != nil {
		t.Fatal(err)
	}
	err := p.Expect(RoleAggregator, RoleAuditor)
	if !errors.Is(err, ErrWrongRole) {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), "aggregator or auditor") || !strings.Contains(err.Error(), "nzc://student/student-1") {
		t.Errorf("message = %q", err)
	}
}

func TestFingerprint(t *testing.T) {
	ca := newTestCA(t, 1)
	fp := ca.Fingerprint()
	if !regexp.MustCompile(`^([0-9A-F]{2}:){31}[0-9A-F]{2}$`).MatchString(fp) {
		t.Fatalf("fingerprint %q not in openssl form", fp)
	}
	sum := sha256.Sum256(ca.Cert.Raw)
	if strings.ReplaceAll(fp, ":", "") != strings.ToUpper(hex.EncodeToString(sum[:])) {
		t.Fatalf("fingerprint %q is not SHA-256 of the DER", fp)
	}
	if newTestCA(t, 2).Fingerprint() == fp {
		t.Fatal("two CAs share a fingerprint")
	}
}

func TestSealOpen(t *testing.T) {
	ids := make([]*Identity, 3)
	for i := range ids {
		var err error
		if ids[i], err = GenerateIdentity(); err != nil {
			t.Fatal(err)
		}
	}
	msg := []byte("votes: 3 1 0 9")
	ct, err := Seal(msg, ids[0].Recipient(), ids[1].Recipient(), ids[0].Recipient())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids[:2] {
		got, err := Open(ct, id)
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("Open = %q, %v", got, err)
		}
	}
	_, err = Open(ct, ids[2])
	var nf *NotForMeError
	if !errors.Is(err, ErrNotForMe) || !errors.As(err, &nf) {
		t.Fatalf("wrong identity: err = %v", err)
	}
	if nf.Have != ids[2].Recipient().String() || nf.Recipients != 2 {
		t.Errorf("NotForMeError = %+v", nf)
	}
	if !strings.Contains(err.Error(), ids[2].Recipient().String()) {
		t.Errorf("message should name the key tried: %v", err)
	}
	bad := bytes.Clone(ct)
	bad[len(bad)-1] ^= 1
	if _, err := Open(bad, ids[0]); !errors.Is(err, ErrMalformed) {
		t.Errorf("tampered: err = %v", err)
	}
	if _, err := Open([]byte("not age"), ids[0]); !errors.Is(err, ErrMalformed) {
		t.Errorf("garbage: err = %v", err)
	}
	if _, err := Seal(msg); !errors.Is(err, ErrNoRecipients) {
		t.Errorf("no recipients: err = %v", err)
	}
	empty, err := Seal(nil, ids[0].Recipient())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Open(empty, ids[0]); err != nil || len(got) != 0 {
		t.Errorf("empty round trip = %q, %v", got, err)
	}
}

func TestIdentityParsing(t *testing.T) {
	id, err := GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(id.String(), "SECRET") {
		t.Fatal("String() leaks the secret key")
	}
	id2, err := ParseIdentity(id.SecretString())
	if err != nil || !id2.Recipient().Equal(id.Recipient()) {
		t.Fatalf("ParseIdentity round trip: %v", err)
	}
	r, err := ParseRecipient(id.Recipient().String())
	if err != nil || !r.Equal(id.Recipient()) || !strings.HasPrefix(r.String(), "age1") {
		t.Fatalf("ParseRecipient round trip: %v", err)
	}
	if _, err := ParseIdentity("AGE-SECRET-KEY-1XYZ"); err == nil {
		t.Error("bad identity parsed")
	}
	if _, err := ParseRecipient("age1xyz"); err == nil {
		t.Error("bad recipient parsed")
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, 1)
	cred := issue(t, ca, Peer{RoleAggregator, "aggregator"}, t0, t0.Add(time.Hour))
	cp, kp := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := WriteCredential(cp, kp, cred, false); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(kp)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key mode = %v, %v", fi.Mode(), err)
	}
	got, err := LoadCredential(cp, kp)
	if err != nil || !got.Cert.Equal(cred.Cert) || !got.Key.Equal(cred.Key) {
		t.Fatalf("LoadCredential: %v", err)
	}
	// Refuse to overwrite; nothing changes.
	other := issue(t, ca, Peer{RoleAggregator, "aggregator"}, t0, t0.Add(2*time.Hour))
	if err := WriteCredential(cp, kp, other, false); !errors.Is(err, ErrExists) {
		t.Fatalf("overwrite without force: err = %v", err)
	}
	if got, _ := LoadCredential(cp, kp); !got.Key.Equal(cred.Key) {
		t.Fatal("key changed after refused overwrite")
	}
	if err := WriteCredential(cp, kp, other, true); err != nil {
		t.Fatal(err)
	}
	if got, _ := LoadCredential(cp, kp); !got.Key.Equal(other.Key) {
		t.Fatal("forced overwrite did not replace the key")
	}
	// Mismatched key and certificate.
	if _, err := LoadCredential(filepath.Join(dir, "tls.crt"), writeKey(t, dir, cred.Key)); err == nil {
		t.Fatal("mismatched key accepted")
	}
	// Permission checks.
	for _, mode := range []os.FileMode{0o640, 0o604, 0o660} {
		if err := os.Chmod(kp, mode); err != nil {
			t.Fatal(err)
		}
		_, err := LoadPrivateKey(kp)
		var pe *PermissionError
		if !errors.Is(err, ErrInsecurePermissions) || !errors.As(err, &pe) || !strings.Contains(err.Error(), "chmod 600 "+kp) {
			t.Errorf("mode %o: err = %v", mode, err)
		}
	}
	if err := os.Chmod(kp, 0o400); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPrivateKey(kp); err != nil {
		t.Errorf("mode 0400: %v", err)
	}
	// No temporary files left behind.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("leftover temporary file %s", e.Name())
		}
	}
}

func writeKey(t *testing.T, dir string, key ed25519.PrivateKey) string {
	t.Helper()
	other, err := GenerateSigningKey(seeded(42))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "other.key")
	if err := WritePrivateKey(p, other, true); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAgeAndSigningFiles(t *testing.T) {
	dir := t.TempDir()
	id, _ := GenerateIdentity()
	ip, rp := filepath.Join(dir, "age.key"), filepath.Join(dir, "age.pub")
	if err := WriteIdentity(ip, id, false); err != nil {
		t.Fatal(err)
	}
	if err := WriteRecipient(rp, id.Recipient(), false); err != nil {
		t.Fatal(err)
	}
	if err := WriteIdentity(ip, id, false); !errors.Is(err, ErrExists) {
		t.Fatalf("overwrite: %v", err)
	}
	got, err := LoadIdentity(ip)
	if err != nil || !got.Recipient().Equal(id.Recipient()) {
		t.Fatalf("LoadIdentity: %v", err)
	}
	r, err := LoadRecipient(rp)
	if err != nil || !r.Equal(id.Recipient()) {
		t.Fatalf("LoadRecipient: %v", err)
	}
	os.Chmod(ip, 0o644)
	if _, err := LoadIdentity(ip); !errors.Is(err, ErrInsecurePermissions) {
		t.Fatalf("world-readable identity: %v", err)
	}
	sk, err := GenerateSigningKey(seeded(5))
	if err != nil {
		t.Fatal(err)
	}
	sp, vp := filepath.Join(dir, "sign.key"), filepath.Join(dir, "sign.pub")
	if err := WriteSigningKey(sp, vp, sk, false); err != nil {
		t.Fatal(err)
	}
	sk2, err := LoadPrivateKey(sp)
	if err != nil || !sk2.Equal(sk) {
		t.Fatalf("LoadPrivateKey: %v", err)
	}
	pk, err := LoadPublicKey(vp)
	if err != nil || !ed25519.Verify(pk, []byte("m"), ed25519.Sign(sk2, []byte("m"))) {
		t.Fatalf("LoadPublicKey: %v", err)
	}
}

// OpenFrom opens what Open opens, whatever stanza it is told to try first,
// and says which stanza opened the payload; from that stanza it is one key
// agreement a payload.
func TestOpenFrom(t *testing.T) {
	ids := make([]*Identity, 5)
	rs := make([]*Recipient, len(ids))
	for i := range ids {
		var err error
		if ids[i], err = GenerateIdentity(); err != nil {
			t.Fatal(err)
		}
		rs[i] = ids[i].Recipient()
	}
	msg := []byte("features of a batch")
	ct, err := Seal(msg, rs...)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		for _, first := range []int{-1, 0, 1, i, 4, 5, 1 << 20} {
			got, at, err := OpenFrom(ct, id, first)
			if err != nil || !bytes.Equal(got, msg) || at != i {
				t.Fatalf("identity %d, first %d: %q at %d, %v; want the message at %d", i, first, got, at, err, i)
			}
		}
	}
	other, err := GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := OpenFrom(ct, other, 2); !errors.Is(err, ErrNotForMe) {
		t.Fatalf("another identity, first 2: %v, want ErrNotForMe", err)
	}
	bad := bytes.Clone(ct)
	bad[len(bad)-1] ^= 1
	if _, _, err := OpenFrom(bad, ids[3], 3); !errors.Is(err, ErrMalformed) {
		t.Fatalf("tampered, first 3: %v, want ErrMalformed", err)
	}
}

// BenchmarkOpenFrom opens a batch sealed to 100 hospitals as the last of
// them: from the first stanza (Open) and from its own.
func BenchmarkOpenFrom(b *testing.B) {
	ids := make([]*Identity, 100)
	rs := make([]*Recipient, len(ids))
	for i := range ids {
		var err error
		if ids[i], err = GenerateIdentity(); err != nil {
			b.Fatal(err)
		}
		rs[i] = ids[i].Recipient()
	}
	ct, err := Seal(make([]byte, 1<<10), rs...)
	if err != nil {
		b.Fatal(err)
	}
	for _, first := range []int{0, 99} {
		b.Run(fmt.Sprintf("first=%d", first), func(b *testing.B) {
			for b.Loop() {
				if _, _, err := OpenFrom(ct, ids[99], first); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
