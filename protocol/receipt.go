package protocol

import (
	"golang.org/x/mod/sumdb/tlog"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// maxReceiptProof bounds an inclusion proof: a tree of 2^64 entries needs 64
// hashes.
const maxReceiptProof = 64

// checkReceipt validates an optional receipt's shape: 32-byte proof hashes,
// at most 64 of them, an entry and a checkpoint.
func checkReceipt(r *nzcpb.Receipt) error {
	if r == nil {
		return nil
	}
	if len(r.GetEntry()) == 0 || len(r.GetCheckpoint()) == 0 {
		return bad("receipt without an entry or a checkpoint")
	}
	if len(r.GetProof()) > maxReceiptProof {
		return bad("receipt proof of %d hashes, at most %d", len(r.GetProof()), maxReceiptProof)
	}
	for i, h := range r.GetProof() {
		if len(h) != tlog.HashSize {
			return bad("receipt proof hash %d of %d bytes, want %d", i, len(h), tlog.HashSize)
		}
	}
	return nil
}

// ReceiptToWire returns the wire form of a ledger receipt.
func ReceiptToWire(r ledger.Receipt) *nzcpb.Receipt {
	w := &nzcpb.Receipt{Entry: r.Entry, Checkpoint: r.Checkpoint}
	for _, h := range r.Proof {
		w.Proof = append(w.Proof, h[:])
	}
	return w
}

// ReceiptFromWire returns the ledger receipt a validated message carries; nil
// gives ok = false.
func ReceiptFromWire(w *nzcpb.Receipt) (r ledger.Receipt, ok bool, err error) {
	if w == nil {
		return ledger.Receipt{}, false, nil
	}
	if err := checkReceipt(w); err != nil {
		return ledger.Receipt{}, false, err
	}
	r = ledger.Receipt{Entry: w.GetEntry(), Checkpoint: w.GetCheckpoint()}
	for _, h := range w.GetProof() {
		r.Proof = append(r.Proof, tlog.Hash(h))
	}
	return r, true, nil
}
