package crypto

import (
	"crypto/tls"
	"crypto/x509"
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

func pool(ca *x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca)
	return p
}
