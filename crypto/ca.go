package crypto

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"strings"
	"time"
)

// CA is the federation's certificate authority: a self-signed ed25519
// certificate and, when it may issue, its private key.
type CA struct {
	Cert *x509.Certificate
	key  ed25519.PrivateKey // nil for a CA loaded without its key
}

// NewCA creates a self-signed federation CA named name, valid from notBefore
// to notAfter. rand supplies the key and serial number.
func NewCA(rand io.Reader, name string, notBefore, notAfter time.Time) (*CA, error) {
	if !notAfter.After(notBefore) {
		return nil, fmt.Errorf("CA validity ends (%s) before it starts (%s)", notAfter, notBefore)
	}
	pub, priv, err := ed25519.GenerateKey(rand)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := randomSerial(rand)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"NZC federation"}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand, tmpl, tmpl, pub, priv)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse new CA certificate: %w", err)
	}
	return &CA{Cert: cert, key: priv}, nil
}

// NewCAFromKey returns a CA that can issue, from its certificate and key. It
// checks that the key belongs to the certificate.
func NewCAFromKey(cert *x509.Certificate, key ed25519.PrivateKey) (*CA, error) {
	pub, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok || !bytes.Equal(pub, key.Public().(ed25519.PublicKey)) {
		return nil, errors.New("the CA key does not belong to the CA certificate: check that ca.key and ca.crt come from the same federation")
	}
	if !cert.IsCA {
		return nil, errors.New("certificate is not a CA certificate")
	}
	return &CA{Cert: cert, key: key}, nil
}

// Key returns the CA's private key, or nil when the CA was loaded without it.
func (ca *CA) Key() ed25519.PrivateKey { return ca.key }

// Fingerprint returns the CA certificate's fingerprint; see [Fingerprint].
func (ca *CA) Fingerprint() string { return Fingerprint(ca.Cert) }

// IssueRequest describes a party certificate.
type IssueRequest struct {
	Peer Peer
	// Hosts are extra DNS names or IP addresses the party is reached at.
	// 127.0.0.1, ::1 and localhost are always included.
	Hosts     []string
	NotBefore time.Time
	NotAfter  time.Time
}

// Credential is a party's certificate with its private key.
type Credential struct {
	Cert *x509.Certificate
	Key  ed25519.PrivateKey
}

// Peer returns the party named by the credential's certificate.
func (c *Credential) Peer() (Peer, error) { return PeerFromCert(c.Cert) }

// TLSCertificate returns the credential in the form crypto/tls uses.
func (c *Credential) TLSCertificate() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{c.Cert.Raw}, PrivateKey: c.Key, Leaf: c.Cert}
}

// Issue creates a party certificate and key, good for both client and server
// authentication, naming the party as nzc://<role>/<id>.
func (ca *CA) Issue(rand io.Reader, req IssueRequest) (*Credential, error) {
	pub, priv, err := ed25519.GenerateKey(rand)
	if err != nil {
		return nil, fmt.Errorf("generate key for %s: %w", req.Peer, err)
	}
	cert, err := ca.IssueForKey(rand, req, pub)
	if err != nil {
		return nil, err
	}
	return &Credential{Cert: cert, Key: priv}, nil
}

// IssueForKey creates a party certificate for a public key whose private
// half the party keeps (see [KeyRequest]), naming the party as
// nzc://<role>/<id>. rand supplies the serial number.
func (ca *CA) IssueForKey(rand io.Reader, req IssueRequest, pub ed25519.PublicKey) (*x509.Certificate, error) {
	if ca.key == nil {
		return nil, errors.New("this CA was loaded without its private key and cannot issue certificates")
	}
	if err := req.Peer.Validate(); err != nil {
		return nil, err
	}
	if len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("the public key of %s is %d bytes, want an ed25519 key of %d", req.Peer, len(pub), ed25519.PublicKeySize)
	}
	if !req.NotAfter.After(req.NotBefore) {
		return nil, fmt.Errorf("certificate validity ends (%s) before it starts (%s)", req.NotAfter, req.NotBefore)
	}
	serial, err := randomSerial(rand)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.Peer.String(), OrganizationalUnit: []string{string(req.Peer.Role)}},
		NotBefore:    req.NotBefore,
		NotAfter:     req.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{req.Peer.URI()},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	for _, h := range req.Hosts {
		h = strings.TrimSpace(h)
		switch ip := net.ParseIP(h); {
		case h == "" || h == "localhost":
		case ip != nil:
			if !containsIP(tmpl.IPAddresses, ip) {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			}
		default:
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand, tmpl, ca.Cert, pub, ca.key)
	if err != nil {
		return nil, fmt.Errorf("issue certificate for %s: %w", req.Peer, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse new certificate: %w", err)
	}
	return cert, nil
}

func containsIP(ips []net.IP, ip net.IP) bool {
	for _, x := range ips {
		if x.Equal(ip) {
			return true
		}
	}
	return false
}

func randomSerial(rand io.Reader) (*big.Int, error) {
	b := make([]byte, 16)
	if _, err := io.ReadFull(rand, b); err != nil {
		return nil, fmt.Errorf("generate certificate serial number: %w", err)
	}
	b[0] &= 0x7f
	b[0] |= 0x40 // positive and never shorter than 16 bytes
	return new(big.Int).SetBytes(b), nil
}

// Fingerprint returns the SHA-256 of cert's DER encoding as upper-case hex
// pairs separated by colons, the form printed by
// `openssl x509 -noout -fingerprint -sha256 -in ca.crt`, so that parties can
// compare it out of band.
func Fingerprint(cert *x509.Certificate) string { return DigestFingerprint(cert.Raw) }

// DigestFingerprint returns the SHA-256 of b in the form of Fingerprint.
func DigestFingerprint(b []byte) string {
	sum := sha256.Sum256(b)
	return colonHex(sum[:])
}

// Usage says which side of a TLS handshake a peer's certificate is used on.
type Usage int

// Certificate usages.
const (
	// UsageClient: the peer dialled us.
	UsageClient Usage = iota
	// UsageServer: we dialled the peer.
	UsageServer
)

// Errors matched (errors.Is) by *PeerCertError.
var (
	ErrUntrustedCertificate = errors.New("certificate is not issued by the federation CA")
	ErrCertificateExpired   = errors.New("certificate has expired or is not yet valid")
	ErrBadCertificate       = errors.New("certificate is malformed or not usable for this purpose")
)

// PeerCertError says why a certificate presented by a peer was rejected.
type PeerCertError struct {
	Kind    error  // one of ErrUntrustedCertificate, ErrCertificateExpired, ErrBadCertificate, ErrNoPeerIdentity
	Subject string // the certificate's subject, when it could be parsed
	Detail  string
}

func (e *PeerCertError) Error() string {
	s := "rejected peer certificate"
	if e.Subject != "" {
		s += " " + e.Subject
	}
	return s + ": " + e.Kind.Error() + ": " + e.Detail
}

// Unwrap returns the kind of failure.
func (e *PeerCertError) Unwrap() error { return e.Kind }

// VerifyPeer verifies a chain presented in a TLS handshake (leaf first, DER)
// against the federation CA at time now, for the given usage, and returns
// the party it names. Errors are *PeerCertError.
func VerifyPeer(ca *x509.Certificate, rawCerts [][]byte, now time.Time, usage Usage) (Peer, error) {
	if len(rawCerts) == 0 {
		return Peer{}, &PeerCertError{Kind: ErrBadCertificate, Detail: "the peer presented no certificate; configure its federation certificate"}
	}
	certs := make([]*x509.Certificate, len(rawCerts))
	for i, raw := range rawCerts {
		c, err := x509.ParseCertificate(raw)
		if err != nil {
			return Peer{}, &PeerCertError{Kind: ErrBadCertificate, Detail: err.Error()}
		}
		certs[i] = c
	}
	leaf := certs[0]
	subject := leaf.Subject.CommonName
	if leaf.IsCA {
		return Peer{}, &PeerCertError{Kind: ErrBadCertificate, Subject: subject, Detail: "the peer presented a CA certificate instead of its party certificate"}
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	eku := x509.ExtKeyUsageClientAuth
	if usage == UsageServer {
		eku = x509.ExtKeyUsageServerAuth
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{eku}})
	if err != nil {
		var inv x509.CertificateInvalidError
		var unk x509.UnknownAuthorityError
		switch {
		case errors.As(err, &inv) && inv.Reason == x509.Expired:
			c, what := leaf, "issue the party a new certificate"
			if inv.Cert != nil && !inv.Cert.Equal(leaf) {
				c, what = inv.Cert, fmt.Sprintf("the CA certificate %q is not valid now; check this party's clock or renew the CA", inv.Cert.Subject.CommonName)
			}
			return Peer{}, &PeerCertError{Kind: ErrCertificateExpired, Subject: subject,
				Detail: fmt.Sprintf("valid from %s to %s, now is %s; %s",
					c.NotBefore.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), what)}
		case errors.As(err, &unk):
			return Peer{}, &PeerCertError{Kind: ErrUntrustedCertificate, Subject: subject,
				Detail: fmt.Sprintf("issuer %q is not the federation CA (fingerprint %s); the peer belongs to another federation or uses a stale certificate",
					leaf.Issuer.CommonName, Fingerprint(ca))}
		default:
			return Peer{}, &PeerCertError{Kind: ErrBadCertificate, Subject: subject, Detail: err.Error()}
		}
	}
	p, err := peerFromCert(leaf)
	if err != nil {
		return Peer{}, &PeerCertError{Kind: ErrNoPeerIdentity, Subject: subject, Detail: err.Error()}
	}
	return p, nil
}

// colonHex returns b as upper-case hex pairs separated by colons.
func colonHex(b []byte) string {
	var s strings.Builder
	for i, c := range b {
		if i > 0 {
			s.WriteByte(':')
		}
		fmt.Fprintf(&s, "%02X", c)
	}
	return s.String()
}
