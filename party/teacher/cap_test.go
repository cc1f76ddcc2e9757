package teacher

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// fakeIntake answers budget reads from a cap version (none: no account)
// and decides submissions with decide.
type fakeIntake struct {
	version   *uint64
	decide    func(c ledger.Command) nzcpb.LedgerResultCode
	submitted []ledger.Command
}

func (f *fakeIntake) Budget(_ context.Context, req *nzcpb.BudgetRequest) (*nzcpb.BudgetResponse, error) {
	if f.version == nil {
		return &nzcpb.BudgetResponse{}, nil
	}
	return &nzcpb.BudgetResponse{Budgets: []*nzcpb.HospitalBudget{{HospitalId: req.GetHospitalIds()[0], CapVersion: *f.version}}}, nil
}

func (f *fakeIntake) Submit(_ context.Context, cmd []byte) (*nzcpb.LedgerResult, error) {
	c, err := ledger.DecodeCommand(cmd)
	if err != nil {
		return nil, err
	}
	f.submitted = append(f.submitted, c)
	return &nzcpb.LedgerResult{Code: f.decide(c), Index: uint64(len(f.submitted))}, nil
}

func TestSetCap(t *testing.T) {
	key := testKey(4)
	committed := func(ledger.Command) nzcpb.LedgerResultCode {
		return nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED
	}
	req := CapRequest{Hospital: "hospital-4", Key: key, Epsilon: 2, Delta: 1e-6}

	// No account yet: the cap opens it.
	in := &fakeIntake{decide: committed}
	got, err := SetCap(t.Context(), in, req)
	if err != nil || got.Command != "open-account" || got.Code != "committed" || len(in.submitted) != 1 || in.submitted[0].Signer != "hospital-4" {
		t.Fatalf("opening: %+v %v", got, err)
	}

	// An account at cap version 3: the next change is version 4.
	v := uint64(3)
	in = &fakeIntake{version: &v, decide: committed}
	got, err = SetCap(t.Context(), in, req)
	if b, ok := in.submitted[0].Body.(*ledger.ChangeCap); err != nil || !ok || b.Version != 4 || b.CapEpsilon != 2 || got.Version != 4 {
		t.Fatalf("change: %+v %v", got, err)
	}

	// Another change lands in between: the request is signed again with
	// the version after it.
	v = 3
	in = &fakeIntake{version: &v}
	in.decide = func(c ledger.Command) nzcpb.LedgerResultCode {
		if c.Body.(*ledger.ChangeCap).Version == 4 {
			v = 4 // the raced change
			return nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_REJECTED
		}
		return nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED
	}
	if got, err = SetCap(t.Context(), in, req); err != nil || got.Version != 5 || len(in.submitted) != 2 {
		t.Fatalf("raced change: %+v %v after %d submissions", got, err, len(in.submitted))
	}

	// Refused with nothing moved: said so, and not retried.
	v = 3
	in = &fakeIntake{version: &v, decide: func(ledger.Command) nzcpb.LedgerResultCode { return nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_REJECTED }}
	if _, err = SetCap(t.Context(), in, req); !errors.Is(err, ErrCapRefused) || len(in.submitted) != 1 {
		t.Fatalf("refused: %v after %d submissions", err, len(in.submitted))
	}

	// A cap that is no cap is refused before anything is read or sent.
	for _, bad := range []CapRequest{{Epsilon: 0, Delta: 1e-6}, {Epsilon: math.Inf(1), Delta: 1e-6}, {Epsilon: 1, Delta: 1}, {Epsilon: math.NaN(), Delta: 1e-6}} {
		bad.Hospital, bad.Key = "hospital-4", key
		in = &fakeIntake{decide: committed}
		if _, err := SetCap(t.Context(), in, bad); err == nil || len(in.submitted) != 0 {
			t.Errorf("cap ε=%v δ=%v: %v", bad.Epsilon, bad.Delta, err)
		}
	}
}
