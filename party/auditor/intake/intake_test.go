package intake

import (
	"testing"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

func TestToWire(t *testing.T) {
	for _, tc := range []struct {
		r     ledger.Result
		code  nzcpb.LedgerResultCode
		index uint64
	}{
		{ledger.Result{Index: 7, Outcome: ledger.Outcome{Status: ledger.StatusAccepted}}, nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED, 7},
		{ledger.Result{Index: 9, Outcome: ledger.Outcome{Status: ledger.StatusDuplicate, Original: 7}}, nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_DUPLICATE, 7},
		{ledger.Result{Index: 9, Outcome: ledger.Outcome{Status: ledger.StatusRefused, Code: ledger.CodeCapExceeded}}, nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_BUDGET_EXHAUSTED, 9},
		{ledger.Result{Index: 9, Outcome: ledger.Outcome{Status: ledger.StatusRefused, Code: ledger.CodeDeltaExhausted}}, nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_BUDGET_EXHAUSTED, 9},
		{ledger.Result{Index: 9, Outcome: ledger.Outcome{Status: ledger.StatusRefused, Code: ledger.CodeQuotaExceeded}}, nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_BUDGET_EXHAUSTED, 9},
		{ledger.Result{Index: 9, Outcome: ledger.Outcome{Status: ledger.StatusRefused, Code: ledger.CodeBadSignature}}, nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_REJECTED, 9},
		{ledger.Result{Index: 9, Outcome: ledger.Outcome{Status: ledger.StatusRefused, Code: ledger.CodeConflict}}, nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_REJECTED, 9},
	} {
		w := ToWire(tc.r)
		if w.GetCode() != tc.code || w.GetIndex() != tc.index || w.GetReason() == "" {
			t.Errorf("%+v → %v", tc.r, w)
		}
	}
}

// The ledger bounds registered ensembles exactly as the wire does, so a
// registration the ledger accepts always travels in a budget read.
func TestEnsembleBoundsAgree(t *testing.T) {
	if ledger.MaxTeachers != protocol.MaxTeachers || ledger.MaxClasses != protocol.MaxClasses {
		t.Fatalf("ledger bounds %d teachers, %d classes; wire %d, %d", ledger.MaxTeachers, ledger.MaxClasses, protocol.MaxTeachers, protocol.MaxClasses)
	}
}
