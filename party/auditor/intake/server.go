package intake

import (
	"context"
	"errors"
	"log/slog"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// Submitter replicates a command: *raftnode.Node.
type Submitter interface {
	Submit(ctx context.Context, cmd []byte) ([]byte, uint64, error)
}

// Ledger is this auditor's replica of the ledger: *auditor.Ledger.
type Ledger interface {
	// Checkpoint returns this auditor's signed checkpoint; 0 asks for the
	// latest.
	Checkpoint(treeSize uint64) ([]byte, error)
	// State is the ledger, for budget reads.
	State() *ledger.State
}

// Server answers the aggregator's ledger requests on one auditor.
type Server struct {
	Node   Submitter
	Ledger Ledger
	// Receipts makes the proof of each commit that the aggregator checks
	// before it releases anything. Required.
	Receipts *Receipts
	Logger   *slog.Logger
}

// Listen opens the intake listener: only the aggregator may connect.
func Listen(addr string, cfg quicnet.Config) (*quicnet.Listener, error) {
	return quicnet.Listen(addr, cfg, crypto.RoleAggregator)
}

// Serve accepts connections on l until ctx ends.
func (s *Server) Serve(ctx context.Context, l *quicnet.Listener) error {
	aggOnly := []crypto.Role{crypto.RoleAggregator}
	mux := quicnet.Mux{
		protocol.TypeLedgerSubmit:  {Roles: aggOnly, Handle: s.submit},
		protocol.TypeBudgetRequest: {Roles: aggOnly, Handle: s.budget},
	}
	return l.Serve(ctx, mux, s.Logger)
}

func (s *Server) submit(ctx context.Context, r *quicnet.Request) (protocol.MsgType, []byte, error) {
	var req nzcpb.LedgerSubmit
	if err := r.Decode(&req); err != nil {
		return 0, nil, err
	}
	out, err := s.Propose(ctx, req.GetCommand())
	if err != nil {
		return 0, nil, err
	}
	return quicnet.Reply(out)
}

// Propose replicates one command and returns the ledger's answer, with a
// receipt for a charge or a session opening. A hospital's own account
// command (its registration, opening its account, changing its cap), which
// the aggregator only relays, is first decided against this auditor's
// replica: one the ledger would refuse or has already applied is answered
// so without being proposed, so that junk relayed commands do not become
// permanent entries.
func (s *Server) Propose(ctx context.Context, cmd []byte) (*nzcpb.LedgerResult, error) {
	if relayed(cmd) {
		st := s.Ledger.State()
		if r := st.Check(cmd); r.Status != ledger.StatusAccepted {
			r.Index = uint64(st.TreeSize())
			out := ToWire(r)
			out.Reason = "not proposed: " + out.GetReason()
			return out, nil
		}
	}
	data, _, err := s.Node.Submit(ctx, cmd)
	if err != nil {
		var rej *raftnode.RejectedError
		var nl *raftnode.NotLeaderError
		switch {
		case errors.As(err, &rej):
			return &nzcpb.LedgerResult{Index: rej.Index, Code: nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_REJECTED, Reason: rej.Err.Error()}, nil
		case errors.As(err, &nl):
			return nil, protocol.NotLeader(nl.LeaderAddr)
		}
		return nil, protocol.Errorf(protocol.CodeLedgerUnavailable, "the auditors did not commit the command: %v", err)
	}
	res, err := ledger.DecodeResult(data)
	if err != nil {
		return nil, err
	}
	out := ToWire(res)
	if cp, err := s.Ledger.Checkpoint(0); err == nil {
		out.Checkpoint = cp
	}
	switch out.GetCode() {
	case nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED, nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_DUPLICATE:
		if !needsReceipt(cmd) {
			break
		}
		rec, err := s.Receipts.For(ctx, int64(out.GetIndex()))
		if err != nil {
			return nil, protocol.Errorf(protocol.CodeLedgerUnavailable,
				"the charge is entry %d, but its receipt is not ready (%v); retry the same command, which is not charged twice", out.GetIndex(), err)
		}
		out.Receipt = protocol.ReceiptToWire(rec)
	}
	return out, nil
}

// relayed says whether cmd is one of the commands the aggregator relays
// for hospitals (or one that fails to decode, which is refused unproposed
// too).
func relayed(cmd []byte) bool {
	c, err := ledger.DecodeCommand(cmd)
	if err != nil {
		return true
	}
	switch c.Body.(type) {
	case *ledger.RegisterParty, *ledger.OpenAccount, *ledger.ChangeCap:
		return true
	}
	return false
}

func (s *Server) budget(_ context.Context, r *quicnet.Request) (protocol.MsgType, []byte, error) {
	var req nzcpb.BudgetRequest
	if err := r.Decode(&req); err != nil {
		return 0, nil, err
	}
	return quicnet.Reply(Budgets(s.Ledger.State(), &req))
}

// needsReceipt says whether a command's commit is proven with a receipt:
// charges and sparse-vector session openings, whose commit releases labels
// and which a retry re-proposes as a duplicate. The hospitals' own account
// commands the aggregator relays are answered without one.
func needsReceipt(cmd []byte) bool {
	c, err := ledger.DecodeCommand(cmd)
	if err != nil {
		return false
	}
	switch c.Body.(type) {
	case *ledger.Charge, *ledger.OpenSession:
		return true
	}
	return false
}
