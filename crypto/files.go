package crypto

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/nzcfed/nzc/internal/atomicfile"
)

// File permissions of what this package writes.
const (
	PrivateFileMode fs.FileMode = 0o600
	PublicFileMode  fs.FileMode = 0o644
)

// ErrExists is matched (errors.Is) when a key or certificate file would be
// overwritten without force.
var ErrExists = errors.New("file already exists")

// ErrInsecurePermissions is matched (errors.Is) by *PermissionError.
var ErrInsecurePermissions = errors.New("private key file is readable by others")

// PermissionError says a private key file may be read by its group or by
// everyone, and what to do about it.
type PermissionError struct {
	Path string
	Mode fs.FileMode
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("private key file %s has mode %04o and is readable by others: run `chmod 600 %s` (and consider the key compromised if others had access)",
		e.Path, e.Mode.Perm(), e.Path)
}

// Is reports whether target is ErrInsecurePermissions.
func (e *PermissionError) Is(target error) bool { return target == ErrInsecurePermissions }

// WriteFile writes data to path atomically: it writes a temporary file in the
// same directory, syncs it and moves it into place, so path holds either the
// old or the new content, never a mix. Without force it refuses, with an
// error matching ErrExists, to replace an existing file.
func WriteFile(path string, data []byte, perm fs.FileMode, force bool) error {
	if !force {
		if _, err := os.Lstat(path); err == nil {
			return fmt.Errorf("%w: %s (use force to replace it)", ErrExists, path)
		}
	}
	if err := atomicfile.Write(path, data, perm, force); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: %s (use force to replace it)", ErrExists, path)
		}
		return err
	}
	return nil
}

// ReadPrivateFile reads a private key file after checking that neither its
// group nor others may read or write it (*PermissionError otherwise).
func ReadPrivateFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read private key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read private key: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, &PermissionError{Path: path, Mode: fi.Mode()}
	}
	const maxKeyFile = 1 << 20
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("read private key %s: %w", path, err)
	}
	if len(data) > maxKeyFile {
		return nil, fmt.Errorf("read private key %s: larger than %d bytes, not a key file", path, maxKeyFile)
	}
	return data, nil
}

// PEM block types.
const (
	pemCertificate = "CERTIFICATE"
	pemPrivateKey  = "PRIVATE KEY"
	pemPublicKey   = "PUBLIC KEY"
)

// EncodeCertPEM returns cert as a PEM block.
func EncodeCertPEM(cert *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: cert.Raw})
}

// ParseCertPEM parses the first certificate of a PEM file.
func ParseCertPEM(data []byte) (*x509.Certificate, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, errors.New("no CERTIFICATE PEM block found")
		}
		if b.Type == pemCertificate {
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("parse certificate: %w", err)
			}
			return c, nil
		}
	}
}

// EncodeKeyPEM returns an ed25519 private key as a PKCS #8 PEM block.
func EncodeKeyPEM(key ed25519.PrivateKey) ([]byte, error) {
	return encodeKeyPEM(key, pemPrivateKey, "private key", x509.MarshalPKCS8PrivateKey)
}

// ParseKeyPEM parses a PKCS #8 PEM ed25519 private key.
func ParseKeyPEM(data []byte) (ed25519.PrivateKey, error) {
	return parseKeyPEM[ed25519.PrivateKey](data, pemPrivateKey, "private key", x509.ParsePKCS8PrivateKey)
}

// EncodePublicKeyPEM returns an ed25519 public key as a PKIX PEM block.
func EncodePublicKeyPEM(key ed25519.PublicKey) ([]byte, error) {
	return encodeKeyPEM(key, pemPublicKey, "public key", x509.MarshalPKIXPublicKey)
}

// ParsePublicKeyPEM parses a PKIX PEM ed25519 public key.
func ParsePublicKeyPEM(data []byte) (ed25519.PublicKey, error) {
	return parseKeyPEM[ed25519.PublicKey](data, pemPublicKey, "public key", x509.ParsePKIXPublicKey)
}

// encodeKeyPEM marshals key, the what of the error messages, with marshal
// into a PEM block of type typ.
func encodeKeyPEM(key any, typ, what string, marshal func(any) ([]byte, error)) ([]byte, error) {
	der, err := marshal(key)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", what, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), nil
}

// parseKeyPEM parses the first PEM block of data, which must be of type
// typ, with parse, and checks that it holds an ed25519 key of type K.
func parseKeyPEM[K ed25519.PrivateKey | ed25519.PublicKey](data []byte, typ, what string, parse func([]byte) (any, error)) (K, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != typ {
		return nil, errors.New("no " + typ + " PEM block found")
	}
	k, err := parse(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", what, err)
	}
	ek, ok := k.(K)
	if !ok {
		return nil, fmt.Errorf("%s is a %T, want ed25519", what, k)
	}
	return ek, nil
}

// WriteCert writes a certificate as PEM (mode 0644).
func WriteCert(path string, cert *x509.Certificate, force bool) error {
	return WriteFile(path, EncodeCertPEM(cert), PublicFileMode, force)
}

// LoadCert reads a PEM certificate file.
func LoadCert(path string) (*x509.Certificate, error) {
	return loadPEM(path, readPublic("certificate"), ParseCertPEM)
}

// WritePrivateKey writes an ed25519 private key as PKCS #8 PEM (mode 0600).
func WritePrivateKey(path string, key ed25519.PrivateKey, force bool) error {
	return writeKeyPEM(path, key, EncodeKeyPEM, PrivateFileMode, force)
}

// LoadPrivateKey reads an ed25519 PKCS #8 PEM private key after checking the
// file's permissions.
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	return loadPEM(path, ReadPrivateFile, ParseKeyPEM)
}

// WritePublicKey writes an ed25519 public key as PKIX PEM (mode 0644).
func WritePublicKey(path string, key ed25519.PublicKey, force bool) error {
	return writeKeyPEM(path, key, EncodePublicKeyPEM, PublicFileMode, force)
}

// LoadPublicKey reads an ed25519 PKIX PEM public key.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	return loadPEM(path, readPublic("public key"), ParsePublicKeyPEM)
}

// writeKeyPEM encodes key with encode and writes it to path with mode perm.
func writeKeyPEM[K any](path string, key K, encode func(K) ([]byte, error), perm fs.FileMode, force bool) error {
	data, err := encode(key)
	if err != nil {
		return err
	}
	return WriteFile(path, data, perm, force)
}

// readPublic returns a reader of files anyone may read whose errors say
// that the file was to hold what.
func readPublic(what string) func(path string) ([]byte, error) {
	return func(path string) ([]byte, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", what, err)
		}
		return data, nil
	}
}

// loadPEM reads the file at path with read and parses it with parse,
// naming the file in a parse error.
func loadPEM[T any](path string, read func(string) ([]byte, error), parse func([]byte) (T, error)) (T, error) {
	var zero T
	data, err := read(path)
	if err != nil {
		return zero, err
	}
	v, err := parse(data)
	if err != nil {
		return zero, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// LoadCredential reads a party's certificate and private key and checks that
// they belong together.
func LoadCredential(certPath, keyPath string) (*Credential, error) {
	cert, err := LoadCert(certPath)
	if err != nil {
		return nil, err
	}
	key, err := LoadPrivateKey(keyPath)
	if err != nil {
		return nil, err
	}
	pub, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok || !pub.Equal(key.Public()) {
		return nil, fmt.Errorf("key %s does not belong to certificate %s: check the party's configuration", keyPath, certPath)
	}
	return &Credential{Cert: cert, Key: key}, nil
}

// WriteCredential writes a party's certificate (0644) and key (0600).
func WriteCredential(certPath, keyPath string, c *Credential, force bool) error {
	if err := WritePrivateKey(keyPath, c.Key, force); err != nil {
		return err
	}
	return WriteCert(certPath, c.Cert, force)
}

// LoadCA reads the federation CA certificate and, when keyPath is not empty,
// its private key, so that the CA can issue.
func LoadCA(certPath, keyPath string) (*CA, error) {
	cert, err := LoadCert(certPath)
	if err != nil {
		return nil, err
	}
	if keyPath == "" {
		if !cert.IsCA {
			return nil, fmt.Errorf("%s is not a CA certificate", certPath)
		}
		return &CA{Cert: cert}, nil
	}
	key, err := LoadPrivateKey(keyPath)
	if err != nil {
		return nil, err
	}
	return NewCAFromKey(cert, key)
}
