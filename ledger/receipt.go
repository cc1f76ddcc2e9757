package ledger

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"
)

// ErrReceipt reports a receipt that does not prove what it claims: its
// checkpoint lacks a majority of the pinned auditors, its entry is not in the
// checkpoint's tree, or the entry is not the accepted command expected.
var ErrReceipt = errors.New("ledger: the receipt does not prove the commit")

// Receipt proves that a command was committed to the ledger and accepted,
// to anyone who pins the auditors' keys: the accepted entry, its inclusion
// proof in a tree, and a checkpoint of that tree signed by a majority of the
// auditors. One auditor alone cannot make one: it would need a majority's
// signatures on a tree that holds the entry.
type Receipt struct {
	Entry      []byte           // the accepted entry, canonically encoded
	Proof      tlog.RecordProof // the entry's inclusion in the checkpoint's tree
	Checkpoint []byte           // a signed note: the checkpoint and its cosignatures
}

// Receipt returns the receipt of entry index: its inclusion proof in the
// tree of the signed checkpoint, which must cover it. The caller collects the
// signatures; VerifyReceipt checks them.
func (s *State) Receipt(index int64, signedCheckpoint []byte) (Receipt, error) {
	c, err := PeekCheckpoint(signedCheckpoint)
	if err != nil {
		return Receipt{}, err
	}
	if index < 0 || index >= c.Size {
		return Receipt{}, fmt.Errorf("%w: entry %d is outside the checkpoint of size %d; cosign a newer checkpoint", ErrReceipt, index, c.Size)
	}
	entries, err := s.Entries(index, index+1)
	if err != nil {
		return Receipt{}, err
	}
	proof, err := s.ProveInclusion(index, c.Size)
	if err != nil {
		return Receipt{}, err
	}
	return Receipt{Entry: entries[0], Proof: proof, Checkpoint: signedCheckpoint}, nil
}

// receiptJSON is the JSON form of a receipt: what a student keeps beside its
// labels and re-verifies later.
type receiptJSON struct {
	Entry      string   `json:"entry"`      // base64
	Proof      []string `json:"proof"`      // base64 hashes
	Checkpoint string   `json:"checkpoint"` // the signed note, as text
}

// MarshalJSON encodes the receipt with base64 entry and proof hashes and the
// checkpoint note as text.
func (r Receipt) MarshalJSON() ([]byte, error) {
	j := receiptJSON{Entry: base64.StdEncoding.EncodeToString(r.Entry), Checkpoint: string(r.Checkpoint), Proof: []string{}}
	for _, h := range r.Proof {
		j.Proof = append(j.Proof, base64.StdEncoding.EncodeToString(h[:]))
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes what MarshalJSON writes, strictly.
func (r *Receipt) UnmarshalJSON(b []byte) error {
	var j receiptJSON
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&j); err != nil {
		return fmt.Errorf("%w: receipt: %w", ErrMalformed, err)
	}
	if d.More() {
		return fmt.Errorf("%w: receipt: data after the object", ErrMalformed)
	}
	entry, err := base64.StdEncoding.Strict().DecodeString(j.Entry)
	if err != nil {
		return fmt.Errorf("%w: receipt entry: %w", ErrMalformed, err)
	}
	if len(j.Proof) > 64 {
		return fmt.Errorf("%w: receipt proof of %d hashes (at most 64)", ErrMalformed, len(j.Proof))
	}
	proof := make(tlog.RecordProof, 0, len(j.Proof))
	for i, s := range j.Proof {
		h, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil || len(h) != tlog.HashSize {
			return fmt.Errorf("%w: receipt proof hash %d is not %d bytes of base64", ErrMalformed, i, tlog.HashSize)
		}
		proof = append(proof, tlog.Hash(h))
	}
	*r = Receipt{Entry: entry, Proof: proof, Checkpoint: []byte(j.Checkpoint)}
	return nil
}
