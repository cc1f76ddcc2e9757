package intake

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"testing"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// raft's node is a Submitter whose errors the intake reads.
var (
	_ Refusal     = (*raftnode.RejectedError)(nil)
	_ Redirect    = (*raftnode.NotLeaderError)(nil)
	_ NotProposed = (*raftnode.NotProposedError)(nil)
)

type failingNode struct{ err error }

func (n failingNode) Submit(context.Context, []byte) ([]byte, uint64, error) { return nil, 0, n.err }

// What raft says of a command reaches the client: a refusal as a rejected
// result at its index, a redirect as not-leader naming the leader.
func TestProposeReadsTheNodesErrors(t *testing.T) {
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	cmd, err := ledger.Sign(&ledger.RegisterStudent{Student: "student-1", Timestamp: 1}, AdminID, key)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		err      error
		want     *nzcpb.LedgerResult
		wantCode protocol.Code
		leader   string
	}{
		{"refused", fmt.Errorf("apply: %w", &raftnode.RejectedError{Index: 9, Err: errors.New("over the cap")}),
			&nzcpb.LedgerResult{Index: 9, Code: nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_REJECTED, Reason: "over the cap"}, 0, ""},
		{"not the leader", fmt.Errorf("submit: %w", &raftnode.NotLeaderError{LeaderID: "auditor-2", LeaderAddr: "10.0.0.2:7000"}),
			nil, protocol.CodeNotLeader, "10.0.0.2:7000"},
		{"no leader", raftnode.ErrNoLeader, nil, protocol.CodeLedgerUnavailable, ""},
		{"refused before proposal", fmt.Errorf("submit: %w", &raftnode.NotProposedError{Refusal: ledger.EncodeResult(ledger.Result{
			Outcome: ledger.Outcome{Status: ledger.StatusRefused, Code: ledger.CodeUnknownStudent}, Message: "no such student"})}),
			&nzcpb.LedgerResult{Index: 0, Code: nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_REJECTED, Reason: "not proposed: no such student"}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{Node: failingNode{tt.err}, Ledger: stateLedger{ledger.New()}}
			res, err := s.Propose(t.Context(), cmd)
			if tt.want != nil {
				if err != nil || res.GetIndex() != tt.want.GetIndex() || res.GetCode() != tt.want.GetCode() || res.GetReason() != tt.want.GetReason() {
					t.Fatalf("Propose = %v, %v; want %v", res, err, tt.want)
				}
				return
			}
			var pe *protocol.Error
			if !errors.As(err, &pe) || pe.Code != tt.wantCode || pe.LeaderAddress != tt.leader {
				t.Fatalf("Propose = %v, %v; want code %v naming leader %q", res, err, tt.wantCode, tt.leader)
			}
		})
	}
}
