package crypto

import (
	"crypto/ed25519"
	"fmt"
	"io"
)

// GenerateSigningKey creates an ed25519 key pair, used by the aggregator to
// sign ledger charges and by each auditor to sign checkpoints.
func GenerateSigningKey(rand io.Reader) (ed25519.PrivateKey, error) {
	_, priv, err := ed25519.GenerateKey(rand)
	if err != nil {
		return nil, fmt.Errorf("generate signing key: %w", err)
	}
	return priv, nil
}

// WriteSigningKey writes the private key (0600) and its public key (0644).
func WriteSigningKey(privPath, pubPath string, key ed25519.PrivateKey, force bool) error {
	if err := WritePrivateKey(privPath, key, force); err != nil {
		return err
	}
	return WritePublicKey(pubPath, key.Public().(ed25519.PublicKey), force)
}
