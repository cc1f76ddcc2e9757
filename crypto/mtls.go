package crypto

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
)

// This file is the one place that builds the mutual-TLS configuration of a
// federation service over TCP (raft, the compliance API, their clients).
// protocol/quicnet builds the QUIC side from the same CA and credential.

// ServerTLS returns the TLS 1.3 configuration of a federation server: cred's
// certificate, and a client certificate issued by ca required of every
// client. The server still checks the role the certificate names.
func ServerTLS(ca *x509.Certificate, cred *Credential) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cred.TLSCertificate()},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool(ca),
	}
}

// ClientTLS returns the TLS 1.3 configuration of a federation client: cred's
// certificate as the client certificate and ca as the only trusted root.
func ClientTLS(ca *x509.Certificate, cred *Credential) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cred.TLSCertificate()},
		RootCAs:      pool(ca),
	}
}

// ClientTLSTo is ClientTLS for a client that must reach a given party: the
// server's certificate must name the role, and the id when id is not empty.
// The CA and host-name checks alone accept any party of the federation,
// since every certificate is issued by the same CA and may carry the same
// host names.
func ClientTLSTo(ca *x509.Certificate, cred *Credential, role Role, id string) *tls.Config {
	c := ClientTLS(ca, cred)
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return &PeerCertError{Kind: ErrBadCertificate, Detail: "the server presented no certificate"}
		}
		p, err := PeerFromCert(cs.PeerCertificates[0])
		if err != nil {
			return err
		}
		if err := p.Expect(role); err != nil {
			return fmt.Errorf("the server is not the %s asked for: %w", role, err)
		}
		if id != "" && p.ID != id {
			return fmt.Errorf("the server is %s, not %s %s: check the address", p, role, id)
		}
		return nil
	}
	return c
}

func pool(ca *x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca)
	return p
}
