package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/internal/ratelimit"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// Submitter replicates a command: *raftnode.Node. A command the state
// machine refused comes back as a [Refusal], and a node that cannot
// propose as a [Redirect].
type Submitter interface {
	Submit(ctx context.Context, cmd []byte) ([]byte, uint64, error)
}

// Refusal is a Submitter's error for a command the state machine refused:
// *raftnode.RejectedError. Unwrap is why.
type Refusal interface {
	error
	RefusedAt() uint64
	Unwrap() error
}

// Redirect is a Submitter's error when another node must propose:
// *raftnode.NotLeaderError. Leader is its address, "" when none is known.
type Redirect interface {
	error
	Leader() string
}

// NotProposed is a Submitter's error for a command the leader refused
// before proposing it: *raftnode.NotProposedError. Refused is the ledger's
// encoded refusal (ledger.EncodeResult).
type NotProposed interface {
	error
	Refused() []byte
}

// Ledger is this auditor's replica of the ledger: *auditor.Ledger.
type Ledger interface {
	// Checkpoint returns this auditor's signed checkpoint; 0 asks for the
	// latest.
	Checkpoint(treeSize uint64) ([]byte, error)
	// State is the ledger, for budget reads.
	State() *ledger.State
}

// Defaults of the per-hospital limit on account commands a hospital
// submits directly: its account opening and a cap change now and then.
const (
	DefaultHospitalBurst = 8
	DefaultHospitalEvery = 5 * time.Second
)

// Server answers ledger requests on one auditor: the aggregator's charges,
// session commands, relayed commands and budget reads, and each hospital's
// own account commands and budget read, which a hospital may send directly
// so that the aggregator cannot keep its cap from changing.
type Server struct {
	Node   Submitter
	Ledger Ledger
	// Receipts makes the proof of each commit that the aggregator checks
	// before it releases anything. Required.
	Receipts *Receipts
	Logger   *slog.Logger
	// HospitalBurst and HospitalEvery limit the commands each hospital
	// submits directly: HospitalBurst at once, then one more every
	// HospitalEvery (zero: DefaultHospitalBurst, DefaultHospitalEvery).
	HospitalBurst int
	HospitalEvery time.Duration
	// Now is the clock of the limit; nil means time.Now.
	Now func() time.Time

	limitOnce sync.Once
	limits    *ratelimit.Limiter
}

// Listen opens the intake listener: the aggregator and the hospitals may
// connect (a hospital only for its own account).
func Listen(addr string, cfg quicnet.Config) (*quicnet.Listener, error) {
	return quicnet.Listen(addr, cfg, crypto.RoleAggregator, crypto.RoleHospital)
}

// Serve accepts connections on l until ctx ends.
func (s *Server) Serve(ctx context.Context, l *quicnet.Listener) error {
	return l.Serve(ctx, s.mux(), s.Logger)
}

// mux routes the intake's requests: the aggregator's, and a hospital's
// about its own account.
func (s *Server) mux() quicnet.Mux {
	callers := []crypto.Role{crypto.RoleAggregator, crypto.RoleHospital}
	return quicnet.Mux{
		protocol.TypeLedgerSubmit:  {Roles: callers, Handle: s.submit},
		protocol.TypeBudgetRequest: {Roles: callers, Handle: s.budget},
	}
}

func (s *Server) submit(ctx context.Context, r *quicnet.Request) (protocol.MsgType, []byte, error) {
	if r.Peer.Role == crypto.RoleHospital {
		if err := s.limit(r.Peer.ID); err != nil {
			return 0, nil, err
		}
	}
	var req nzcpb.LedgerSubmit
	if err := r.Decode(&req); err != nil {
		return 0, nil, err
	}
	cmd := req.GetCommand()
	c, derr := ledger.DecodeCommand(cmd)
	if r.Peer.Role == crypto.RoleHospital {
		if err := ownAccountCommand(r.Peer.ID, c, derr); err != nil {
			return 0, nil, err
		}
	}
	out, err := s.propose(ctx, cmd, c, derr)
	if err != nil {
		return 0, nil, err
	}
	if r.Peer.Role == crypto.RoleHospital {
		s.logger().Info("a hospital submitted its own account command", "hospital", r.Peer.ID, "code", out.GetCode().String(), "index", out.GetIndex())
	}
	return quicnet.Reply(out)
}

func (s *Server) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

func (s *Server) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

// limit takes one of hospital's tokens, or refuses with when to retry.
func (s *Server) limit(hospital string) error {
	s.limitOnce.Do(func() {
		now := s.now
		burst, every := s.HospitalBurst, s.HospitalEvery
		if burst <= 0 {
			burst = DefaultHospitalBurst
		}
		if every <= 0 {
			every = DefaultHospitalEvery
		}
		s.limits = ratelimit.New(burst, every, now)
	})
	if ok, wait := s.limits.Allow(hospital); !ok {
		return &protocol.Error{Code: protocol.CodeUnavailable, RetryAfter: wait,
			Message: fmt.Sprintf("hospital %s sent more ledger commands than its limit: nothing was proposed; retry in %v", hospital, wait.Round(time.Millisecond))}
	}
	return nil
}

// ownAccountCommand checks that cmd, submitted by hospital over its own
// connection, is that hospital's open-account or change-cap signed by it:
// the certificate, the signer and the body's hospital must agree. Anything
// else is refused before it is proposed.
func ownAccountCommand(hospital string, c ledger.Command, err error) error {
	if err != nil {
		return protocol.Errorf(protocol.CodeBadRequest, "ledger command: %v", err)
	}
	subject, bySelf, ok := ledger.AccountSubject(c.Body)
	if !ok || !bySelf {
		return protocol.Errorf(protocol.CodeUnauthorized, "a hospital submits only its own open-account and change-cap commands, not %s: nothing was proposed", c.Body.Kind())
	}
	if subject != hospital || c.Signer != hospital {
		return protocol.Errorf(protocol.CodeUnauthorized, "hospital %s submitted a %s about %s signed by %s: a hospital submits only commands about and signed by itself; nothing was proposed", hospital, c.Body.Kind(), subject, c.Signer)
	}
	return nil
}

// Propose replicates one command and returns the ledger's answer, with a
// receipt for a charge or a session opening.
//
// Nothing its sender could not have proposed honestly is proposed. A
// command that does not decode, and one a party relays about its own
// account or registration (ledger.Relayed) that this auditor's replica
// would refuse, is answered so without being proposed. Every other
// command — the aggregator's charges and sessions — is checked by the
// leader against its replica just before it would propose it (the auditor's
// raftnode.Screen): this replica may lag the leader's, and must not refuse
// a charge on a session the leader has just opened. A command the leader
// refuses comes back as a *raftnode.NotProposedError, answered as the
// ledger's refusal. Either way a refused command leaves no entry. A retry
// of a command the leader's log already accepted also comes back so,
// without an entry, and is answered as a duplicate with its original's
// receipt.
func (s *Server) Propose(ctx context.Context, cmd []byte) (*nzcpb.LedgerResult, error) {
	c, err := ledger.DecodeCommand(cmd)
	return s.propose(ctx, cmd, c, err)
}

// propose is Propose with cmd decoded (c, or the decoding error derr).
func (s *Server) propose(ctx context.Context, cmd []byte, c ledger.Command, derr error) (*nzcpb.LedgerResult, error) {
	if len(cmd) > ledger.MaxCommandSize {
		return nil, protocol.Errorf(protocol.CodeBadRequest, "ledger command of %d bytes, over the ledger's %d: nothing was proposed; split the batch", len(cmd), ledger.MaxCommandSize)
	}
	if derr != nil || ledger.Relayed(c.Body) {
		st := s.Ledger.State()
		if r := st.CheckAt(cmd, s.now().UnixNano()); r.Status != ledger.StatusAccepted {
			return notProposed(r, st), nil
		}
	}
	data, _, err := s.Node.Submit(ctx, cmd)
	var np NotProposed
	if errors.As(err, &np) {
		r, derr := ledger.DecodeResult(np.Refused())
		if derr != nil {
			return nil, protocol.Errorf(protocol.CodeLedgerUnavailable, "the leader refused the command with an unreadable answer: %v", derr)
		}
		if r.Status != ledger.StatusDuplicate {
			return notProposed(r, s.Ledger.State()), nil
		}
		data, err = np.Refused(), nil // a retry: its original's receipt below
	}
	if err != nil {
		var rej Refusal
		var nl Redirect
		switch {
		case errors.As(err, &rej):
			return &nzcpb.LedgerResult{Index: rej.RefusedAt(), Code: nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_REJECTED, Reason: rej.Unwrap().Error()}, nil
		case errors.As(err, &nl):
			return nil, protocol.NotLeader(nl.Leader())
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
		if !ledger.Receipted(c.Body) {
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

// notProposed answers a command refused before it was proposed: the
// ledger's refusal, at the replica's current size.
func notProposed(r ledger.Result, st *ledger.State) *nzcpb.LedgerResult {
	r.Index = uint64(st.TreeSize())
	out := ToWire(r)
	out.Reason = "not proposed: " + out.GetReason()
	return out
}

func (s *Server) budget(_ context.Context, r *quicnet.Request) (protocol.MsgType, []byte, error) {
	var req nzcpb.BudgetRequest
	if err := r.Decode(&req); err != nil {
		return 0, nil, err
	}
	if r.Peer.Role == crypto.RoleHospital {
		// A hospital reads its own account only.
		if ids := req.GetHospitalIds(); req.GetStudentId() != "" || len(ids) > 1 || (len(ids) == 1 && ids[0] != r.Peer.ID) {
			return 0, nil, protocol.Errorf(protocol.CodeUnauthorized, "hospital %s may read only its own budget: name no other hospital and no student", r.Peer.ID)
		}
		req.HospitalIds = []string{r.Peer.ID}
	}
	return quicnet.Reply(Budgets(s.Ledger.State(), &req))
}
