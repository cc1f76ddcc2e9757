package aggregator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// connHospital calls a hospital over its own connection to the aggregator.
type connHospital struct{ c *quicnet.Conn }

func (h connHospital) Query(ctx context.Context, q *nzcpb.QueryBatch) (*nzcpb.VoteBatch, error) {
	var vb nzcpb.VoteBatch
	if err := h.c.Invoke(ctx, q, &vb); err != nil {
		return nil, err
	}
	return &vb, nil
}

// Serve accepts hospitals and students on l until ctx ends. Before
// serving it re-proposes the charges of batches left pending by an earlier
// run (in the background, so that an unreachable ledger does not keep
// parties out). It returns a *ClassMismatchError, having stopped, when the
// ledger registers another class count than the configured one.
func (a *Aggregator) Serve(ctx context.Context, l *quicnet.Listener) error {
	// A class count the ledger does not register would refuse every
	// batch: stop serving and say so.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		if err := a.checkClasses(ctx); err != nil {
			cancel(err)
		}
	}()
	go func() {
		if err := a.Recover(ctx); err != nil {
			a.log.Error("could not read the outbox", "err", err)
		}
		// Committed batches are kept for a retention period, then pruned.
		t := time.NewTicker(min(a.cfg.Retention/24, time.Hour))
		defer t.Stop()
		for {
			if err := a.Prune(); err != nil {
				a.log.Error("could not prune the outbox", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	err := l.Serve(ctx, a.mux(), a.log)
	if mm := (*ClassMismatchError)(nil); errors.As(context.Cause(ctx), &mm) {
		return mm
	}
	return err
}

// Listen opens the aggregator's QUIC listener: only hospitals and students
// of the federation may connect.
func Listen(addr string, cfg quicnet.Config) (*quicnet.Listener, error) {
	return quicnet.Listen(addr, cfg, crypto.RoleHospital, crypto.RoleStudent)
}

func (a *Aggregator) mux() quicnet.Mux {
	return quicnet.Mux{
		protocol.TypeHello: {Roles: []crypto.Role{crypto.RoleHospital, crypto.RoleStudent}, Handle: a.handleHello},
		protocol.TypeLabelRequest: {Roles: []crypto.Role{crypto.RoleStudent}, Handle: func(ctx context.Context, r *quicnet.Request) (protocol.MsgType, []byte, error) {
			var req nzcpb.LabelRequest
			if err := r.Decode(&req); err != nil {
				return 0, nil, err
			}
			resp, err := a.Label(ctx, r.Peer.ID, &req)
			if err != nil {
				return 0, nil, err
			}
			return quicnet.Reply(resp)
		}},
		protocol.TypeBudgetRequest: {Roles: []crypto.Role{crypto.RoleStudent, crypto.RoleHospital}, Handle: func(ctx context.Context, r *quicnet.Request) (protocol.MsgType, []byte, error) {
			var req nzcpb.BudgetRequest
			if err := r.Decode(&req); err != nil {
				return 0, nil, err
			}
			resp, err := a.Budget(ctx, &req)
			if err != nil {
				return 0, nil, err
			}
			return quicnet.Reply(resp)
		}},
		protocol.TypeLedgerSubmit: {Roles: []crypto.Role{crypto.RoleHospital}, Handle: a.handleRelay},
	}
}

func (a *Aggregator) handleHello(ctx context.Context, r *quicnet.Request) (protocol.MsgType, []byte, error) {
	var h nzcpb.Hello
	if err := r.Decode(&h); err != nil {
		return 0, nil, err
	}
	want := map[crypto.Role]nzcpb.Role{crypto.RoleHospital: nzcpb.Role_ROLE_HOSPITAL, crypto.RoleStudent: nzcpb.Role_ROLE_STUDENT}[r.Peer.Role]
	if h.GetPartyId() != r.Peer.ID || h.GetRole() != want {
		return 0, nil, protocol.Errorf(protocol.CodeUnauthorized, "hello names %s %s but the certificate names %s: a party registers under its own identity", h.GetRole(), h.GetPartyId(), r.Peer)
	}
	rcpt, err := crypto.ParseRecipient(h.GetAgeRecipient())
	if err != nil {
		return 0, nil, protocol.Errorf(protocol.CodeBadRequest, "age recipient: %v", err)
	}
	if !a.firstHello(r.Conn) {
		return 0, nil, protocol.Errorf(protocol.CodeBadRequest, "%s sent a second Hello on one connection: a party registers once per connection; reconnect to register again", r.Peer)
	}
	switch r.Peer.Role {
	case crypto.RoleHospital:
		hi := h.GetHospital()
		// The hospital's size is the administrator's registration in the
		// ledger, never the Hello's.
		reg, err := a.ledgerEnsemble(ctx, r.Peer.ID)
		if err != nil {
			return 0, nil, err
		}
		remove, err := a.addHospital(r.Peer.ID, int(hi.GetNumTeachers()), int(hi.GetNumClasses()), reg, connHospital{r.Conn})
		if err != nil {
			return 0, nil, err
		}
		context.AfterFunc(r.Conn.Context(), remove)
		if len(h.GetRecipientSignature()) > 0 {
			a.SetRecipient(&nzcpb.SignedRecipient{HospitalId: r.Peer.ID, AgeRecipient: h.GetAgeRecipient(),
				Signature: h.GetRecipientSignature(), Registration: h.GetRegistration()})
		}
	case crypto.RoleStudent:
		a.AddStudent(r.Peer.ID, rcpt)
	}
	_, status := a.Ready()
	ack := &nzcpb.Ack{ProtocolVersion: protocol.ProtocolVersion, PartyId: a.cfg.ID,
		AgeRecipient: a.Recipient().String(), Message: "registered; " + status}
	if r.Peer.Role == crypto.RoleStudent {
		ack.Hospitals = a.Directory()
		if f := a.cfg.Fallback; f.Mechanism != "" {
			ack.Fallback = protocol.OfferToWire(f, a.cfg.Classes)
		}
	}
	return quicnet.Reply(ack)
}

// firstHello records that c has sent its Hello, until c closes; it
// returns false when c had sent one already.
func (a *Aggregator) firstHello(c *quicnet.Conn) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.hellos[c]; ok {
		return false
	}
	a.hellos[c] = struct{}{}
	context.AfterFunc(c.Context(), func() {
		a.mu.Lock()
		delete(a.hellos, c)
		a.mu.Unlock()
	})
	return true
}

// handleRelay passes a hospital's own account commands (open account,
// change cap), signed by the hospital, and its registrations (as a party
// and of its ensemble), signed by the federation administrator, to the
// ledger: hospitals dial only the aggregator (and, for their own account
// commands, the auditors directly). Nothing else may be relayed, and each
// hospital only so many (Config.RelayBurst, RelayEvery); the auditors
// refuse, without recording them, commands the ledger would refuse.
func (a *Aggregator) handleRelay(ctx context.Context, r *quicnet.Request) (protocol.MsgType, []byte, error) {
	if ok, wait := a.relays.Allow(r.Peer.ID); !ok {
		return 0, nil, &protocol.Error{Code: protocol.CodeUnavailable, RetryAfter: wait,
			Message: fmt.Sprintf("hospital %s relayed more than %d ledger commands in %v: nothing was relayed; retry in %v", r.Peer.ID, a.cfg.RelayBurst, time.Duration(a.cfg.RelayBurst)*a.cfg.RelayEvery, wait.Round(time.Millisecond))}
	}
	var s nzcpb.LedgerSubmit
	if err := r.Decode(&s); err != nil {
		return 0, nil, err
	}
	c, err := ledger.DecodeCommand(s.GetCommand())
	if err != nil {
		return 0, nil, protocol.Errorf(protocol.CodeBadRequest, "ledger command: %v", err)
	}
	// A hospital added after the genesis brings its registrations, signed
	// by the federation administrator; the ledger checks that signature.
	subject, bySelf, ok := ledger.AccountSubject(c.Body)
	if !ok {
		return 0, nil, protocol.Errorf(protocol.CodeUnauthorized, "a hospital may relay only its own registrations, open-account and change-cap commands, not %s", c.Body.Kind())
	}
	if subject != r.Peer.ID || (bySelf && c.Signer != r.Peer.ID) {
		return 0, nil, protocol.Errorf(protocol.CodeUnauthorized, "hospital %s may relay only commands about and signed by itself", r.Peer.ID)
	}
	res, err := a.cfg.Ledger.Submit(ctx, s.GetCommand())
	if err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) {
			return 0, nil, pe
		}
		return 0, nil, protocol.Errorf(protocol.CodeLedgerUnavailable, "the ledger did not answer: %v", err)
	}
	a.log.Info("relayed a hospital's account command", "hospital", r.Peer.ID, "kind", c.Body.Kind().String(), "code", res.GetCode().String())
	return quicnet.Reply(res)
}
