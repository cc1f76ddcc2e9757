package provision

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nzcfed/nzc/crypto"
)

// A party that keeps its own keys makes them where it runs ([NewKeyRequest])
// and sends the administrator a [KeyRequest]: its public keys only, each
// signed by its private half, so the request proves that whoever made it
// holds them. The administrator issues a certificate for the request's TLS
// key ([AddPartyFromRequest]) after approving the role and id it asks for;
// the private keys never leave the party.

// KeyRequestFile is the request [NewKeyRequest] writes beside the keys.
const KeyRequestFile = "request.json"

// keyRequestFormat names the request's encoding and is signed with it.
const keyRequestFormat = "nzc-key-request/1"

// maxKeyRequest bounds a request file: a few public keys and host names.
const maxKeyRequest = 64 << 10

// ErrBadKeyRequest is matched (errors.Is) when a key request cannot be
// parsed or its proofs do not verify.
var ErrBadKeyRequest = errors.New("bad key request")

// ErrNotApproved is matched (errors.Is) when a key request asks for another
// role or id than the administrator approved.
var ErrNotApproved = errors.New("key request not approved")

// KeyRequest holds the public parts of a party's keys and the identity it
// asks a certificate for.
type KeyRequest struct {
	Format string      `json:"format"`
	Role   crypto.Role `json:"role"`
	ID     string      `json:"id"`
	Hosts  []string    `json:"hosts,omitempty"`
	// TLSKey is the ed25519 public key the certificate is issued for.
	TLSKey       []byte `json:"tls_public_key"`
	AgeRecipient string `json:"age_recipient"`
	// SigningKey is the party's ed25519 ledger key, for the roles that sign
	// (aggregator, auditors, hospitals).
	SigningKey []byte `json:"signing_public_key,omitempty"`
	// TLSProof and SigningProof are the signatures of the request's body
	// (every field above) by the private halves of TLSKey and SigningKey.
	TLSProof     []byte `json:"tls_proof"`
	SigningProof []byte `json:"signing_proof,omitempty"`
}

// Peer returns the identity the request asks for.
func (r *KeyRequest) Peer() crypto.Peer { return crypto.Peer{Role: r.Role, ID: r.ID} }

// body is what the proofs sign: the request without them, in its JSON
// encoding, after the format name.
func (r *KeyRequest) body() []byte {
	b := *r
	b.TLSProof, b.SigningProof = nil, nil
	data, err := json.Marshal(&b)
	if err != nil {
		panic("crypto: encoding a key request cannot fail: " + err.Error())
	}
	return append([]byte(keyRequestFormat+"\n"), data...)
}

// Fingerprint returns the SHA-256 of the request's body, in the form of
// [crypto.Fingerprint], for the party and the administrator to compare out
// of band before the administrator signs.
func (r *KeyRequest) Fingerprint() string { return crypto.DigestFingerprint(r.body()) }

// Encode returns the request as the JSON file NewKeyRequest writes.
func (r *KeyRequest) Encode() []byte {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		panic("crypto: encoding a key request cannot fail: " + err.Error())
	}
	return append(data, '\n')
}

// ParseKeyRequest parses a request file and checks it: known fields only,
// a valid role and id, well-formed keys, a signing key exactly for the
// roles that sign, and both proofs. Errors match ErrBadKeyRequest.
func ParseKeyRequest(data []byte) (*KeyRequest, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadKeyRequest}, args...)...)
	}
	if len(data) > maxKeyRequest {
		return nil, bad("larger than %d bytes; a request holds only public keys", maxKeyRequest)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r KeyRequest
	if err := dec.Decode(&r); err != nil {
		return nil, bad("not a request made by `nzc keys new`: %v", err)
	}
	if dec.More() {
		return nil, bad("trailing data after the request")
	}
	if r.Format != keyRequestFormat {
		return nil, bad("format %q, want %q: make the request again with this version of nzc", r.Format, keyRequestFormat)
	}
	if err := r.Peer().Validate(); err != nil {
		return nil, bad("%v", err)
	}
	for _, h := range r.Hosts {
		if h == "" || strings.ContainsAny(h, " \t\r\n/") {
			return nil, bad("host %q is not a DNS name or IP address", h)
		}
	}
	if len(r.TLSKey) != ed25519.PublicKeySize {
		return nil, bad("tls_public_key is %d bytes, want an ed25519 key of %d", len(r.TLSKey), ed25519.PublicKeySize)
	}
	if _, err := crypto.ParseRecipient(r.AgeRecipient); err != nil {
		return nil, bad("age_recipient: %v", err)
	}
	signs := HasSigningKey(r.Role)
	switch {
	case signs && len(r.SigningKey) != ed25519.PublicKeySize:
		return nil, bad("a %s needs an ed25519 signing_public_key; got %d bytes", r.Role, len(r.SigningKey))
	case !signs && (r.SigningKey != nil || r.SigningProof != nil):
		return nil, bad("a %s has no signing key, but the request holds one", r.Role)
	}
	body := r.body()
	if !ed25519.Verify(r.TLSKey, body, r.TLSProof) {
		return nil, bad("the TLS key's proof does not verify: the request was altered after it was made")
	}
	if signs && !ed25519.Verify(r.SigningKey, body, r.SigningProof) {
		return nil, bad("the signing key's proof does not verify: the request was altered after it was made")
	}
	return &r, nil
}

// LoadKeyRequest reads and checks a request file (see ParseKeyRequest),
// naming the file in an error.
func LoadKeyRequest(path string) (*KeyRequest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read key request: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeyRequest+1))
	if err != nil {
		return nil, fmt.Errorf("read key request %s: %w", path, err)
	}
	r, err := ParseKeyRequest(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// NewKeyRequest makes a party's keys in dir, where the party runs: its TLS
// key (tls.key), age identity (age.key, age.pub) and, for the roles that
// sign, its ledger signing key (sign.key, sign.pub), private files with mode
// 0600; and the request for the administrator (request.json), which holds
// public parts only. It refuses, with an error matching ErrExists, to
// replace any of them, and writes nothing unless every key was made. rnd
// supplies the ed25519 keys; nil means crypto/rand.
func NewKeyRequest(dir string, p crypto.Peer, hosts []string, rnd io.Reader) (*KeyRequest, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if rnd == nil {
		rnd = rand.Reader
	}
	files := []string{crypto.PartyKeyFile, crypto.AgeIdentityFile, crypto.AgeRecipientFile, KeyRequestFile}
	if HasSigningKey(p.Role) {
		files = append(files, crypto.SigningKeyFile, crypto.VerifyingKeyFile)
	}
	for _, f := range files {
		if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
			return nil, fmt.Errorf("%w: %s already holds %s; choose another directory (keys are never replaced)", crypto.ErrExists, dir, f)
		}
	}
	tlsPub, tlsKey, err := ed25519.GenerateKey(rnd)
	if err != nil {
		return nil, fmt.Errorf("generate TLS key: %w", err)
	}
	age, err := crypto.GenerateIdentity()
	if err != nil {
		return nil, err
	}
	var hs []string
	for _, h := range hosts {
		if h = strings.TrimSpace(h); h != "" {
			hs = append(hs, h)
		}
	}
	r := &KeyRequest{Format: keyRequestFormat, Role: p.Role, ID: p.ID, Hosts: hs, TLSKey: tlsPub, AgeRecipient: age.Recipient().String()}
	var sign ed25519.PrivateKey
	if HasSigningKey(p.Role) {
		if sign, err = crypto.GenerateSigningKey(rnd); err != nil {
			return nil, err
		}
		r.SigningKey = sign.Public().(ed25519.PublicKey)
	}
	body := r.body()
	r.TLSProof = ed25519.Sign(tlsKey, body)
	if sign != nil {
		r.SigningProof = ed25519.Sign(sign, body)
	}
	if _, err := ParseKeyRequest(r.Encode()); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create key directory: %w", err)
	}
	if err := crypto.WritePrivateKey(filepath.Join(dir, crypto.PartyKeyFile), tlsKey, false); err != nil {
		return nil, err
	}
	if err := crypto.WriteIdentity(filepath.Join(dir, crypto.AgeIdentityFile), age, false); err != nil {
		return nil, err
	}
	if err := crypto.WriteRecipient(filepath.Join(dir, crypto.AgeRecipientFile), age.Recipient(), false); err != nil {
		return nil, err
	}
	if sign != nil {
		if err := crypto.WriteSigningKey(filepath.Join(dir, crypto.SigningKeyFile), filepath.Join(dir, crypto.VerifyingKeyFile), sign, false); err != nil {
			return nil, err
		}
	}
	// The request last: a directory with a request holds all its keys.
	return r, crypto.WriteFile(filepath.Join(dir, KeyRequestFile), r.Encode(), crypto.PublicFileMode, false)
}

// AddPartyFromRequest adds the party of a key request to an existing
// federation: it issues a certificate for the request's TLS key and writes,
// in <dir>/<id>/, the certificate and the party's public keys, never a
// private one; the manifest names no private key files for it. approved is
// the role and id the administrator approved: a request for any other is
// refused with an error matching ErrNotApproved, and nothing is written. An
// id already in the federation is refused (ErrExists).
func AddPartyFromRequest(dir string, req *KeyRequest, approved crypto.Peer, opts AddPartyOptions) (*crypto.Manifest, crypto.PartyFiles, error) {
	if req.Peer() != approved {
		return nil, crypto.PartyFiles{}, fmt.Errorf("%w: the request asks for %s, but the approval is for %s; ask the party to make a request for the approved identity",
			ErrNotApproved, req.Peer(), approved)
	}
	if _, err := ParseKeyRequest(req.Encode()); err != nil {
		return nil, crypto.PartyFiles{}, err
	}
	if opts.Force {
		return nil, crypto.PartyFiles{}, errors.New("a party made from a key request cannot replace another: remove the old party first or use another id")
	}
	age, err := crypto.ParseRecipient(req.AgeRecipient)
	if err != nil {
		return nil, crypto.PartyFiles{}, err
	}
	hosts := append(append([]string(nil), req.Hosts...), opts.Hosts...)
	return AddPartyWith(dir, approved, opts, func(ca *crypto.CA, rnd io.Reader, notBefore, notAfter time.Time) (crypto.PartyFiles, error) {
		cert, err := ca.IssueForKey(rnd, crypto.IssueRequest{Peer: approved, Hosts: hosts, NotBefore: notBefore, NotAfter: notAfter}, req.TLSKey)
		if err != nil {
			return crypto.PartyFiles{}, err
		}
		rel := approved.ID
		if err := os.MkdirAll(filepath.Join(dir, rel), 0o700); err != nil {
			return crypto.PartyFiles{}, fmt.Errorf("create party directory: %w", err)
		}
		pf := crypto.PartyFiles{Role: approved.Role, ID: approved.ID, URI: approved.String(), Cert: filepath.Join(rel, crypto.PartyCertFile),
			AgeRecipient: age.String(), NotAfter: cert.NotAfter.UTC()}
		if err := crypto.WriteCert(filepath.Join(dir, pf.Cert), cert, false); err != nil {
			return crypto.PartyFiles{}, err
		}
		if err := crypto.WriteRecipient(filepath.Join(dir, rel, crypto.AgeRecipientFile), age, false); err != nil {
			return crypto.PartyFiles{}, err
		}
		if req.SigningKey != nil {
			pf.VerifyingKey = filepath.Join(rel, crypto.VerifyingKeyFile)
			if err := crypto.WritePublicKey(filepath.Join(dir, pf.VerifyingKey), req.SigningKey, false); err != nil {
				return crypto.PartyFiles{}, err
			}
		}
		return pf, nil
	})
}

// RenewFromRequest issues a new certificate to a party of the federation
// for the keys it already holds: req must be approved (ErrNotApproved
// otherwise) and name exactly the party's certified TLS key, its age
// recipient and its ledger signing key, which the ledger and the students'
// configurations keep. Only the certificate (<dir>/<id>/tls.crt) and its
// expiry in the manifest change. A party with new keys joins under a new
// id instead.
func RenewFromRequest(dir string, req *KeyRequest, approved crypto.Peer, opts AddPartyOptions) (*crypto.Manifest, crypto.PartyFiles, error) {
	if req.Peer() != approved {
		return nil, crypto.PartyFiles{}, fmt.Errorf("%w: the request asks for %s, but the approval is for %s", ErrNotApproved, req.Peer(), approved)
	}
	if _, err := ParseKeyRequest(req.Encode()); err != nil {
		return nil, crypto.PartyFiles{}, err
	}
	m, err := crypto.LoadManifest(dir)
	if err != nil {
		return nil, crypto.PartyFiles{}, err
	}
	old, ok := m.Party(approved.Role, approved.ID)
	if !ok {
		return nil, crypto.PartyFiles{}, fmt.Errorf("%w: the federation has no %s to renew; admit a new party without renewing", ErrNotApproved, approved)
	}
	cert, err := crypto.LoadCert(m.Path(old.Cert))
	if err != nil {
		return nil, crypto.PartyFiles{}, err
	}
	changed := ""
	if pub, ok := cert.PublicKey.(ed25519.PublicKey); !ok || !pub.Equal(ed25519.PublicKey(req.TLSKey)) {
		changed = "TLS key"
	}
	if old.AgeRecipient != req.AgeRecipient {
		changed = "age recipient"
	}
	if old.VerifyingKey != "" {
		pub, err := crypto.LoadPublicKey(m.Path(old.VerifyingKey))
		if err != nil {
			return nil, crypto.PartyFiles{}, err
		}
		if !pub.Equal(ed25519.PublicKey(req.SigningKey)) {
			changed = "signing key"
		}
	}
	if changed != "" {
		return nil, crypto.PartyFiles{}, fmt.Errorf("%w: the request's %s is not the one %s holds; renewal keeps the keys, and a party with new keys joins under a new id", ErrNotApproved, changed, approved)
	}
	hosts := append(append([]string(nil), req.Hosts...), opts.Hosts...)
	opts.Force = true
	return AddPartyWith(dir, approved, opts, func(ca *crypto.CA, rnd io.Reader, notBefore, notAfter time.Time) (crypto.PartyFiles, error) {
		c, err := ca.IssueForKey(rnd, crypto.IssueRequest{Peer: approved, Hosts: hosts, NotBefore: notBefore, NotAfter: notAfter}, req.TLSKey)
		if err != nil {
			return crypto.PartyFiles{}, err
		}
		if err := crypto.WriteCert(m.Path(old.Cert), c, true); err != nil {
			return crypto.PartyFiles{}, err
		}
		pf := old
		pf.NotAfter = c.NotAfter.UTC()
		return pf, nil
	})
}
