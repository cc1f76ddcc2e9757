package aggregator

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// svtSession is an open nzc-svt session: its whole cost was charged when
// it opened, and every batch of its student answered by the same hospitals
// runs in it until it has refused its K queries. Sessions live in memory:
// after a restart the next batch opens (and pays for) a new one.
type svtSession struct {
	mu        sync.Mutex // held while a batch runs in the session
	id        string
	student   string
	hospitals []string
	teachers  int
	classes   int
	s         *mechanism.Session
}

// session returns the student's open session for these hospitals, opening
// a new one — and charging its whole cost to the ledger — when there is
// none or the last one is exhausted. It returns with the session locked.
func (a *Aggregator) session(ctx context.Context, student string, hospitals []string, teachers, classes int) (*svtSession, error) {
	a.svtMu.Lock()
	defer a.svtMu.Unlock()
	if s := a.sessions[student]; s != nil && slices.Equal(s.hospitals, hospitals) && s.teachers == teachers && s.classes == classes {
		s.mu.Lock()
		if !s.s.Exhausted() {
			return s, nil
		}
		s.mu.Unlock()
	}
	p := a.cfg.Mechanism
	p.Teachers, p.Classes = teachers, classes
	ms, err := mechanism.Open(p)
	if err != nil {
		return nil, fmt.Errorf("aggregator: open an nzc-svt session: %w", err)
	}
	cost, err := p.Charge(a.grid, 0, 0)
	if err != nil {
		return nil, err
	}
	var rnd [16]byte
	if _, err := a.cfg.Rand.Read(rnd[:]); err != nil {
		return nil, fmt.Errorf("aggregator: session id: %w", err)
	}
	id := "svt-" + hex.EncodeToString(rnd[:])
	cmd, err := ledger.Sign(&ledger.OpenSession{SessionID: id, Student: student, Hospitals: hospitals, Mechanism: string(p.Mechanism),
		Params: ledgerParams(p), MaxRefusals: uint64(p.MaxRefusals), Curve: cost.RDP.Values(), Delta: cost.Delta,
		Timestamp: a.cfg.Now().UnixNano()}, a.cfg.ID, a.cfg.SigningKey)
	if err != nil {
		return nil, err
	}
	res, err := a.cfg.Ledger.Submit(ctx, cmd)
	if err != nil {
		return nil, a.refuse(reasonLedger, &protocol.Error{Code: protocol.CodeLedgerUnavailable, RetryAfter: time.Second,
			Message: fmt.Sprintf("the ledger did not confirm the opening of an nzc-svt session (%v): nothing was released; retry the batch", err)})
	}
	switch res.GetCode() {
	case nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED, nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_DUPLICATE:
		if _, _, err := a.checkReceipt(&Record{Command: cmd}, res); err != nil {
			a.met.receiptsRejected.Inc()
			return nil, a.refuse(reasonLedger, &protocol.Error{Code: protocol.CodeLedgerUnavailable, RetryAfter: time.Second,
				Message: fmt.Sprintf("the ledger's answer to the opening of an nzc-svt session carries no valid proof that a majority of the auditors committed it (%v): nothing was released; retry the batch", err)})
		}
	case nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_BUDGET_EXHAUSTED:
		return nil, a.refuse(reasonBudget, protocol.Errorf(protocol.CodeBudgetExhausted,
			"the ledger refused to open an nzc-svt session (its whole cost is charged at opening): %s; nothing was released", res.GetReason()))
	default:
		return nil, a.refuse(reasonRejected, protocol.Errorf(protocol.CodeBadRequest,
			"the ledger rejected the opening of an nzc-svt session: %s; nothing was released", res.GetReason()))
	}
	a.log.Info("opened an nzc-svt session, its whole cost charged", "session", id, "student", student, "hospitals", hospitals, "max_refusals", p.MaxRefusals, "ledger_index", res.GetIndex())
	s := &svtSession{id: id, student: student, hospitals: slices.Clone(hospitals), teachers: teachers, classes: classes, s: ms}
	a.sessions[student] = s
	s.mu.Lock()
	return s, nil
}

// answerSVT answers a batch in the student's session. Queries after the
// session's K-th refusal are not looked at: they are refused and left out
// of the charge (the next batch opens a new session).
func (a *Aggregator) answerSVT(ctx context.Context, student string, voters []string, teachers, classes int, sum []mechanism.Histogram) (labels *nzcpb.Labels, processed, answered int, session string, err error) {
	s, err := a.session(ctx, student, voters, teachers, classes)
	if err != nil {
		return nil, 0, 0, "", err
	}
	defer s.mu.Unlock()
	labels = &nzcpb.Labels{Labels: make([]int32, len(sum)), Refused: make([]bool, len(sum))}
	for q := range labels.Labels {
		labels.Labels[q], labels.Refused[q] = -1, true
	}
	for q, h := range sum {
		o, err := s.s.Answer(a.cfg.Rand, h)
		if errors.Is(err, mechanism.ErrSessionExhausted) {
			a.log.Info("nzc-svt session exhausted; its remaining queries are refused unseen", "session", s.id, "processed", processed, "of", len(sum))
			break
		}
		if err != nil {
			return nil, 0, 0, "", fmt.Errorf("aggregator: mechanism on query %d: %w", q, err)
		}
		processed++
		if !o.Refused {
			labels.Labels[q], labels.Refused[q] = int32(o.Label), false
			answered++
		}
	}
	return labels, processed, answered, s.id, nil
}
