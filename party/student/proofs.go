package student

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/nzcfed/nzc/ledger"
)

// ProofReport is the result of re-verifying every recorded batch's receipt.
type ProofReport struct {
	Batches   int      `json:"batches"`
	Verified  int      `json:"verified"`
	NoReceipt []string `json:"no_receipt,omitempty"` // batch files recorded without a receipt
	Failed    []string `json:"failed,omitempty"`     // batch files whose receipt does not verify, with why
}

// OK reports whether every recorded batch's receipt verified.
func (r ProofReport) OK() bool { return r.Batches > 0 && r.Verified == r.Batches }

// VerifyState re-verifies the receipt of every batch recorded in the state
// directory against the auditors' keys: what a student can show a hospital
// or a regulator, long after the labels arrived, without trusting the
// aggregator or any one auditor.
func VerifyState(stateDir, student string, auditorKeys []string) (ProofReport, error) {
	files, err := filepath.Glob(filepath.Join(stateDir, "*", "batch-*.json"))
	if err != nil {
		return ProofReport{}, err
	}
	if len(files) == 0 {
		return ProofReport{}, fmt.Errorf("student: no recorded batches in %s; label some data first", stateDir)
	}
	receipts, err := ledger.NewVerifier(auditorKeys)
	if err != nil {
		return ProofReport{}, fmt.Errorf("student: auditor keys: %w", err)
	}
	slices.Sort(files)
	var rep ProofReport
	for _, f := range files {
		rep.Batches++
		b, err := os.ReadFile(f)
		if err != nil {
			return rep, err
		}
		var bt Batch
		if err := json.Unmarshal(b, &bt); err != nil {
			rep.Failed = append(rep.Failed, fmt.Sprintf("%s: %v", f, err))
			continue
		}
		switch err := VerifyBatch(&bt, student, receipts); {
		case err == nil:
			rep.Verified++
		case bt.Receipt == nil:
			rep.NoReceipt = append(rep.NoReceipt, f)
		default:
			rep.Failed = append(rep.Failed, fmt.Sprintf("%s: %v", f, err))
		}
	}
	if !rep.OK() {
		return rep, fmt.Errorf("%w: %d of %d recorded batches verified", ErrNoProof, rep.Verified, rep.Batches)
	}
	return rep, nil
}
