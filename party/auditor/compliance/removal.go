package compliance

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nzcfed/nzc/ledger"
)

// A vanished auditor cannot ask for its own removal, and one auditor's
// certificate must not remove another. A quorum-signed removal is the
// third way: a statement naming the auditor to remove and a deadline,
// signed with the ledger signing keys of a majority of the *other*
// auditors the ledger registered (in its genesis or by the administrator
// since: the administrator, who can register auditors, can therefore also
// make a majority of signers, and registered auditors that never joined
// or have left count towards the majority needed). Every
// auditor that handles it, the raft leader included, checks the signatures
// against its own ledger before raft membership changes
// (raftnode.Config.VerifyRemoval).

// MaxRemovalValidity bounds how far ahead a removal's deadline may lie: a
// signed removal can be replayed until its deadline (say, after the
// removed auditor rejoined), so it is short-lived.
const MaxRemovalValidity = 7 * 24 * time.Hour

// Removal is a quorum-signed removal of auditor Remove: the body of POST
// /v1/admin/remove-signed and the proof raft's leader checks.
type Removal struct {
	Remove     string             `json:"remove"`
	NotAfter   int64              `json:"not_after"` // unix seconds
	Signatures []RemovalSignature `json:"signatures"`
}

// RemovalSignature is one auditor's ed25519 signature of a removal's
// statement (RemovalStatement), with its ledger signing key.
type RemovalSignature struct {
	Auditor   string `json:"auditor"`
	Signature []byte `json:"signature"`
}

// ErrRemovalNotQuorum is matched when a removal is not signed by a
// majority of the other registered auditors, or not for this auditor and
// time.
var ErrRemovalNotQuorum = errors.New("compliance: the removal is not signed by a majority of the other auditors")

// RemovalStatement is the text each signing auditor signs.
func RemovalStatement(remove string, notAfter int64) []byte {
	return fmt.Appendf(nil, "nzc remove auditor/v1\nremove %s\nnot after %d\n", remove, notAfter)
}

// SignRemoval returns auditor signer's signature, with its ledger signing
// key, of the removal of remove until notAfter.
func SignRemoval(signer string, key ed25519.PrivateKey, remove string, notAfter int64) RemovalSignature {
	return RemovalSignature{Auditor: signer, Signature: ed25519.Sign(key, RemovalStatement(remove, notAfter))}
}

// Encode is the removal as raft's leader receives it.
func (r Removal) Encode() ([]byte, error) { return json.Marshal(r) }

// DecodeRemoval parses an encoded removal strictly.
func DecodeRemoval(b []byte) (Removal, error) {
	var r Removal
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Removal{}, fmt.Errorf("%w: not a removal: %v", ErrRemovalNotQuorum, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Removal{}, fmt.Errorf("%w: trailing data after the removal", ErrRemovalNotQuorum)
	}
	return r, nil
}

// VerifyRemoval checks that proof removes auditor id, has not expired at
// now nor lies more than MaxRemovalValidity ahead, and carries valid
// signatures of more than half of auditors other than id (the ledger's
// registered auditors). Signatures of id itself, of unknown auditors, and
// repeated ones do not count.
func VerifyRemoval(auditors []ledger.Party, id string, proof []byte, now time.Time) error {
	r, err := DecodeRemoval(proof)
	if err != nil {
		return err
	}
	switch deadline := time.Unix(r.NotAfter, 0); {
	case r.Remove != id:
		return fmt.Errorf("%w: it removes %q, not %q", ErrRemovalNotQuorum, r.Remove, id)
	case now.After(deadline):
		return fmt.Errorf("%w: it expired at %s; sign a new one", ErrRemovalNotQuorum, deadline.UTC().Format(time.RFC3339))
	case deadline.Sub(now) > MaxRemovalValidity:
		return fmt.Errorf("%w: its deadline %s is more than %s ahead; sign one that expires sooner", ErrRemovalNotQuorum, deadline.UTC().Format(time.RFC3339), MaxRemovalValidity)
	}
	keys := map[string]ed25519.PublicKey{}
	for _, p := range auditors {
		if p.Role == ledger.RoleAuditor && p.ID != id {
			keys[p.ID] = p.PublicKey
		}
	}
	need := len(keys)/2 + 1
	msg := RemovalStatement(r.Remove, r.NotAfter)
	signed := map[string]bool{}
	for _, s := range r.Signatures {
		if k, ok := keys[s.Auditor]; ok && !signed[s.Auditor] && ed25519.Verify(k, msg, s.Signature) {
			signed[s.Auditor] = true
		}
	}
	if len(signed) < need || len(keys) == 0 {
		return fmt.Errorf("%w: %d valid signatures of the %d other auditors, %d needed", ErrRemovalNotQuorum, len(signed), len(keys), need)
	}
	return nil
}
