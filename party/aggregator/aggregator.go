package aggregator

import (
	"cmp"
	"context"
	"crypto/ed25519"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/internal/ratelimit"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// Hospital is a connected hospital as the aggregator calls it: it answers a
// query batch with its teachers' sealed votes.
type Hospital interface {
	Query(ctx context.Context, q *nzcpb.QueryBatch) (*nzcpb.VoteBatch, error)
}

// Ledger is the privacy ledger as the aggregator uses it. Submit proposes a
// signed command and returns the ledger's decision; an error means the
// decision is unknown (the ledger is unreachable, or timed out), and the
// same command may be proposed again. Budget reads hospitals' budgets.
type Ledger interface {
	Submit(ctx context.Context, cmd []byte) (*nzcpb.LedgerResult, error)
	Budget(ctx context.Context, req *nzcpb.BudgetRequest) (*nzcpb.BudgetResponse, error)
}

// Config is what an Aggregator needs.
type Config struct {
	// ID is the aggregator's party id, the signer of its ledger charges.
	ID string
	// Identity opens the hospitals' sealed votes.
	Identity *crypto.Identity
	// SigningKey signs ledger charges.
	SigningKey ed25519.PrivateKey
	// OutboxDir holds the batches awaiting or past their ledger commit.
	OutboxDir string
	// Retention is how long a committed batch's answers are kept for the
	// student's retries (a retry after that is answered afresh and refused
	// by the ledger as a conflict); zero means DefaultRetention.
	Retention time.Duration
	// Mechanism is the aggregation mechanism; Teachers and Classes are set
	// for each batch from the hospitals that voted.
	Mechanism mechanism.Params
	// Fallback, when its Mechanism is set, is the per-query mechanism a
	// student's batch asks for with LabelRequest.fallback, offered (in the
	// Ack) only beside a Mechanism that answers in sessions: a student
	// whose session has ended asks the rest of its plan under it. Its
	// batches are admitted, reserved and charged as any per-query batch,
	// at its data-independent cost, in the same accounts.
	Fallback mechanism.Params
	// Classes is the federation's number of classes, fixed when it is
	// provisioned: a hospital whose Hello announces another is refused.
	// Required (at least 2).
	Classes int
	// Ensembles is each hospital's registered ensemble size (teachers), by
	// hospital id; Ensemble is the size of a hospital it does not name (0:
	// such a hospital is refused). A Hello never sets a size: one that
	// announces another is refused, and every vote batch is checked against
	// the registered size (each query's histogram sums to it). Sizes above
	// protocol.MaxTeachers are refused.
	Ensembles map[string]int
	Ensemble  int
	// Quorum is the minimum number of hospitals whose votes a batch needs.
	Quorum int
	// Hospitals is how many hospitals the federation expects, for
	// readiness reports; 0 means Quorum.
	Hospitals int
	// BatchDeadline bounds the wait for hospitals' votes.
	BatchDeadline time.Duration
	// MissBackoff and MissBackoffMax bound the period a hospital that
	// missed a batch deadline is left out of batches: MissBackoff after
	// its first miss, doubling with each probe it misses, at most
	// MissBackoffMax (zero means DefaultMissBackoff and
	// DefaultMissBackoffMax).
	MissBackoff    time.Duration
	MissBackoffMax time.Duration
	// SVTMinAnswers is how many queries an nzc-svt session must answer
	// before its K refusals end it: a session that answers fewer is burnt,
	// and no session is opened again for a hospital set holding one of its
	// hospitals (see burns). Zero means the session's K; negative, never.
	SVTMinAnswers int
	// Suspended are hospitals the operator has suspended: they are left
	// out of every batch (and named), whatever their votes.
	Suspended []string
	// Ledger is where charges are committed. Required.
	Ledger Ledger
	// AuditorKeys are the note verifier keys of the ledger's auditors
	// (ledger.VerifierKey), pinned in the configuration. A batch is released
	// only with a receipt of its charge whose checkpoint a majority of them
	// signed: one auditor's word that a charge committed is not enough.
	// Required.
	AuditorKeys []string
	// LedgerTimeout bounds one proposal of a batch's charge: when the
	// ledger has not answered by then (its auditors have no majority, or
	// are unreachable), the batch stays pending and the student is refused
	// with ledger-unavailable instead of waiting without end. Zero means
	// DefaultLedgerTimeout.
	LedgerTimeout time.Duration
	// RelayBurst and RelayEvery limit the ledger commands each hospital may
	// relay: RelayBurst at once, then one more every RelayEvery (zero
	// means DefaultRelayBurst and DefaultRelayEvery). Commands over the
	// limit are refused with unavailable before they reach the ledger.
	RelayBurst int
	RelayEvery time.Duration
	// Rand is the mechanism's noise source; nil means crypto/rand.
	Rand io.Reader
	// Now is the clock for deadlines and charge timestamps; nil means
	// time.Now.
	Now func() time.Time
	// Logger; nil discards.
	Logger *slog.Logger
	// Registry receives the aggregator's metrics; nil registers nothing.
	Registry prometheus.Registerer
	// Pause, when set, is called at the named points of the release path
	// (PausePendingWritten, PauseLedgerAnswered, PauseCommitRecorded, and
	// for a mechanism that answers in sessions PauseSessionAnswered and
	// PauseSessionReplacing).
	// Fault tests use it to stop the aggregator in a known state and kill
	// it there; production leaves it nil.
	Pause func(ctx context.Context, point string)
}

// DefaultRetention is Config.Retention's default.
const DefaultRetention = 7 * 24 * time.Hour

// DefaultLedgerTimeout is Config.LedgerTimeout's default: far above a
// healthy commit (milliseconds) and a raft election (seconds).
const DefaultLedgerTimeout = 15 * time.Second

// The points of the release path where Config.Pause is called.
const (
	// PausePendingWritten: the answers are drawn, sealed and written to
	// the outbox with the signed charge; the charge is not yet proposed.
	PausePendingWritten = "pending-written"
	// PauseLedgerAnswered: the ledger has committed the charge (or
	// answered that it is a duplicate), but the outbox still says pending
	// and nothing has been released.
	PauseLedgerAnswered = "ledger-answered"
	// PauseCommitRecorded: the outbox records the commit; the answers have
	// not yet been returned to the student.
	PauseCommitRecorded = "commit-recorded"
	// PauseSessionAnswered: a batch has been answered in its session (which it may have used up); its charge is not yet signed.
	PauseSessionAnswered = "session-answered"
	// PauseSessionReplacing: a batch found its session used up and
	// is about to wait for the charges of the batches answered in it
	// before it opens the next.
	PauseSessionReplacing = "session-replacing"
)

// Aggregator runs the release path. It is safe for concurrent use.
type Aggregator struct {
	cfg    Config
	log    *slog.Logger
	outbox *Outbox
	grid   mechanism.Grid
	met    *metrics
	// health leaves out of batches, for a while, the hospitals that
	// missed a batch deadline.
	health *health
	// burns stops opening nzc-svt sessions for hospitals whose last one
	// burnt.
	burns *burns
	// suspendedInLedger are the hospitals the last budget read found
	// suspended by the federation's administrator (guarded by mu).
	suspendedInLedger []string
	// receipts checks the ledger's receipts against the pinned auditor
	// keys, opening each cosigned checkpoint once.
	receipts *ledger.Verifier

	mu        sync.Mutex
	hospitals map[string]*hospitalEntry
	students  map[string]*crypto.Recipient
	// recipients are the signed age recipients hospitals sent in their
	// Hello, by hospital id, which students are handed (Directory).
	recipients map[string]*nzcpb.SignedRecipient
	classes    int // the configured class count; every hospital must agree
	batches    map[string]*batchLock
	// proofs are the receipts of committed charges waiting to be handed
	// to each hospital they name, with its next query batch.
	proofs map[string][]*nzcpb.Receipt

	refused refusals                   // batches refused for budget, by student and batch id
	relays  *ratelimit.Limiter         // relayed ledger commands, per hospital
	hellos  map[*quicnet.Conn]struct{} // connections that have sent their Hello

	sessionsMu sync.Mutex
	sessions   map[string]*keptSession // by student
}

type hospitalEntry struct {
	id       string
	teachers int
	classes  int
	// ledger says the size is the ledger's registration (register-
	// ensemble), which the hospital's charges then state.
	ledger bool
	h      Hospital
	gen    uint64
}

type batchLock struct {
	mu   sync.Mutex
	refs int
}

// New checks cfg and opens the outbox.
func New(cfg Config) (*Aggregator, error) {
	switch {
	case cfg.ID == "":
		return nil, errors.New("aggregator: no party id configured")
	case cfg.Identity == nil:
		return nil, errors.New("aggregator: no age identity configured: it opens the hospitals' votes")
	case len(cfg.SigningKey) != ed25519.PrivateKeySize:
		return nil, errors.New("aggregator: no ed25519 signing key configured: it signs ledger charges")
	case cfg.Ledger == nil:
		return nil, errors.New("aggregator: no ledger configured; nothing may be released without one")
	case len(cfg.AuditorKeys) == 0:
		return nil, errors.New("aggregator: no auditor keys configured: a release needs a majority of the auditors' signatures, checked against their pinned keys")
	case cfg.Quorum < 1:
		return nil, fmt.Errorf("aggregator: quorum %d: at least one hospital must vote on a batch", cfg.Quorum)
	case cfg.BatchDeadline <= 0:
		return nil, fmt.Errorf("aggregator: batch deadline %v must be positive", cfg.BatchDeadline)
	case cfg.OutboxDir == "":
		return nil, errors.New("aggregator: no outbox directory configured")
	case cfg.Classes < 2 || cfg.Classes > protocol.MaxClasses:
		return nil, fmt.Errorf("aggregator: the federation's class count %d is outside [2, %d]: configure the number of classes its teachers vote on", cfg.Classes, protocol.MaxClasses)
	case cfg.Ensemble < 0 || cfg.Ensemble > protocol.MaxTeachers:
		return nil, fmt.Errorf("aggregator: default ensemble size %d is outside [0, %d]", cfg.Ensemble, protocol.MaxTeachers)
	case len(cfg.Ensembles) == 0 && cfg.Ensemble == 0:
		return nil, errors.New("aggregator: no hospital ensemble sizes configured: register each hospital's number of teachers (or a size for all)")
	}
	for id, n := range cfg.Ensembles {
		if n < 1 || n > protocol.MaxTeachers {
			return nil, fmt.Errorf("aggregator: hospital %s is registered with %d teachers: want 1 to %d", id, n, protocol.MaxTeachers)
		}
	}
	// Validate the mechanism with a placeholder ensemble size: the real one
	// is known per batch.
	p := cfg.Mechanism
	p.Teachers, p.Classes = 1, 0
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("aggregator: %w", err)
	}
	if f := cfg.Fallback; f.Mechanism != "" {
		f.Teachers, f.Classes = 1, 0
		switch {
		case !p.Mechanism.Sessions():
			return nil, fmt.Errorf("aggregator: a fallback is offered only beside a mechanism that answers in sessions; %s answers per query", p.Mechanism)
		case f.Mechanism.Sessions():
			return nil, fmt.Errorf("aggregator: the fallback %s answers in sessions; it must answer per query (gnmax)", f.Mechanism)
		}
		if err := f.Validate(); err != nil {
			return nil, fmt.Errorf("aggregator: the fallback: %w", err)
		}
	}
	receipts, err := ledger.NewVerifier(cfg.AuditorKeys)
	if err != nil {
		return nil, fmt.Errorf("aggregator: the pinned auditor keys: %w", err)
	}
	ob, err := OpenOutbox(cfg.OutboxDir)
	if err != nil {
		return nil, err
	}
	if cfg.Rand == nil {
		cfg.Rand = crand.Reader
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.LedgerTimeout <= 0 {
		cfg.LedgerTimeout = DefaultLedgerTimeout
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.RelayBurst <= 0 {
		cfg.RelayBurst = DefaultRelayBurst
	}
	if cfg.RelayEvery <= 0 {
		cfg.RelayEvery = DefaultRelayEvery
	}
	if cfg.MissBackoff <= 0 {
		cfg.MissBackoff = DefaultMissBackoff
	}
	if cfg.MissBackoffMax <= 0 {
		cfg.MissBackoffMax = DefaultMissBackoffMax
	}
	cfg.MissBackoffMax = max(cfg.MissBackoffMax, cfg.MissBackoff)
	if cfg.Hospitals < cfg.Quorum {
		cfg.Hospitals = cfg.Quorum
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	met := newMetrics(cfg.Registry)
	minAnswers := cfg.SVTMinAnswers
	switch {
	case minAnswers == 0:
		minAnswers = cfg.Mechanism.MaxRefusals
	case minAnswers < 0:
		minAnswers = 0
	}
	a := &Aggregator{cfg: cfg, log: log, outbox: ob, grid: mechanism.DefaultGrid(), met: met,
		health:    newHealth(cfg.Now, cfg.MissBackoff, cfg.MissBackoffMax, met),
		receipts:  receipts,
		classes:   cfg.Classes,
		hospitals: map[string]*hospitalEntry{}, students: map[string]*crypto.Recipient{}, recipients: map[string]*nzcpb.SignedRecipient{}, batches: map[string]*batchLock{},
		proofs:   map[string][]*nzcpb.Receipt{},
		sessions: map[string]*keptSession{}, refused: refusals{byBatch: map[string]refused{}},
		relays: ratelimit.New(cfg.RelayBurst, cfg.RelayEvery, cfg.Now), hellos: map[*quicnet.Conn]struct{}{}}
	if a.burns, err = newBurns(minAnswers, met, ob); err != nil {
		return nil, err
	}
	if err := a.loadSessions(); err != nil {
		return nil, err
	}
	return a, nil
}

// Recipient returns the aggregator's age recipient: what hospitals seal
// their votes to.
func (a *Aggregator) Recipient() *crypto.Recipient { return a.cfg.Identity.Recipient() }

// registered returns a hospital's registered ensemble size, 0 if it has
// none.
func (a *Aggregator) registered(id string) int {
	if n, ok := a.cfg.Ensembles[id]; ok {
		return n
	}
	return a.cfg.Ensemble
}

// AddHospital registers a connected hospital; the returned function removes
// it (when its connection ends). A hospital that registers again replaces
// its earlier connection. The teachers and classes it announces must be its
// registered ensemble size and the federation's class count (here, from the
// configuration; a Hello checks them against the ledger's registrations
// when it has any): they are checked, never adopted, and a refusal changes
// nothing.
func (a *Aggregator) AddHospital(id string, teachers, classes int, h Hospital) (remove func(), err error) {
	return a.addHospital(id, teachers, classes, a.configured(id), h)
}

// ensembleReg is a hospital's registered ensemble size and the
// federation's class count, from the ledger or from the configuration.
type ensembleReg struct {
	teachers, classes int
	ledger            bool
}

// configured is a hospital's size from the configuration (0 when it has
// none).
func (a *Aggregator) configured(id string) ensembleReg {
	return ensembleReg{teachers: a.registered(id), classes: a.classes}
}

// ledgerEnsemble reads a hospital's registered ensemble from the ledger.
// When the ledger holds no registration at all (a federation made before
// they existed) the configuration's sizes stand; when it holds some, a
// hospital without one is refused.
func (a *Aggregator) ledgerEnsemble(ctx context.Context, id string) (ensembleReg, error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.LedgerTimeout)
	defer cancel()
	resp, err := a.cfg.Ledger.Budget(ctx, &nzcpb.BudgetRequest{HospitalIds: []string{id}})
	if err != nil {
		return ensembleReg{}, protocol.Errorf(protocol.CodeLedgerUnavailable, "could not read the registered ensemble of %s from the ledger (%v): retry when the auditors answer", id, err)
	}
	if resp.GetClasses() == 0 {
		return a.configured(id), nil
	}
	for _, e := range resp.GetEnsembles() {
		if e.GetHospitalId() == id {
			return ensembleReg{teachers: int(e.GetTeachers()), classes: int(resp.GetClasses()), ledger: true}, nil
		}
	}
	return ensembleReg{classes: int(resp.GetClasses()), ledger: true}, nil
}

func (a *Aggregator) addHospital(id string, teachers, classes int, reg ensembleReg, h Hospital) (remove func(), err error) {
	switch {
	case reg.teachers == 0:
		return nil, protocol.Errorf(protocol.CodeUnauthorized, "hospital %s has no registered ensemble size: the federation's administrator registers it before it may vote", id)
	case teachers != reg.teachers:
		return nil, protocol.Errorf(protocol.CodeBadRequest, "hospital %s announced %d teachers, but it is registered with %d: run it with the registered ensemble, or have the registration changed", id, teachers, reg.teachers)
	case classes != reg.classes:
		return nil, protocol.Errorf(protocol.CodeBadRequest, "hospital %s votes on %d classes, the federation on %d: train its teachers on the federation's classes", id, classes, reg.classes)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var gen uint64
	if old, ok := a.hospitals[id]; ok {
		gen = old.gen + 1
	}
	e := &hospitalEntry{id: id, teachers: teachers, classes: classes, ledger: reg.ledger, h: h, gen: gen}
	a.hospitals[id] = e
	a.met.hospitals.Set(float64(len(a.hospitals)))
	a.log.Info("hospital registered", "hospital", id, "teachers", teachers, "classes", classes, "status", a.statusLocked())
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if cur, ok := a.hospitals[id]; ok && cur == e {
			delete(a.hospitals, id)
			a.met.hospitals.Set(float64(len(a.hospitals)))
			a.log.Warn("hospital disconnected", "hospital", id, "status", a.statusLocked())
		}
	}, nil
}

// AddStudent records the age recipient labels for a student are sealed to.
func (a *Aggregator) AddStudent(id string, r *crypto.Recipient) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.students[id] = r
	a.log.Info("student registered", "student", id)
}

// Ready reports whether the aggregator can label a batch now, and
// otherwise what it waits for.
func (a *Aggregator) Ready() (bool, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.hospitals) >= a.cfg.Quorum, a.statusLocked()
}

func (a *Aggregator) statusLocked() string {
	n := len(a.hospitals)
	if n < a.cfg.Quorum {
		return fmt.Sprintf("waiting for %d of %d hospitals (%d connected, quorum %d)", a.cfg.Quorum-n, a.cfg.Hospitals, n, a.cfg.Quorum) + a.health.describe() + a.burns.describe() + a.suspendedStatus()
	}
	return fmt.Sprintf("ready: %d of %d hospitals connected (quorum %d)", n, a.cfg.Hospitals, a.cfg.Quorum) + a.health.describe() + a.burns.describe() + a.suspendedStatus()
}

func (a *Aggregator) lockBatch(id string) func() {
	a.mu.Lock()
	l, ok := a.batches[id]
	if !ok {
		l = &batchLock{}
		a.batches[id] = l
	}
	l.refs++
	a.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		a.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(a.batches, id)
		}
		a.mu.Unlock()
	}
}

// refusal reasons, the label of the refusals metric.
const (
	reasonBudget     = "budget"
	reasonQuorum     = "quorum"
	reasonLedger     = "ledger-unavailable"
	reasonRejected   = "ledger-rejected"
	reasonBadRequest = "bad-request"
	reasonBurnt      = "svt-burnt"
	reasonUsedUp     = "session-used-up"
)

func (a *Aggregator) refuse(reason string, err *protocol.Error) error {
	a.met.refusals.WithLabelValues(reason).Inc()
	return err
}

// Label answers a student's label request: it returns the labels only once
// the ledger has committed their charge. A retry of a batch returns the
// same answers and charges nothing again.
func (a *Aggregator) Label(ctx context.Context, student string, req *nzcpb.LabelRequest) (*nzcpb.LabelResponse, error) {
	start := a.cfg.Now()
	if err := protocol.Validate(req); err != nil {
		return nil, a.refuse(reasonBadRequest, protocol.Errorf(protocol.CodeBadRequest, "%v", err))
	}
	batch := hex.EncodeToString(req.GetBatchId())
	unlock := a.lockBatch(refusalKey(student, batch))
	defer unlock()

	rec, ok, err := a.outbox.Get(student, batch)
	if err != nil {
		return nil, err
	}
	if ok {
		if rec.NumQueries != req.GetNumQueries() || rec.FeatureDim != req.GetFeatureDim() {
			return nil, a.refuse(reasonBadRequest, protocol.Errorf(protocol.CodeBadRequest, "batch %s was labelled with %d queries of dimension %d; a retry must resend the same batch (or use a new batch id)", batch, rec.NumQueries, rec.FeatureDim))
		}
		return a.settle(ctx, rec, true, start)
	}
	if r, ok := a.refusedBefore(student, batch); ok {
		// The same refusal as before, decided from public state: the
		// retry asks no hospital and draws no noise.
		return nil, a.refuse(r.reason, r.err)
	}
	rec, done, err := a.draw(ctx, student, batch, req)
	if err != nil {
		return nil, err
	}
	defer done()
	return a.settle(ctx, rec, false, start)
}

// draw collects the votes, runs the mechanism, signs the charge and writes
// the pending record, in its steps: admission, collection, summing,
// answering and recording. Nothing leaves the aggregator here. done must be
// called once the batch's charge is settled (see answerInSession).
func (a *Aggregator) draw(ctx context.Context, student, batch string, req *nzcpb.LabelRequest) (*Record, func(), error) {
	nq := int(req.GetNumQueries())
	p := a.cfg.Mechanism
	if req.GetFallback() {
		// A batch already answered is returned from the outbox whatever
		// the configuration says now; a new one needs the fallback.
		if a.cfg.Fallback.Mechanism == "" {
			return nil, nil, a.refuse(reasonBadRequest, protocol.Errorf(protocol.CodeBadRequest, "this federation offers no per-query fallback: ask without fallback (the aggregator's Ack names the fallback when there is one); nothing was asked of the hospitals or drawn"))
		}
		p = a.cfg.Fallback
	}
	adm, err := a.admitBatch(ctx, student, batch, nq, p)
	if err != nil {
		return nil, nil, err
	}
	votes, err := a.collectVotes(ctx, student, batch, req, adm)
	if err != nil {
		return nil, nil, err
	}
	ans, t, err := a.answerVotes(ctx, student, batch, &adm, votes, nq, p)
	if err != nil {
		return nil, nil, err
	}
	rec, err := a.record(ctx, student, batch, req, adm, t, ans)
	if err != nil {
		ans.done() // the batch ends here: its session may be replaced
		return nil, nil, err
	}
	return rec, ans.done, nil
}

// admission is what a batch was admitted with: the student's recipient,
// the hospitals asked (and which of them are probed), those left out, and
// the number of classes.
type admission struct {
	recipient *crypto.Recipient
	hospitals []*hospitalEntry
	// probe are the hospitals asked without being waited for (triage).
	probe   map[string]bool
	leftOut []string
	classes int
}

// admitBatch admits a batch of nq queries of mechanism p (the configured
// one, or the fallback): the student must have said Hello, the quorum must
// be connected, and the ledger's budgets must allow the batch's worst case
// (admit). A budget refusal is remembered, so that a retry gets it again
// without asking anyone.
func (a *Aggregator) admitBatch(ctx context.Context, student, batch string, nq int, p mechanism.Params) (admission, error) {
	a.mu.Lock()
	recipient := a.students[student]
	hs := make([]*hospitalEntry, 0, len(a.hospitals))
	for _, h := range a.hospitals {
		hs = append(hs, h)
	}
	classes := a.classes
	a.mu.Unlock()
	if recipient == nil {
		return admission{}, a.refuse(reasonBadRequest, protocol.Errorf(protocol.CodeBadRequest, "student %s has not sent Hello with its age recipient on this connection: register first", student))
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].id < hs[j].id })
	if len(hs) < a.cfg.Quorum {
		return admission{}, a.refuse(reasonQuorum, &protocol.Error{Code: protocol.CodeQuorumNotMet, RetryAfter: time.Second,
			Message: fmt.Sprintf("only %d hospitals are connected (%s) and the quorum is %d: nothing was charged or released; retry when more hospitals are online", len(hs), connectedIDs(hs), a.cfg.Quorum)})
	}
	hs, suspended := a.unsuspended(hs)
	hs, probe, benched := a.triage(batch, hs)
	benched = append(suspended, benched...)
	hs, leftOut, unpaid, perr := a.admit(ctx, student, batch, hs, classes, nq, p)
	if perr != nil {
		switch perr.Code {
		case protocol.CodeBudgetExhausted:
			a.rememberRefusal(student, batch, reasonBudget, perr)
			return admission{}, a.refuse(reasonBudget, perr)
		case protocol.CodeBadRequest:
			return admission{}, a.refuse(reasonBadRequest, perr)
		}
		return admission{}, a.refuse(reasonLedger, perr)
	}
	if p.Mechanism.Sessions() {
		var err error
		if hs, leftOut, err = a.openBeforeVotes(ctx, student, batch, hs, leftOut, unpaid, classes); err != nil {
			return admission{}, err
		}
	}
	leftOut = append(leftOut, benched...)
	return admission{recipient: recipient, hospitals: hs, probe: a.waitForProbes(probe, hs), leftOut: leftOut, classes: classes}, nil
}

// collectVotes asks the admitted hospitals for their votes (collect) and
// refuses the batch when fewer than the quorum answer in time, naming each
// hospital that did not vote and why, and each left out.
func (a *Aggregator) collectVotes(ctx context.Context, student, batch string, req *nzcpb.LabelRequest, adm admission) ([]vote, error) {
	votes, absent := a.collect(ctx, student, batch, req, adm.hospitals, adm.probe, adm.classes)
	if len(votes) < a.cfg.Quorum {
		why := strings.Join(absent, "; ")
		if len(adm.leftOut) > 0 {
			why += "; left out: " + strings.Join(adm.leftOut, ", ")
		}
		return nil, a.refuse(reasonQuorum, &protocol.Error{Code: protocol.CodeQuorumNotMet, RetryAfter: time.Second,
			Message: fmt.Sprintf("only %d of %d hospitals voted before the %v deadline and the quorum is %d (%s): nothing was charged or released; retry the batch", len(votes), len(adm.hospitals), a.cfg.BatchDeadline, a.cfg.Quorum, why)})
	}
	return votes, nil
}

// tally is the votes of a batch summed over its hospitals.
type tally struct {
	sum       []mechanism.Histogram // one histogram per query
	teachers  int                   // the voters' teachers in all
	voters    []string              // the hospitals that voted, sorted
	ensembles []uint64              // the ensemble sizes the charge records (chargedEnsembles)
	classes   int
}

// sumVotes sums the hospitals' votes on each of nq queries.
func sumVotes(votes []vote, nq, classes int) tally {
	t := tally{sum: make([]mechanism.Histogram, nq), voters: make([]string, 0, len(votes)), classes: classes}
	for _, v := range votes {
		t.teachers += v.teachers
		t.voters = append(t.voters, v.hospital)
	}
	sort.Strings(t.voters)
	t.ensembles = chargedEnsembles(votes, t.voters)
	for q := range nq {
		h := make(mechanism.Histogram, classes)
		for _, v := range votes {
			for c := range classes {
				h[c] += int(v.counts[q*classes+c])
			}
		}
		t.sum[q] = h
	}
	return t
}

// answered is what the mechanism released for a batch and what it costs.
type answered struct {
	params              mechanism.Params // the mechanism, for the tally's ensemble
	labels              *nzcpb.Labels
	processed, answered int
	session             string    // the session the batch ran in; "" per query
	curve               []float64 // the charge's RDP curve
	delta               float64
	done                func() // call once the charge is settled
}

// answerVotes sums the votes and runs the batch's mechanism p on them: in
// the student's session, whose cost was paid when it opened (counting only
// the votes of its hospitals, see answerInSession), or per query (the
// fallback, or a configured per-query mechanism), priced by the
// mechanism's data-independent cost of what was answered and refused. It
// returns the tally it answered.
func (a *Aggregator) answerVotes(ctx context.Context, student, batch string, adm *admission, votes []vote, nq int, p mechanism.Params) (answered, tally, error) {
	if p.Mechanism.Sessions() {
		return a.answerInSession(ctx, student, adm, votes, nq)
	}
	t := sumVotes(votes, nq, adm.classes)
	p.Teachers, p.Classes = t.teachers, t.classes
	r := answered{params: p, processed: len(t.sum), done: func() {}}
	var err error
	if r.labels, r.answered, err = a.answer(p, t.sum); err != nil {
		return answered{}, tally{}, err
	}
	cost, err := p.Charge(a.grid, r.answered, len(t.sum)-r.answered)
	if err != nil {
		return answered{}, tally{}, fmt.Errorf("aggregator: cost of batch %s: %w", batch, err)
	}
	r.curve, r.delta = cost.RDP.Values(), cost.Delta
	return r, t, nil
}

// record signs the batch's charge, seals its labels to the student and
// writes both to the outbox as a pending record.
func (a *Aggregator) record(ctx context.Context, student, batch string, req *nzcpb.LabelRequest, adm admission, t tally, ans answered) (*Record, error) {
	plain, err := protocol.Marshal(ans.labels)
	if err != nil {
		return nil, err
	}
	hash := sha256.Sum256(plain)
	charge := &ledger.Charge{
		BatchID: batch, Student: student, Hospitals: t.voters, Session: ans.session,
		Mechanism: string(ans.params.Mechanism), Params: ans.params.LedgerParams(),
		Queries: uint64(ans.processed), Answers: uint64(ans.answered),
		Curve: ans.curve, Delta: ans.delta, AnswersHash: hash,
		Timestamp: a.cfg.Now().UnixNano(), Ensembles: t.ensembles,
	}
	cmd, err := ledger.Sign(charge, a.cfg.ID, a.cfg.SigningKey)
	if err != nil {
		return nil, fmt.Errorf("aggregator: sign the charge of batch %s: %w", batch, err)
	}
	sealed, err := crypto.Seal(plain, adm.recipient)
	if err != nil {
		return nil, err
	}
	rec := &Record{BatchID: batch, Student: student, State: StatePending, NumQueries: req.GetNumQueries(),
		FeatureDim: req.GetFeatureDim(), Answered: ans.answered, Hospitals: t.voters, LeftOut: adm.leftOut, Command: cmd,
		SealedLabels: sealed, AnswersHash: hash[:]}
	if err := a.outbox.Put(rec); err != nil {
		return nil, fmt.Errorf("aggregator: write batch %s to the outbox (nothing was charged or released): %w", batch, err)
	}
	a.pause(ctx, PausePendingWritten)
	return rec, nil
}

// answer runs a per-query mechanism on every histogram of a batch.
func (a *Aggregator) answer(p mechanism.Params, sum []mechanism.Histogram) (*nzcpb.Labels, int, error) {
	mech, err := mechanism.New(p)
	if err != nil {
		return nil, 0, fmt.Errorf("aggregator: mechanism: %w", err)
	}
	res, err := mechanism.AnswerBatch(mech, a.cfg.Rand, sum)
	if err != nil {
		return nil, 0, fmt.Errorf("aggregator: mechanism on %w", err)
	}
	return labelsOf(res), res.Answered, nil
}

// labelsOf is the released labels of a batch: −1 for a refused query.
func labelsOf(res mechanism.BatchResult) *nzcpb.Labels {
	labels := &nzcpb.Labels{Labels: make([]int32, len(res.Outcomes)), Refused: make([]bool, len(res.Outcomes))}
	for q, o := range res.Outcomes {
		labels.Labels[q], labels.Refused[q] = int32(o.Label), o.Refused
	}
	return labels
}

type vote struct {
	hospital string
	teachers int
	ledger   bool // teachers is the ledger's registration
	counts   []uint32
}

// chargedEnsembles returns the ensemble sizes a charge of votes records,
// in the order of voters: each hospital's registration in the ledger,
// which the ledger checks the charge against. It is nil when the sizes are
// the configuration's (the ledger then holds no registration for them).
func chargedEnsembles(votes []vote, voters []string) []uint64 {
	size := make(map[string]uint64, len(votes))
	for _, v := range votes {
		if !v.ledger {
			return nil
		}
		size[v.hospital] = uint64(v.teachers)
	}
	out := make([]uint64, len(voters))
	for i, h := range voters {
		out[i] = size[h]
	}
	return out
}

// collect fans the batch out and returns the valid votes that arrived in
// time, in hospital order. It waits for the hospitals not in probe until
// the deadline, and for those in probe only probeGrace longer than for the
// others; every hospital whose votes did not arrive in the time waited is
// recorded as having missed the deadline (a.health), which leaves it out
// of the following batches for a backing-off period. Only timing decides
// that, never the votes.
func (a *Aggregator) collect(ctx context.Context, student, batch string, req *nzcpb.LabelRequest, hs []*hospitalEntry, probe map[string]bool, classes int) (votes []vote, absent []string) {
	start := a.cfg.Now()
	deadline := start.Add(a.cfg.BatchDeadline)
	ids := make([]string, len(hs))
	for i, h := range hs {
		ids[i] = h.id
	}
	q := &nzcpb.QueryBatch{BatchId: req.GetBatchId(), NumQueries: req.GetNumQueries(), FeatureDim: req.GetFeatureDim(),
		NumClasses: uint32(classes), SealedFeatures: req.GetSealedFeatures(), HospitalIds: ids, DeadlineUnixMs: deadline.UnixMilli(), StudentId: student}
	cctx, cancel := context.WithTimeout(ctx, a.cfg.BatchDeadline)
	defer cancel()
	pctx, cancelProbes := context.WithCancel(cctx)
	defer cancelProbes()
	results := make([]*vote, len(hs))
	late := make([]bool, len(hs)) // the call ended for want of time
	errs := make([]error, len(hs))
	var waited, probed sync.WaitGroup
	for i, h := range hs {
		wg, hctx := &waited, cctx
		if probe[h.id] {
			wg, hctx = &probed, pctx
		}
		wg.Go(func() {
			proofs := a.takeProofs(h.id)
			qh := &nzcpb.QueryBatch{BatchId: q.BatchId, NumQueries: q.NumQueries, FeatureDim: q.FeatureDim, NumClasses: q.NumClasses,
				SealedFeatures: q.SealedFeatures, HospitalIds: q.HospitalIds, DeadlineUnixMs: q.DeadlineUnixMs, ChargeReceipts: proofs, StudentId: q.StudentId}
			v, err := a.queryOne(hctx, h, qh)
			if err != nil && len(proofs) > 0 {
				a.handProof([]string{h.id}, proofs...)
			}
			if err != nil {
				late[i], errs[i] = timedOut(err) || hctx.Err() != nil, err
				a.log.Warn("hospital did not vote", "hospital", h.id, "batch", batch, "err", err)
				return
			}
			results[i] = v
		})
	}
	waited.Wait()
	if len(probe) > 0 {
		now := a.cfg.Now()
		grace := probeGrace(now.Sub(start), a.cfg.BatchDeadline, deadline.Sub(now))
		done := make(chan struct{})
		go func() {
			probed.Wait()
			close(done)
		}()
		t := time.NewTimer(grace)
		select {
		case <-done:
		case <-t.C:
		case <-cctx.Done():
		}
		t.Stop()
		cancelProbes()
		probed.Wait()
	}
	waitedFor := a.cfg.Now().Sub(start)
	for i, v := range results {
		h := hs[i].id
		switch {
		case v != nil:
			if probe[h] {
				a.log.Info("a probed hospital voted in time; it is asked again", "hospital", h, "batch", batch)
			}
			a.health.answered(h)
			votes = append(votes, *v)
			continue
		case ctx.Err() != nil:
			// The request itself ended: no hospital is to blame.
		case late[i]:
			d := a.health.missed(h, batch, waitedFor)
			a.log.Warn("hospital missed the batch deadline; it is left out of the following batches, then probed before it is asked again",
				"hospital", h, "batch", batch, "waited", waitedFor, "probe", probe[h], "left_out_for", d)
		}
		if late[i] {
			absent = append(absent, fmt.Sprintf("%s did not answer in the %v waited", h, waitedFor.Round(time.Millisecond)))
		} else {
			absent = append(absent, fmt.Sprintf("%s answered with an error (%v)", h, errs[i]))
		}
	}
	return votes, absent
}

// connectedIDs lists the ids of hs, "none" when it is empty.
func connectedIDs(hs []*hospitalEntry) string {
	if len(hs) == 0 {
		return "none"
	}
	ids := make([]string, len(hs))
	for i, h := range hs {
		ids[i] = h.id
	}
	return strings.Join(ids, ", ")
}

// timedOut says whether err ends a call for want of time: its context's
// deadline, or the connection's read or write deadline set from it.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

func (a *Aggregator) queryOne(ctx context.Context, h *hospitalEntry, q *nzcpb.QueryBatch) (*vote, error) {
	vb, err := h.h.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	if err := protocol.Validate(vb); err != nil {
		return nil, err
	}
	if vb.GetHospitalId() != h.id || string(vb.GetBatchId()) != string(q.GetBatchId()) ||
		vb.GetNumQueries() != q.GetNumQueries() || vb.GetNumClasses() != q.GetNumClasses() {
		return nil, fmt.Errorf("vote batch from %s names hospital %s, another batch or other sizes", h.id, vb.GetHospitalId())
	}
	plain, err := crypto.Open(vb.GetSealedHistograms(), a.cfg.Identity)
	if err != nil {
		return nil, fmt.Errorf("open the votes of %s: %w", h.id, err)
	}
	var hist nzcpb.Histograms
	if err := protocol.DecodePlain(plain, &hist); err != nil {
		return nil, fmt.Errorf("votes of %s: %w", h.id, err)
	}
	if hist.GetNumQueries() != q.GetNumQueries() || hist.GetNumClasses() != q.GetNumClasses() || int(hist.GetNumTeachers()) != h.teachers {
		return nil, fmt.Errorf("votes of %s: %d queries × %d classes from %d teachers, want %d × %d from the %d it registered",
			h.id, hist.GetNumQueries(), hist.GetNumClasses(), hist.GetNumTeachers(), q.GetNumQueries(), q.GetNumClasses(), h.teachers)
	}
	return &vote{hospital: h.id, teachers: h.teachers, ledger: h.ledger, counts: hist.GetCounts()}, nil
}

// handProof queues receipts for each hospital named, to go with its next
// query batch: each hospital checks that its votes were charged, and
// stops voting when they are not. At most protocol.MaxChargeReceipts wait
// per hospital; older ones are dropped (the hospital then stops voting
// until it sees the charges otherwise).
func (a *Aggregator) handProof(hospitals []string, rs ...*nzcpb.Receipt) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, h := range hospitals {
		q := append(a.proofs[h], rs...)
		a.proofs[h] = q[max(0, len(q)-protocol.MaxChargeReceipts):]
	}
}

// takeProofs returns and forgets the receipts waiting for hospital h.
func (a *Aggregator) takeProofs(h string) []*nzcpb.Receipt {
	a.mu.Lock()
	defer a.mu.Unlock()
	rs := a.proofs[h]
	delete(a.proofs, h)
	return rs
}

// settle proposes a record's charge (again, if it was proposed before) and
// returns the labels once the ledger has committed it.
func (a *Aggregator) settle(ctx context.Context, rec *Record, retry bool, start time.Time) (*nzcpb.LabelResponse, error) {
	// A committed record without a receipt (written before receipts were
	// kept) is proposed again: the ledger answers duplicate, with one.
	if rec.State == StatePending || rec.Receipt == nil {
		sctx, cancel := context.WithTimeout(ctx, a.cfg.LedgerTimeout)
		res, err := a.cfg.Ledger.Submit(sctx, rec.Command)
		cancel()
		if err != nil {
			a.log.Warn("ledger did not confirm the charge; the batch stays pending", "batch", rec.BatchID, "err", err)
			return nil, a.refuse(reasonLedger, &protocol.Error{Code: protocol.CodeLedgerUnavailable, RetryAfter: time.Second,
				Message: fmt.Sprintf("the ledger did not confirm the charge of batch %s (%v): nothing was released; retry the same batch, which is kept and will not be charged twice", rec.BatchID, err)})
		}
		switch res.GetCode() {
		case nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED, nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_DUPLICATE:
			rcpt, index, err := a.checkReceipt(rec, res)
			if err != nil {
				a.met.receiptsRejected.Inc()
				a.log.Error("the ledger answered committed without a majority's proof; nothing is released", "batch", rec.BatchID, "err", err)
				return nil, a.refuse(reasonLedger, &protocol.Error{Code: protocol.CodeLedgerUnavailable, RetryAfter: time.Second,
					Message: fmt.Sprintf("the ledger's answer for batch %s carries no valid proof that a majority of the auditors committed it (%v): nothing was released; retry the same batch", rec.BatchID, err)})
			}
			a.pause(ctx, PauseLedgerAnswered)
			rec.State, rec.LedgerIndex, rec.Receipt = StateCommitted, index, &rcpt
			rec.Committed = a.cfg.Now().UnixMilli()
			if err := a.outbox.Put(rec); err != nil {
				// The charge is committed; a later retry re-proposes the
				// identical command and the ledger answers duplicate.
				a.log.Error("could not record the commit in the outbox", "batch", rec.BatchID, "err", err)
			} else {
				a.pause(ctx, PauseCommitRecorded)
			}
			a.met.released.Add(float64(rec.Answered))
			a.met.batchSeconds.Observe(a.cfg.Now().Sub(start).Seconds())
			a.log.Info("batch charged and released", "batch", rec.BatchID, "student", rec.Student, "queries", rec.NumQueries,
				"answered", rec.Answered, "hospitals", rec.Hospitals, "ledger_index", rec.LedgerIndex)
			go a.updateSpend(rec.Hospitals)
			retry = retry || res.GetCode() == nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_DUPLICATE
		case nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_BUDGET_EXHAUSTED:
			// The ledger decides at the batch's worst case, so its reason
			// does not depend on the votes; a retry gets the same refusal.
			a.forget(rec)
			perr := protocol.Errorf(protocol.CodeBudgetExhausted,
				"the ledger refused the charge of batch %s: %s; nothing was released", rec.BatchID, res.GetReason())
			a.rememberRefusal(rec.Student, rec.BatchID, reasonBudget, perr)
			return nil, a.refuse(reasonBudget, perr)
		default:
			a.forget(rec)
			perr := protocol.Errorf(protocol.CodeBadRequest,
				"the ledger rejected the charge of batch %s: %s; nothing was released", rec.BatchID, res.GetReason())
			a.rememberRefusal(rec.Student, rec.BatchID, reasonRejected, perr)
			return nil, a.refuse(reasonRejected, perr)
		}
	}
	// Every hospital charged gets the proof, also on a retried delivery
	// (the queue is in memory: a restarted aggregator hands it again then).
	a.handProof(rec.Hospitals, protocol.ReceiptToWire(*rec.Receipt))
	id, err := hex.DecodeString(rec.BatchID)
	if err != nil {
		return nil, fmt.Errorf("%w: batch id %q", ErrCorruptOutbox, rec.BatchID)
	}
	return &nzcpb.LabelResponse{BatchId: id, NumQueries: rec.NumQueries, SealedLabels: rec.SealedLabels,
		LedgerIndex: rec.LedgerIndex, AnswersHash: rec.AnswersHash, Replayed: retry, LeftOut: rec.LeftOut,
		Receipt: protocol.ReceiptToWire(*rec.Receipt), Hospitals: a.Directory()}, nil
}

// SetRecipient records the signed age recipient hospital id sent in its
// Hello, replacing the one it sent before. The aggregator cannot make
// one: students check the signature against the hospital's registered
// key.
func (a *Aggregator) SetRecipient(r *nzcpb.SignedRecipient) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recipients[r.GetHospitalId()] = r
}

// Directory returns the signed age recipients of the hospitals connected
// now and not suspended, sorted by hospital id: students seal their next batches to those
// whose signatures they verify, so that a hospital admitted while they
// run is asked without any change to their configuration.
func (a *Aggregator) Directory() []*nzcpb.SignedRecipient {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*nzcpb.SignedRecipient
	for id := range a.hospitals {
		if slices.Contains(a.cfg.Suspended, id) {
			continue // never asked: students need not seal to it
		}
		if r, ok := a.recipients[id]; ok {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(x, y *nzcpb.SignedRecipient) int { return strings.Compare(x.GetHospitalId(), y.GetHospitalId()) })
	return out
}

// checkReceipt verifies the receipt a ledger result carries against the
// pinned auditor keys: a checkpoint signed by a majority, holding the
// accepted entry of exactly this batch's signed charge. It returns the
// receipt and the entry's index.
func (a *Aggregator) checkReceipt(rec *Record, res *nzcpb.LedgerResult) (ledger.Receipt, uint64, error) {
	r, ok, err := protocol.ReceiptFromWire(res.GetReceipt())
	if err != nil {
		return ledger.Receipt{}, 0, err
	}
	if !ok {
		return ledger.Receipt{}, 0, errors.New("the answer has no receipt")
	}
	cmd, err := ledger.DecodeCommand(rec.Command)
	if err != nil {
		return ledger.Receipt{}, 0, err
	}
	digest, err := cmd.Digest()
	if err != nil {
		return ledger.Receipt{}, 0, err
	}
	en, _, err := a.receipts.Receipt(r, digest)
	if err != nil {
		return ledger.Receipt{}, 0, err
	}
	return r, en.Index, nil
}

func (a *Aggregator) pause(ctx context.Context, point string) {
	if a.cfg.Pause != nil {
		a.cfg.Pause(ctx, point)
	}
}

func (a *Aggregator) forget(rec *Record) {
	if err := a.outbox.Delete(rec.Student, rec.BatchID); err != nil {
		a.log.Error("could not drop a refused batch from the outbox", "batch", rec.BatchID, "err", err)
	}
}

// updateSpend refreshes the ε-spent gauges of the hospitals just charged.
func (a *Aggregator) updateSpend(hospitals []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := a.cfg.Ledger.Budget(ctx, &nzcpb.BudgetRequest{HospitalIds: hospitals})
	if err != nil {
		a.log.Debug("could not read the budgets back", "err", err)
		return
	}
	for _, b := range resp.GetBudgets() {
		a.met.epsilon.WithLabelValues(b.GetHospitalId()).Set(b.GetEpsilonSpent())
	}
}

// Prune removes from the outbox the batches committed more than the
// retention period ago, whose students have had time to fetch them.
func (a *Aggregator) Prune() error {
	n, err := a.outbox.Prune(a.cfg.Now().Add(-a.cfg.Retention))
	if n > 0 {
		a.log.Info("pruned delivered batches from the outbox", "batches", n, "retention", a.cfg.Retention)
	}
	return err
}

// Recover re-proposes the charge of every pending batch, so that answers
// charged before a crash are ready for delivery when the student retries.
// Batches the ledger refuses are dropped; batches it cannot confirm stay
// pending (a student's retry proposes them again).
func (a *Aggregator) Recover(ctx context.Context) error {
	all, err := a.outbox.records()
	if err != nil {
		return err
	}
	// The receipts waiting for the hospitals were in memory: hand those
	// of the batches committed before the restart again, oldest first
	// (the queue keeps the newest), or a hospital would count them as
	// unproven for good.
	slices.SortFunc(all, func(x, y *Record) int { return cmp.Compare(x.Committed, y.Committed) })
	for _, rec := range all {
		if rec.State == StateCommitted && rec.Receipt != nil {
			a.handProof(rec.Hospitals, protocol.ReceiptToWire(*rec.Receipt))
		}
	}
	pending, err := a.outbox.Pending()
	if err != nil {
		return err
	}
	for _, rec := range pending {
		unlock := a.lockBatch(refusalKey(rec.Student, rec.BatchID))
		cur, ok, err := a.outbox.Get(rec.Student, rec.BatchID)
		if err == nil && ok && cur.State == StatePending {
			_, err = a.settle(ctx, cur, true, a.cfg.Now())
		}
		unlock()
		if err != nil {
			a.log.Warn("pending batch not settled yet", "batch", rec.BatchID, "err", err)
			continue
		}
		a.log.Info("pending batch settled after restart", "batch", rec.BatchID)
	}
	return nil
}

// Budget answers a party's budget request from the ledger. A student's
// quota is read only by the aggregator, for the batch it admits: a request
// that names a student is passed on without it.
func (a *Aggregator) Budget(ctx context.Context, req *nzcpb.BudgetRequest) (*nzcpb.BudgetResponse, error) {
	req = &nzcpb.BudgetRequest{HospitalIds: req.GetHospitalIds(), Delta: req.GetDelta()}
	resp, err := a.cfg.Ledger.Budget(ctx, req)
	if err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) {
			return nil, pe
		}
		return nil, &protocol.Error{Code: protocol.CodeLedgerUnavailable, RetryAfter: time.Second,
			Message: fmt.Sprintf("the ledger did not answer (%v): retry", err)}
	}
	return resp, nil
}
