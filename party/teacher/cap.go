package teacher

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// Intake is the auditors' ledger intake as a hospital reaches it directly,
// without the aggregator: *intake.Client dialled with the
// hospital's certificate. The auditors take from a hospital only its own
// open-account and change-cap commands and its own budget read.
type Intake interface {
	Submit(ctx context.Context, cmd []byte) (*nzcpb.LedgerResult, error)
	Budget(ctx context.Context, req *nzcpb.BudgetRequest) (*nzcpb.BudgetResponse, error)
}

// CapRequest is a hospital's new privacy cap.
type CapRequest struct {
	Hospital string
	Key      ed25519.PrivateKey // the hospital's ledger signing key
	Epsilon  float64            // finite, > 0
	Delta    float64            // in (0, 1)
	Now      func() time.Time   // the commands' timestamp; nil means time.Now
}

// CapResult is what the ledger did with a cap request.
type CapResult struct {
	Hospital string  `json:"hospital"`
	Command  string  `json:"command"` // open-account or change-cap
	Version  uint64  `json:"version"` // the cap version signed (0 for an opening)
	Epsilon  float64 `json:"cap_epsilon"`
	Delta    float64 `json:"cap_delta"`
	Index    uint64  `json:"ledger_index"`
	Code     string  `json:"code"` // committed, rejected, …
}

// ErrCapRefused is matched by the error of a cap request the ledger
// refused.
var ErrCapRefused = errors.New("the ledger refused the cap")

// capAttempts bounds the re-signings of a change raced by another change
// of the same account.
const capAttempts = 3

// SetCap sets the hospital's cap through the auditors directly: it opens
// the account with the cap when the ledger has none, and otherwise signs
// the next cap change (the account's cap version + 1). A change raced by
// another one is signed again with the new version, a few times.
func SetCap(ctx context.Context, in Intake, req CapRequest) (CapResult, error) {
	if !(req.Epsilon > 0) || math.IsInf(req.Epsilon, 0) {
		return CapResult{}, fmt.Errorf("cap ε must be finite and positive, e.g. 4; got %v", req.Epsilon)
	}
	if !(req.Delta > 0 && req.Delta < 1) {
		return CapResult{}, fmt.Errorf("cap δ must be in (0, 1), e.g. 1e-5; got %v", req.Delta)
	}
	now := req.Now
	if now == nil {
		now = time.Now
	}
	var last CapResult
	var reason string
	for range capAttempts {
		resp, err := in.Budget(ctx, &nzcpb.BudgetRequest{HospitalIds: []string{req.Hospital}})
		if err != nil {
			return CapResult{}, fmt.Errorf("reading the account of %s: %w", req.Hospital, err)
		}
		out := CapResult{Hospital: req.Hospital, Epsilon: req.Epsilon, Delta: req.Delta}
		var body ledger.Body
		if bs := resp.GetBudgets(); len(bs) == 1 && bs[0].GetHospitalId() == req.Hospital {
			out.Command, out.Version = ledger.KindChangeCap.String(), bs[0].GetCapVersion()+1
			body = &ledger.ChangeCap{Hospital: req.Hospital, Version: out.Version, CapEpsilon: req.Epsilon, CapDelta: req.Delta, Timestamp: now().UnixNano()}
		} else {
			out.Command = ledger.KindOpenAccount.String()
			body = &ledger.OpenAccount{Hospital: req.Hospital, CapEpsilon: req.Epsilon, CapDelta: req.Delta, Timestamp: now().UnixNano()}
		}
		cmd, err := ledger.Sign(body, req.Hospital, req.Key)
		if err != nil {
			return CapResult{}, err
		}
		res, err := in.Submit(ctx, cmd)
		if err != nil {
			return CapResult{}, fmt.Errorf("submitting the %s of %s: %w", out.Command, req.Hospital, err)
		}
		out.Index, out.Code = res.GetIndex(), strings.ToLower(strings.TrimPrefix(res.GetCode().String(), "LEDGER_RESULT_CODE_"))
		if res.GetCode() == nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED {
			return out, nil
		}
		last, reason = out, res.GetReason()
		// Refused: if the account moved meanwhile (another change, or an
		// opening), sign again against what it is now.
		again, err := in.Budget(ctx, &nzcpb.BudgetRequest{HospitalIds: []string{req.Hospital}})
		if err != nil || !moved(again, req.Hospital, out.Version, out.Command) {
			break
		}
	}
	return last, fmt.Errorf("%w: %s of %s: %s", ErrCapRefused, last.Command, last.Hospital, reason)
}

// moved says whether the account is no longer where a request signed
// against version (or, for an opening, no account) expected it.
func moved(resp *nzcpb.BudgetResponse, hospital string, version uint64, command string) bool {
	bs := resp.GetBudgets()
	open := len(bs) == 1 && bs[0].GetHospitalId() == hospital
	if command == ledger.KindOpenAccount.String() {
		return open
	}
	return open && bs[0].GetCapVersion()+1 != version
}
