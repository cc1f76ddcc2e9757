package aggregator

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// keptSession is a session of a mechanism that answers in sessions
// (mechanism.SessionDef, nzc-svt): its whole cost is charged when it
// opens, to every hospital asked for the batch that opens it, and every
// batch of its student then runs in it until it has refused its K
// queries. A batch counts the votes of the session's hospitals that voted
// on it; the teachers of those that did not (left out for missing a
// deadline, disconnected, or slower than the deadline) abstain, so
// hospitals coming and going open no new session (the privacy argument is
// mechanism's, svtSession). Sessions are kept per student, and in the
// outbox (SessionRecord), so that a restart resumes them.
type keptSession struct {
	mu        sync.Mutex // held while the session opens or a batch runs in it
	id        string
	student   string
	hospitals []string // sorted: those that paid for it
	ensembles []int    // their ensemble sizes, in order; nil when resumed from an older record
	teachers  int      // their teachers in all, the session's ensemble
	classes   int
	s         mechanism.Session
	// open is the signed OpenSession, kept until the ledger answers: a
	// proposal whose outcome is unknown is proposed again byte for byte,
	// so the ledger answers duplicate and the session is paid for once.
	open   []byte
	opened bool
	// inflight counts the batches answered in the session whose charges
	// are not yet settled.
	inflight sync.WaitGroup
	// answered counts the queries the session has answered (a released
	// output), for burns.
	answered int
}

// fits reports whether the session can run a batch of voters asked among
// admitted (hospital ids to their ensemble sizes): it is not exhausted, it
// is for classes, at least quorum of the voters are its hospitals, and
// none of its hospitals is admitted at another size than it opened with
// (the ledger holds a session's charges to its hospitals' registrations).
func (s *keptSession) fits(classes, quorum int, voters []string, admitted map[string]int) bool {
	if s.classes != classes || s.s.Exhausted() || s.members(voters) < quorum {
		return false
	}
	for i, h := range s.hospitals {
		if n, ok := admitted[h]; ok && s.ensembles != nil && n != s.ensembles[i] {
			return false
		}
	}
	return true
}

// members counts the hospitals among voters that are the session's.
func (s *keptSession) members(voters []string) int {
	n := 0
	for _, v := range voters {
		if slices.Contains(s.hospitals, v) {
			n++
		}
	}
	return n
}

// session returns the student's session, opening a new one over the
// admitted hospitals (ids to ensemble sizes) that can pay for it (not in
// unpaid) — and charging its whole cost to the ledger — when the last one
// does not fit the batch (fits): there is none, it is exhausted, fewer
// than the quorum of voters are its hospitals (they have gone), or a
// hospital's registration changed. It returns with the session locked.
// The proposal waits at most LedgerTimeout and holds only this session's
// lock, so other students are not held up.
func (a *Aggregator) session(ctx context.Context, student string, admitted map[string]int, unpaid map[string]string, classes int, voters []string) (*keptSession, error) {
	for {
		s, old, err := a.sessionFor(student, admitted, unpaid, classes, voters)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		if !s.opened {
			if err := a.settled(ctx, old); err != nil {
				s.mu.Unlock()
				return nil, err
			}
			if err := a.openSession(ctx, s); err != nil {
				s.mu.Unlock()
				return nil, err
			}
			if old != nil && !old.s.Exhausted() {
				// Replaced before its K refusals (its hospitals
				// have gone): a restart resumes the new one.
				if err := a.outbox.DeleteSession(old.id); err != nil {
					a.log.Error("could not drop a replaced session from the outbox", "session", old.id, "err", err)
				}
			}
		}
		if s.fits(classes, a.cfg.Quorum, voters, admitted) {
			return s, nil
		}
		// Another batch used it up, or replaced it, while this one
		// waited: look again.
		s.mu.Unlock()
	}
}

// sessionFor returns the student's session, or a new, not yet opened one
// over the admitted hospitals that can pay for it when that one does not
// fit the batch, with the session it replaces (nil if none). It refuses to
// open one of which fewer than the quorum of voters would be hospitals.
func (a *Aggregator) sessionFor(student string, admitted map[string]int, unpaid map[string]string, classes int, voters []string) (s, old *keptSession, err error) {
	a.sessionsMu.Lock()
	defer a.sessionsMu.Unlock()
	old = a.sessions[student]
	if old != nil && old.fits(classes, a.cfg.Quorum, voters, admitted) {
		return old, nil, nil
	}
	// The new session is over the admitted hospitals that can pay for it.
	var hospitals []string
	for h := range admitted {
		if _, ok := unpaid[h]; !ok {
			hospitals = append(hospitals, h)
		}
	}
	slices.Sort(hospitals)
	if paying := (&keptSession{hospitals: hospitals}).members(voters); paying < a.cfg.Quorum {
		var why []string
		for _, h := range slices.Sorted(maps.Keys(unpaid)) {
			why = append(why, h+" "+unpaid[h])
		}
		return nil, nil, a.refuse(reasonBudget, protocol.Errorf(protocol.CodeBudgetExhausted,
			"no session of %s opens for student %s: %d of the %d hospitals admitted can pay for its whole cost and the quorum is %d (%s): nothing was asked of the hospitals or drawn",
			a.cfg.Mechanism.Mechanism, student, paying, len(voters), a.cfg.Quorum, strings.Join(why, "; ")))
	}
	ensembles := make([]int, len(hospitals))
	teachers := 0
	for i, h := range hospitals {
		ensembles[i] = admitted[h]
		teachers += admitted[h]
	}
	if perr := a.burns.refuseOpen(hospitals); perr != nil {
		return nil, nil, a.refuse(reasonBurnt, perr)
	}
	p := a.cfg.Mechanism
	p.Teachers, p.Classes = teachers, classes
	ms, err := mechanism.Open(p)
	if err != nil {
		return nil, nil, fmt.Errorf("aggregator: open a session of %s: %w", p.Mechanism, err)
	}
	cost, err := p.Charge(a.grid, 0, 0)
	if err != nil {
		return nil, nil, err
	}
	var rnd [16]byte
	if _, err := a.cfg.Rand.Read(rnd[:]); err != nil {
		return nil, nil, fmt.Errorf("aggregator: session id: %w", err)
	}
	id := sessionIDPrefix(p.Mechanism) + hex.EncodeToString(rnd[:])
	cmd, err := ledger.Sign(&ledger.OpenSession{SessionID: id, Student: student, Hospitals: hospitals, Mechanism: string(p.Mechanism),
		Params: p.LedgerParams(), MaxRefusals: uint64(p.MaxRefusals), Curve: cost.RDP.Values(), Delta: cost.Delta,
		Timestamp: a.cfg.Now().UnixNano()}, a.cfg.ID, a.cfg.SigningKey)
	if err != nil {
		return nil, nil, err
	}
	s = &keptSession{id: id, student: student, hospitals: hospitals, ensembles: ensembles, teachers: teachers, classes: classes, s: ms, open: cmd}
	if err := a.saveSession(s); err != nil {
		return nil, nil, err
	}
	a.sessions[student] = s
	return s, old, nil
}

// saveSession writes s's record to the outbox (s locked, or not yet
// shared): its signed opening, whether the ledger committed it, and its
// sealed state.
func (a *Aggregator) saveSession(s *keptSession) error {
	st, err := json.Marshal(s.s.State())
	if err != nil {
		return err
	}
	sealed, err := crypto.Seal(st, a.cfg.Identity.Recipient())
	if err != nil {
		return err
	}
	if err := a.outbox.PutSession(&SessionRecord{SessionID: s.id, Student: s.student, Hospitals: s.hospitals, Ensembles: s.ensembles, Teachers: s.teachers,
		Classes: s.classes, Open: s.open, Opened: s.opened, SealedState: sealed, Answered: s.answered}); err != nil {
		return fmt.Errorf("aggregator: keep session %s in the outbox (nothing was proposed or released): %w", s.id, err)
	}
	return nil
}

// loadSessions resumes the sessions an earlier run kept in the outbox: an
// opening the ledger had not confirmed is kept, to be proposed again byte
// for byte; a committed one is resumed with its noise and refusals. A
// session that is exhausted, or was opened for parameters other than the
// configured ones, is over: its record is removed (the ledger refuses
// charges naming it once it is exhausted or replaced).
func (a *Aggregator) loadSessions() error {
	recs, err := a.outbox.Sessions()
	if err != nil {
		return err
	}
	for _, r := range recs {
		s, err := a.resume(r)
		if err != nil {
			a.log.Info("session of an earlier run is over", "session", r.SessionID, "reason", err)
			if err := a.outbox.DeleteSession(r.SessionID); err != nil {
				return err
			}
			continue
		}
		// One session per student (an earlier run may have kept one per
		// hospital set): keep the better, drop the other's record.
		keep, drop := s, a.sessions[s.student]
		if drop != nil && betterSession(drop, s) {
			keep, drop = drop, s
		}
		if drop != nil {
			a.log.Info("session of an earlier run is replaced by another of its student", "session", drop.id, "by", keep.id)
			if err := a.outbox.DeleteSession(drop.id); err != nil {
				return err
			}
		}
		a.sessions[s.student] = keep
	}
	return nil
}

// betterSession reports whether s is the one to keep rather than t, of
// one student: one the ledger confirmed, then the one over more hospitals,
// then the larger id (any fixed rule).
func betterSession(s, t *keptSession) bool {
	switch {
	case s.opened != t.opened:
		return s.opened
	case len(s.hospitals) != len(t.hospitals):
		return len(s.hospitals) > len(t.hospitals)
	}
	return s.id > t.id
}

func (a *Aggregator) resume(r *SessionRecord) (*keptSession, error) {
	c, err := ledger.DecodeCommand(r.Open)
	if err != nil {
		return nil, err
	}
	o, ok := c.Body.(*ledger.OpenSession)
	if !ok || o.SessionID != r.SessionID {
		return nil, fmt.Errorf("the record's opening is not session %s's", r.SessionID)
	}
	p, err := mechanism.ParseLedgerParams(mechanism.Kind(o.Mechanism), o.Params)
	if err != nil {
		return nil, err
	}
	want := a.cfg.Mechanism
	want.Teachers, want.Classes = p.Teachers, p.Classes
	if !want.Mechanism.Sessions() || !slices.Equal(want.LedgerParams(), o.Params) {
		return nil, errors.New("opened for other parameters than the configured ones")
	}
	plain, err := crypto.Open(r.SealedState, a.cfg.Identity)
	if err != nil {
		return nil, err
	}
	var st mechanism.SessionState
	if err := json.Unmarshal(plain, &st); err != nil {
		return nil, err
	}
	ms, err := mechanism.ResumeSession(p, st)
	if err != nil {
		return nil, err
	}
	if ms.Exhausted() {
		return nil, errors.New("exhausted")
	}
	if r.Ensembles != nil && len(r.Ensembles) != len(r.Hospitals) {
		return nil, fmt.Errorf("the record states %d ensemble sizes for %d hospitals", len(r.Ensembles), len(r.Hospitals))
	}
	return &keptSession{id: r.SessionID, student: r.Student, hospitals: r.Hospitals, ensembles: r.Ensembles, teachers: r.Teachers, classes: r.Classes,
		s: ms, open: r.Open, opened: r.Opened, answered: r.Answered}, nil
}

// settled waits until every batch answered in old (which s replaces) has
// its charge settled, at most LedgerTimeout: the ledger refuses charges
// naming a session once its replacement opens.
func (a *Aggregator) settled(ctx context.Context, old *keptSession) error {
	if old == nil {
		return nil
	}
	a.pause(ctx, PauseSessionReplacing)
	done := make(chan struct{})
	go func() {
		old.inflight.Wait()
		close(done)
	}()
	t := time.NewTimer(a.cfg.LedgerTimeout)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	return a.refuse(reasonLedger, &protocol.Error{Code: protocol.CodeLedgerUnavailable, RetryAfter: time.Second,
		Message: "the charges of the student's last session were not settled in time, so its replacement was not opened: nothing was released; retry the batch"})
}

// openSession proposes s's opening (s locked). An unknown outcome keeps s,
// and its signed command, for the next batch to propose again; a refusal
// drops it.
func (a *Aggregator) openSession(ctx context.Context, s *keptSession) error {
	sctx, cancel := context.WithTimeout(ctx, a.cfg.LedgerTimeout)
	res, err := a.cfg.Ledger.Submit(sctx, s.open)
	cancel()
	if err != nil {
		return a.refuse(reasonLedger, &protocol.Error{Code: protocol.CodeLedgerUnavailable, RetryAfter: time.Second,
			Message: fmt.Sprintf("the ledger did not confirm the opening of %s (%v): nothing was released; retry the batch (the same opening is proposed again, and paid for once)", a.sessionName(), err)})
	}
	var perr *protocol.Error
	switch res.GetCode() {
	case nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED, nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_DUPLICATE:
		if _, _, err := a.checkReceipt(&Record{Command: s.open}, res); err != nil {
			a.met.receiptsRejected.Inc()
			return a.refuse(reasonLedger, &protocol.Error{Code: protocol.CodeLedgerUnavailable, RetryAfter: time.Second,
				Message: fmt.Sprintf("the ledger's answer to the opening of %s carries no valid proof that a majority of the auditors committed it (%v): nothing was released; retry the batch (the same opening is proposed again, and paid for once)", a.sessionName(), err)})
		}
		s.opened = true
		if err := a.saveSession(s); err != nil {
			a.log.Error("could not record the session's opening in the outbox; a restart proposes it again, and the ledger answers duplicate", "session", s.id, "err", err)
		}
		a.log.Info("opened a session, its whole cost charged", "mechanism", a.cfg.Mechanism.Mechanism, "session", s.id, "student", s.student, "hospitals", s.hospitals,
			"max_refusals", a.cfg.Mechanism.MaxRefusals, "ledger_index", res.GetIndex())
		return nil
	case nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_BUDGET_EXHAUSTED:
		perr = protocol.Errorf(protocol.CodeBudgetExhausted,
			"the ledger refused to open %s (its whole cost is charged at opening): %s; nothing was asked of the hospitals or drawn", a.sessionName(), res.GetReason())
	default:
		perr = protocol.Errorf(protocol.CodeBadRequest,
			"the ledger rejected the opening of %s: %s; nothing was released", a.sessionName(), res.GetReason())
	}
	a.sessionsMu.Lock()
	if a.sessions[s.student] == s {
		delete(a.sessions, s.student)
	}
	a.sessionsMu.Unlock()
	if err := a.outbox.DeleteSession(s.id); err != nil {
		a.log.Error("could not drop a refused session from the outbox", "session", s.id, "err", err)
	}
	if perr.Code == protocol.CodeBudgetExhausted {
		if h := res.GetSubject(); slices.Contains(s.hospitals, h) {
			return &unpaidError{hospital: h, reason: res.GetReason()}
		}
		return a.refuse(reasonBudget, perr)
	}
	return a.refuse(reasonRejected, perr)
}

// unpaidError is the ledger's refusal of a session's opening for one of
// its hospitals, which cannot pay for it: the opening is tried again
// without that hospital (openBeforeVotes).
type unpaidError struct {
	hospital, reason string
}

func (e *unpaidError) Error() string {
	return fmt.Sprintf("the ledger refused the session's opening: %s cannot pay for it: %s", e.hospital, e.reason)
}

// openBeforeVotes makes sure, before any of the admitted hospitals hs is
// asked for a vote and before any noise is drawn, that the student has a
// session whose opening the ledger has committed and in which the batch
// can run: the session's whole cost is paid first, by every hospital of
// it. A hospital the ledger names as unable to pay (its budget read may
// lag) is left out, and the opening, signed again over the others, is
// proposed while at least the quorum can pay; otherwise the batch is
// refused with nothing asked or drawn. It returns the hospitals to ask
// and those left out.
func (a *Aggregator) openBeforeVotes(ctx context.Context, student, batch string, hs []*hospitalEntry, leftOut []string, unpaid map[string]string, classes int) ([]*hospitalEntry, []string, error) {
	for {
		admitted := make(map[string]int, len(hs))
		ids := make([]string, len(hs))
		for i, h := range hs {
			admitted[h.id], ids[i] = h.teachers, h.id
		}
		s, err := a.session(ctx, student, admitted, unpaid, classes, ids)
		var ue *unpaidError
		if errors.As(err, &ue) {
			a.log.Warn("hospital left out of a session's opening: the ledger found it cannot pay for the session's whole cost", "batch", batch, "hospital", ue.hospital, "reason", ue.reason)
			if unpaid == nil {
				unpaid = map[string]string{}
			}
			unpaid[ue.hospital] = "is refused by the ledger (" + ue.reason + ")"
			hs = slices.DeleteFunc(slices.Clone(hs), func(h *hospitalEntry) bool { return h.id == ue.hospital })
			leftOut = append(leftOut, ue.hospital)
			a.met.leftOut.Inc()
			continue
		}
		if err != nil {
			var pe *protocol.Error
			if errors.As(err, &pe) && pe.Code == protocol.CodeBudgetExhausted {
				a.rememberRefusal(student, batch, reasonBudget, pe)
			}
			return nil, nil, err
		}
		// Ask only the session's hospitals: the others did not pay for it.
		keep := slices.DeleteFunc(slices.Clone(hs), func(h *hospitalEntry) bool {
			if slices.Contains(s.hospitals, h.id) {
				return false
			}
			leftOut = append(leftOut, h.id)
			return true
		})
		s.mu.Unlock()
		return keep, leftOut, nil
	}
}

// sessionToAnswer returns, locked, the student's session, opened before
// the batch's votes were asked (openBeforeVotes), when it can still run
// the batch of voters. A session used up or replaced by another batch of
// the student while this one's votes were collected refuses the batch:
// no session is opened once votes are in hand.
func (a *Aggregator) sessionToAnswer(student string, admitted map[string]int, classes int, voters []string) (*keptSession, error) {
	a.sessionsMu.Lock()
	s := a.sessions[student]
	a.sessionsMu.Unlock()
	if s != nil {
		s.mu.Lock()
		a.sessionsMu.Lock()
		current := a.sessions[student] == s
		a.sessionsMu.Unlock()
		if current && s.opened && s.fits(classes, a.cfg.Quorum, voters, admitted) {
			return s, nil
		}
		s.mu.Unlock()
	}
	return nil, a.refuse(reasonUsedUp, &protocol.Error{Code: protocol.CodeUnavailable, RetryAfter: time.Second,
		Message: fmt.Sprintf("the student's %s was used up by another of its batches while this batch's votes were collected: nothing was charged or released; retry the batch (the next session is opened, and paid for, before anyone is asked)", a.sessionName())})
}

// answerInSession answers a batch in the student's session, whose opening
// the ledger committed before the batch's votes were asked
// (openBeforeVotes); a session used up or replaced meanwhile refuses the
// batch (sessionToAnswer). Only the votes of the session's hospitals are
// counted; the session's hospitals that did not vote abstain. Queries after the session's K-th refusal are
// not looked at: they are refused and left out of the charge (the next
// batch opens a new session). The answer's done must be called once the
// batch's charge is settled (committed, refused or left pending): a
// session that replaces this one is not opened before, because the ledger
// refuses charges naming a replaced session.
func (a *Aggregator) answerInSession(ctx context.Context, student string, adm *admission, votes []vote, nq int) (ans answered, t tally, err error) {
	admitted := make(map[string]int, len(adm.hospitals))
	for _, h := range adm.hospitals {
		admitted[h.id] = h.teachers
	}
	voters := make([]string, len(votes))
	for i, v := range votes {
		voters[i] = v.hospital
	}
	s, err := a.sessionToAnswer(student, admitted, adm.classes, voters)
	if err != nil {
		return answered{}, tally{}, err
	}
	defer s.mu.Unlock()
	var in []vote
	var out []string
	for _, v := range votes {
		if slices.Contains(s.hospitals, v.hospital) {
			in = append(in, v)
		} else {
			out = append(out, v.hospital)
		}
	}
	if len(out) > 0 {
		adm.leftOut = append(adm.leftOut, out...)
		a.log.Info("votes left out of a batch: the student's session was replaced while they were collected, and their hospitals are not of the new one", "session", s.id, "left_out", out)
	}
	t = sumVotes(in, nq, s.classes)
	// The batch counts as in flight before it can use the session up: a
	// batch that then finds the session exhausted (Exhausted needs only the
	// session's own lock, not s.mu) waits in settled for this one's charge
	// before it opens the replacement, which the ledger would otherwise
	// let supersede the session this charge names.
	s.inflight.Add(1)
	settledHere := sync.OnceFunc(s.inflight.Done)
	defer func() {
		if err != nil {
			settledHere()
		}
	}()
	res, err := mechanism.AnswerBatch(s.s, a.cfg.Rand, t.sum)
	if err != nil {
		return answered{}, tally{}, fmt.Errorf("aggregator: mechanism on %w", err)
	}
	a.pause(ctx, PauseSessionAnswered)
	s.answered += res.Answered
	if s.s.Exhausted() {
		burnt, err := a.burns.ended(s.id, s.hospitals, s.answered, s.s.Refusals())
		if err != nil {
			return answered{}, tally{}, err
		}
		if burnt {
			a.log.Error("a session refused its queries having answered too few; no session is opened again for its hospitals: one of them may be voting against the others. The federation's administrator suspends it (nzc init suspend, nzc ledger submit)",
				"session", s.id, "hospitals", s.hospitals, "answered", s.answered, "refusals", s.s.Refusals(), "min_answers", a.burns.minAnswers)
		}
	}
	if res.Stopped {
		a.log.Info("session exhausted; its remaining queries are refused unseen", "session", s.id, "processed", res.Processed, "of", nq)
	}
	// Keep the state before anything leaves: a restart resumes the session
	// with the refusals it has made. An exhausted session is over.
	if s.s.Exhausted() {
		err = a.outbox.DeleteSession(s.id)
	} else {
		err = a.saveSession(s)
	}
	if err != nil {
		return answered{}, tally{}, fmt.Errorf("aggregator: keep session %s in the outbox (nothing was released): %w", s.id, err)
	}
	p := a.cfg.Mechanism
	p.Teachers, p.Classes = s.teachers, s.classes
	return answered{params: p, labels: labelsOf(res), processed: res.Processed, answered: res.Answered, session: s.id,
		curve: make([]float64, a.grid.Len()), done: settledHere}, t, nil // paid when the session opened
}

// sessionName names a session of the configured mechanism in a message,
// e.g. "a session of nzc-svt".
func (a *Aggregator) sessionName() string {
	return "a session of " + string(a.cfg.Mechanism.Mechanism)
}

// sessionIDPrefix is the prefix of the ids of k's sessions: the first word
// of its name after the family's ("svt-" for nzc-svt), or "session-".
func sessionIDPrefix(k mechanism.Kind) string {
	if i := strings.LastIndexByte(string(k), '-'); i >= 0 && i < len(k)-1 {
		return string(k[i+1:]) + "-"
	}
	return "session-"
}
