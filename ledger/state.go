package ledger

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/nzcfed/nzc/mechanism"
)

// MaxCommandSize is the largest command Apply accepts. A larger proposal is
// an error of the proposer and is not recorded.
const MaxCommandSize = 1 << 20

// ErrCommandTooLarge is returned by Apply for a command over MaxCommandSize.
var ErrCommandTooLarge = errors.New("ledger: command too large; split the batch")

// RefusalError is the typed reason a command was refused.
type RefusalError struct {
	Code    Code
	Subject string // the party, batch or session the refusal names
	Message string
	// For CodeCapExceeded: the hospital's ε before the charge, the charge's
	// own ε and the cap, all at the δ left for the conversion after the
	// charge. Zero otherwise.
	SpentEpsilon  float64
	ChargeEpsilon float64
	CapEpsilon    float64
}

func (e *RefusalError) Error() string {
	return "ledger: refused (" + e.Code.String() + "): " + e.Message
}

// Result is what applying one command did.
type Result struct {
	Index uint64 `json:"index"` // the entry the command was recorded as
	Outcome
	Message string `json:"message"` // readable explanation; not part of the entry
	// Set for cap-exceeded refusals; see RefusalError.
	SpentEpsilon  float64 `json:"spent_epsilon,omitempty"`
	ChargeEpsilon float64 `json:"charge_epsilon,omitempty"`
	CapEpsilon    float64 `json:"cap_epsilon,omitempty"`
}

// Err returns nil for an accepted or duplicate command and a *RefusalError
// for a refused one.
func (r Result) Err() error {
	if r.Status != StatusRefused {
		return nil
	}
	return &RefusalError{Code: r.Code, Subject: r.Subject, Message: r.Message,
		SpentEpsilon: r.SpentEpsilon, ChargeEpsilon: r.ChargeEpsilon, CapEpsilon: r.CapEpsilon}
}

type account struct {
	capEps, capDelta float64
	capVersion       uint64
	capChanges       []CapChange
	curve            mechanism.Curve
	deltaSpent       float64
	// pure is the sum of the charges' pure ε, on the lattice (+Inf once a
	// charge without one was composed).
	pure    float64
	charges uint64
	answers uint64
	opened  uint64
}

// conversionDelta is the δ left for converting the RDP curve to ε once the
// additive δ already charged is taken out.
func (a *account) conversionDelta() float64 { return a.capDelta - a.deltaSpent }

// usage is what one student has spent of one hospital's budget: its
// charges composed as the hospital's account composes them.
type usage struct {
	curve      mechanism.Curve
	deltaSpent float64
	pure       float64
}

// usageKey names student's usage of hospital's budget.
func usageKey(student, hospital string) string { return student + "\x00" + hospital }

type studentAcct struct {
	maxAnswers uint64
	answers    uint64
}

type session struct {
	aggregator  string
	student     string
	hospitals   []string
	maxRefusals uint64
	// mechanism and params are what the session paid for at opening; a
	// charge in it must name exactly these.
	mechanism   string
	params      []Param
	queries     uint64
	answers     uint64
	closed      bool
	closeDigest [32]byte
	closeIndex  uint64
	// supersededBy is the later session of the same aggregator, student
	// and hospitals that replaced this one; no charge may name it then.
	supersededBy string
}

// sessionKey names the sessions one replaces another among.
func sessionKey(aggregator, student string, hospitals []string) string {
	return aggregator + "\x00" + student + "\x00" + strings.Join(hospitals, "\x00")
}

type applied struct {
	digest [32]byte
	index  uint64
}

// State is the ledger's deterministic state machine and its Merkle log. Every
// command given to Apply — accepted or refused — becomes one entry of the
// log, so the log is a complete record of what was proposed and decided, and
// replaying it reproduces the state. State is safe for concurrent use: reads
// may run while a command is applied.
type State struct {
	mu   sync.RWMutex
	grid mechanism.Grid

	genesis bool
	origin  string
	// epsBound and deltaBound bound every cap (Genesis.Bounds).
	epsBound, deltaBound float64
	// share is the share of any hospital's cap ε one student may spend
	// (Genesis.Share), and used what each student has spent of each
	// hospital, by usageKey.
	share float64
	used  map[string]*usage
	// genesisHash is the digest of the accepted genesis command.
	genesisHash [32]byte
	parties     map[string]Party
	joined      map[string]uint64 // index of the entry that registered the party
	accounts    map[string]*account
	students    map[string]*studentAcct
	batches     map[string]applied
	sessions    map[string]*session
	opened      map[string]applied  // session ID → the OpenSession that opened it
	latest      map[string]string   // sessionKey → the ID of the session opened last
	ensembles   map[string]Ensemble // hospital → its registered ensemble
	// reservations are the live and expired-but-not-yet-pruned Reserve
	// commands by batch (Charge.key), and reserveQueue their keys and
	// entries in log order, for composing them in one order on every
	// replica and for pruning the expired.
	reservations map[string]*reservation
	reserveQueue []queued
	classes      uint64                // the federation's class count, from the first ensemble registration
	paced        map[string]int64      // hospital → when its account commands are paced again (pace.go)
	suspensions  map[string]Suspension // hospital → its last suspension or reinstatement

	log hashStore // the entries and their RFC 6962 hashes

	costs *costCache   // parsed parameter lists; changes no result
	pre   *preverified // the batch Preverify saw; changes no result
	// checks are the signatures seen to verify lately (by Check before a
	// command is proposed); changes no result.
	checks *checkedSigs

	// failed is the first error of the history under a decision (a batch
	// looked up or recorded): Apply returns it instead of a result.
	failed atomic.Pointer[error]
}

// New returns an empty ledger that keeps its history in memory. Its first
// accepted command must be a Genesis.
func New() *State { return newState(NewMemHistory()) }

func newState(h History) *State {
	return &State{
		log:          hashStore{h: h},
		grid:         mechanism.DefaultGrid(),
		parties:      map[string]Party{},
		joined:       map[string]uint64{},
		accounts:     map[string]*account{},
		used:         map[string]*usage{},
		share:        1,
		students:     map[string]*studentAcct{},
		batches:      map[string]applied{},
		sessions:     map[string]*session{},
		opened:       map[string]applied{},
		latest:       map[string]string{},
		ensembles:    map[string]Ensemble{},
		reservations: map[string]*reservation{},
		paced:        map[string]int64{},
		suspensions:  map[string]Suspension{},
		costs:        newCostCache(),
		pre:          &preverified{},
		checks:       &checkedSigs{keys: map[[32]byte]ed25519.PublicKey{}},
	}
}

// Apply applies one encoded command and records it as the next entry. The
// error is non-nil only for a command over MaxCommandSize (nothing is
// recorded); every refusal is a Result with StatusRefused, recorded like an
// acceptance but as a fixed-size refusal record (Entry.Record), and
// Result.Err returns it as a *RefusalError.
func (s *State) Apply(cmd []byte) (Result, error) {
	return s.apply(cmd, false)
}

// apply is Apply; whole records a refusal with the command's bytes, as logs
// written before refusal records did.
func (s *State) apply(cmd []byte, whole bool) (Result, error) {
	if len(cmd) > MaxCommandSize {
		return Result{}, fmt.Errorf("%w (%d bytes, the limit is %d)", ErrCommandTooLarge, len(cmd), MaxCommandSize)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	index := uint64(s.log.size())
	r, commit := s.decide(cmd, index, nil)
	if e := s.failed.Swap(nil); e != nil {
		return Result{}, *e
	}
	r.Index = index
	prev, err := s.log.treeHash(int64(index))
	if err != nil {
		return Result{}, err
	}
	en := Entry{Index: index, PrevRoot: prev, Command: cmd, Outcome: r.Outcome}
	if r.Status == StatusRefused && !whole {
		en.Command, en.Record = nil, recordOf(cmd)
	}
	b, err := en.Encode()
	if err != nil {
		// Outcomes are built from decoded identifiers only, so this cannot
		// happen; refuse to record rather than record a broken entry.
		return Result{}, fmt.Errorf("ledger: cannot encode entry %d: %w", index, err)
	}
	if err := s.appendEntry(b); err != nil {
		return Result{}, err
	}
	if commit != nil {
		commit()
	}
	if e := s.failed.Swap(nil); e != nil {
		return Result{}, *e
	}
	s.pruneReservations(index + 1)
	return r, nil
}

// Check decides cmd against the current state without recording it or
// changing anything: the result Apply would give it now, without an index.
// A proposer uses it to refuse, before they reach the replicated log,
// commands that would only add a refused entry (a forged signature, a stale
// cap version, an account that is already open).
func (s *State) Check(cmd []byte) Result {
	if len(cmd) > MaxCommandSize {
		return refuse(CodeMalformed, "", "the command is %d bytes, the limit is %d", len(cmd), MaxCommandSize)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, _ := s.decide(cmd, uint64(s.log.size()), nil)
	return r
}

// CheckAt is Check by a proposer whose clock reads now (unix nanoseconds):
// it also refuses, as rate-limited, a hospital's account command stamped
// more than StampWindow away from now, so that no hospital gains account
// commands by stamping them ahead (see pace.go). Apply never reads a clock;
// only proposers call CheckAt.
func (s *State) CheckAt(cmd []byte, now int64) Result {
	if len(cmd) > MaxCommandSize {
		return refuse(CodeMalformed, "", "the command is %d bytes, the limit is %d", len(cmd), MaxCommandSize)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, _ := s.decide(cmd, uint64(s.log.size()), &now)
	return r
}

// GenesisHash returns the digest of the accepted genesis command
// (Command.Digest: the SHA-256 of its signed content, which `nzc ledger
// verify --genesis-hash` and an auditor's genesis_hash pin), and false before
// the genesis.
func (s *State) GenesisHash() ([32]byte, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.genesisHash, s.genesis
}

func (s *State) appendEntry(b []byte) error { return s.log.append(b) }

func refuse(code Code, subject, format string, args ...any) Result {
	return Result{Outcome: Outcome{Status: StatusRefused, Code: code, Subject: subject}, Message: fmt.Sprintf(format, args...)}
}

func accept(format string, args ...any) Result {
	return Result{Outcome: Outcome{Status: StatusAccepted}, Message: fmt.Sprintf(format, args...)}
}

// decide computes the result of a command without changing the state; the
// returned commit function, run only after the entry is recorded, makes the
// change. A refusal returns no commit.
func (s *State) decide(cmd []byte, index uint64, now *int64) (Result, func()) {
	c, verifiedWith, err := s.decode(cmd)
	if err != nil {
		return refuse(CodeMalformed, "", "%v", err), nil
	}
	if now != nil {
		if r, ok := stampInWindow(c, *now); !ok {
			return r, nil
		}
	}
	if g, ok := c.Body.(*Genesis); ok {
		return s.genesisCmd(c, g, index)
	}
	if !s.genesis {
		return refuse(CodeNoGenesis, "", "the ledger has no genesis yet; apply the federation's genesis first"), nil
	}
	signer, ok := s.parties[c.Signer]
	if !ok {
		return refuse(CodeUnknownSigner, c.Signer, "signer %s is not a registered party", c.Signer), nil
	}
	if !s.verified(cmd, c, signer.PublicKey, verifiedWith) {
		return refuse(CodeBadSignature, c.Signer, "the %s signature does not verify with %s's registered key", c.Body.Kind(), c.Signer), nil
	}
	switch b := c.Body.(type) {
	case *RegisterParty:
		return s.registerParty(signer, b, index)
	case *OpenAccount:
		return s.openAccount(signer, b, index)
	case *ChangeCap:
		return s.changeCap(signer, b, index)
	case *RegisterStudent:
		return s.registerStudent(signer, b)
	case *Charge:
		return s.charge(c, signer, b, index)
	case *OpenSession:
		return s.openSession(c, signer, b, index)
	case *CloseSession:
		return s.closeSession(c, signer, b, index)
	case *RegisterEnsemble:
		return s.registerEnsemble(signer, b, index)
	case *Reserve:
		return s.reserve(c, signer, b, index)
	case *Suspend:
		return s.suspend(signer, b, index)
	}
	return refuse(CodeMalformed, "", "command kind %s is not handled", c.Body.Kind()), nil
}

func (s *State) genesisCmd(c Command, g *Genesis, index uint64) (Result, func()) {
	if s.genesis {
		return refuse(CodeGenesisRepeated, "", "the ledger already has its genesis (origin %s)", s.origin), nil
	}
	i, found := slices.BinarySearchFunc(g.Parties, c.Signer, func(p Party, id string) int { return strings.Compare(p.ID, id) })
	if !found {
		return refuse(CodeUnknownSigner, c.Signer, "genesis signer %s is not among the parties it lists", c.Signer), nil
	}
	signer := g.Parties[i]
	if !c.Verify(signer.PublicKey) {
		return refuse(CodeBadSignature, c.Signer, "the genesis signature does not verify with %s's key", c.Signer), nil
	}
	if signer.Role != RoleAdmin {
		return refuse(CodeWrongSigner, c.Signer, "genesis must be signed by an administrator, %s is a %s", c.Signer, signer.Role), nil
	}
	if !slices.ContainsFunc(g.Parties, func(p Party) bool { return p.Role == RoleAuditor }) {
		return refuse(CodeBadGenesis, "", "genesis lists no auditor; checkpoints could not be signed"), nil
	}
	digest, _ := c.Digest()
	return accept("genesis of %s with %d parties", g.Origin, len(g.Parties)), func() {
		s.genesis = true
		s.origin, s.genesisHash = g.Origin, digest
		s.epsBound, s.deltaBound = g.Bounds()
		s.share = g.Share()
		for _, p := range g.Parties {
			s.parties[p.ID] = p
			s.joined[p.ID] = index
		}
	}
}

func (s *State) registerParty(signer Party, b *RegisterParty, index uint64) (Result, func()) {
	if signer.Role != RoleAdmin {
		return refuse(CodeWrongSigner, signer.ID, "only an administrator registers parties, %s is a %s", signer.ID, signer.Role), nil
	}
	if _, ok := s.parties[b.Party.ID]; ok {
		return refuse(CodePartyExists, b.Party.ID, "party %s is already registered; party IDs are never reused", b.Party.ID), nil
	}
	return accept("registered %s %s", b.Party.Role, b.Party.ID), func() {
		s.parties[b.Party.ID] = b.Party
		s.joined[b.Party.ID] = index
	}
}

func validCap(eps, delta float64) bool {
	return eps > 0 && !math.IsInf(eps, 0) && delta > 0 && delta < 1
}

func (s *State) openAccount(signer Party, b *OpenAccount, index uint64) (Result, func()) {
	if signer.Role != RoleHospital || signer.ID != b.Hospital {
		return refuse(CodeWrongSigner, signer.ID, "only hospital %s itself opens its account, not %s", b.Hospital, signer.ID), nil
	}
	if _, ok := s.accounts[b.Hospital]; ok {
		return refuse(CodeAccountExists, b.Hospital, "hospital %s already has an account; change its cap with a signed cap change", b.Hospital), nil
	}
	if r, ok := s.capBounded(b.Hospital, b.CapEpsilon, b.CapDelta); !ok {
		return r, nil
	}
	next, r, ok := s.pace(b.Hospital, b.Timestamp)
	if !ok {
		return r, nil
	}
	return accept("opened account of %s with cap ε=%v δ=%v", b.Hospital, b.CapEpsilon, b.CapDelta), func() {
		s.paced[b.Hospital] = next
		s.accounts[b.Hospital] = &account{capEps: b.CapEpsilon, capDelta: b.CapDelta, curve: s.grid.Zero(), opened: index}
	}
}

func (s *State) changeCap(signer Party, b *ChangeCap, index uint64) (Result, func()) {
	if signer.Role != RoleHospital || signer.ID != b.Hospital {
		return refuse(CodeWrongSigner, signer.ID, "only hospital %s itself changes its cap, not %s", b.Hospital, signer.ID), nil
	}
	a, ok := s.accounts[b.Hospital]
	if !ok {
		return refuse(CodeNoAccount, b.Hospital, "hospital %s has not opened an account", b.Hospital), nil
	}
	if b.Version != a.capVersion+1 {
		return refuse(CodeStaleCapVersion, b.Hospital, "cap change version %d for %s, the next is %d; sign a new request", b.Version, b.Hospital, a.capVersion+1), nil
	}
	if r, ok := s.capBounded(b.Hospital, b.CapEpsilon, b.CapDelta); !ok {
		return r, nil
	}
	next, r, ok := s.pace(b.Hospital, b.Timestamp)
	if !ok {
		return r, nil
	}
	return accept("cap of %s changed from ε=%v δ=%v to ε=%v δ=%v (version %d)", b.Hospital, a.capEps, a.capDelta, b.CapEpsilon, b.CapDelta, b.Version), func() {
		s.paced[b.Hospital] = next
		a.capChanges = append(a.capChanges, CapChange{Entry: index, Timestamp: b.Timestamp, Version: b.Version, Signer: signer.ID,
			FromEpsilon: a.capEps, FromDelta: a.capDelta, ToEpsilon: b.CapEpsilon, ToDelta: b.CapDelta,
			Raise: b.CapEpsilon > a.capEps || b.CapDelta > a.capDelta})
		a.capEps, a.capDelta, a.capVersion = b.CapEpsilon, b.CapDelta, b.Version
	}
}

// capBounded refuses a cap that is not a cap (ε not finite and > 0, δ not
// in (0, 1)) or that exceeds the federation's bounds: a larger δ restates
// the same spending as a smaller ε, so no account may pick its own.
func (s *State) capBounded(hospital string, eps, delta float64) (Result, bool) {
	if !validCap(eps, delta) {
		return refuse(CodeBadCap, hospital, "cap (ε=%v, δ=%v) of %s: ε must be finite and > 0, δ in (0, 1)", eps, delta, hospital), false
	}
	if eps > s.epsBound || delta > s.deltaBound {
		return refuse(CodeBadCap, hospital, "cap (ε=%v, δ=%v) of %s exceeds the federation's bounds (ε ≤ %v, δ ≤ %v, fixed by its genesis); ask for a cap within them",
			eps, delta, hospital, s.epsBound, s.deltaBound), false
	}
	return Result{}, true
}

func (s *State) registerStudent(signer Party, b *RegisterStudent) (Result, func()) {
	if signer.Role != RoleAdmin {
		return refuse(CodeWrongSigner, signer.ID, "only an administrator registers students, %s is a %s", signer.ID, signer.Role), nil
	}
	if p, ok := s.parties[b.Student]; !ok || p.Role != RoleStudent {
		return refuse(CodeUnknownStudent, b.Student, "%s is not a registered student party; register the party first", b.Student), nil
	}
	if _, ok := s.students[b.Student]; ok {
		return refuse(CodeStudentExists, b.Student, "student %s is already registered", b.Student), nil
	}
	return accept("registered student %s (quota %d answers, 0 = none)", b.Student, b.MaxAnswers), func() {
		s.students[b.Student] = &studentAcct{maxAnswers: b.MaxAnswers}
	}
}

// cost checks a cost (curve values and additive δ) for the given hospitals
// and returns the refusal, if any, and the curve to compose.
func (s *State) checkCost(student string, hospitals []string, values []float64, delta float64) (Result, mechanism.Curve, bool) {
	if len(hospitals) == 0 {
		return refuse(CodeBadCharge, "", "no participating hospital"), mechanism.Curve{}, false
	}
	if math.IsInf(delta, 0) || delta < 0 || delta >= 1 {
		return refuse(CodeBadCharge, "", "additive δ %v is not in [0, 1)", delta), mechanism.Curve{}, false
	}
	curve, err := s.grid.CurveOf(values)
	if err != nil {
		return refuse(CodeBadCurve, "", "the RDP curve must have one non-negative value (or +Inf) per order of the default grid (%d): %v", s.grid.Len(), err), mechanism.Curve{}, false
	}
	if _, ok := s.students[student]; !ok {
		return refuse(CodeUnknownStudent, student, "%s is not a registered student", student), mechanism.Curve{}, false
	}
	for _, h := range hospitals {
		if p, ok := s.parties[h]; !ok || p.Role != RoleHospital {
			return refuse(CodeUnknownHospital, h, "%s is not a registered hospital", h), mechanism.Curve{}, false
		}
		if _, ok := s.accounts[h]; !ok {
			return refuse(CodeNoAccount, h, "hospital %s has not opened an account, so nothing may be charged to it", h), mechanism.Curve{}, false
		}
	}
	if r, ok := s.notSuspended(hospitals); !ok {
		return r, mechanism.Curve{}, false
	}
	return Result{}, curve, true
}

// capCheck refuses a cost that would exhaust any hospital's δ or push its ε
// over its cap. Hospitals are checked in their sorted order, so the refusal
// names the first one that fails.
func (s *State) capCheck(student string, hospitals []string, cost derived, index uint64, except string) (Result, bool) {
	curve, delta := cost.admit, cost.admitDelta
	for _, h := range hospitals {
		a := s.accounts[h]
		// What the account has spent, and the worst cases other live
		// reservations hold against it, count as spent.
		held, heldDelta, heldPure := s.reserved(h, "", index, except)
		spentCurve, err := a.curve.Compose(held)
		if err != nil {
			return refuse(CodeBadCurve, h, "%v", err), false
		}
		spentDelta, spentPure := a.deltaSpent+heldDelta, addPure(a.pure, heldPure)
		conv := a.capDelta - (spentDelta + delta)
		if !(conv > 0) {
			return refuse(CodeDeltaExhausted, h, "hospital %s: additive δ %v + %v already charged or reserved leaves no δ of its cap %v for the conversion", h, delta, spentDelta, a.capDelta), false
		}
		after, err := spentCurve.Compose(curve)
		if err != nil {
			return refuse(CodeBadCurve, h, "%v", err), false
		}
		eps := min(epsilonAt(after, conv), addPure(spentPure, cost.admitPure))
		if eps > a.capEps {
			spent, charge := min(epsilonAt(spentCurve, conv), spentPure), min(epsilonAt(curve, conv), cost.admitPure)
			r := refuse(CodeCapExceeded, h, "hospital %s: spent and reserved ε=%.6g plus this batch's worst case ε=%.6g would reach ε=%.6g, over its cap ε=%v (at δ=%.3g)", h, spent, charge, eps, a.capEps, conv)
			r.SpentEpsilon, r.ChargeEpsilon, r.CapEpsilon = spent, charge, a.capEps
			return r, false
		}
		if r, ok := s.shareCheck(student, h, a, cost, index, except); !ok {
			return r, false
		}
	}
	return Result{}, true
}

// shareCheck refuses a cost that would take student's ε of hospital h
// (account a) past the genesis's share of h's cap: the student's charges
// against h and its other live reservations naming h, composed with the
// cost's worst case, converted at what h's cap δ leaves after the
// student's additive δ, as capCheck converts h's own. A genesis without a
// share (the whole cap) checks nothing beyond capCheck.
func (s *State) shareCheck(student, h string, a *account, cost derived, index uint64, except string) (Result, bool) {
	if s.share >= 1 {
		return Result{}, true
	}
	spentCurve, spentDelta, spentPure := s.grid.Zero(), 0.0, 0.0
	if u := s.used[usageKey(student, h)]; u != nil {
		spentCurve, spentDelta, spentPure = u.curve, u.deltaSpent, u.pure
	}
	held, heldDelta, heldPure := s.reserved(h, student, index, except)
	spentCurve, _ = spentCurve.Compose(held) // same grid
	spentDelta, spentPure = spentDelta+heldDelta, addPure(spentPure, heldPure)
	conv := a.capDelta - (spentDelta + cost.admitDelta)
	after, err := spentCurve.Compose(cost.admit)
	if err != nil {
		return refuse(CodeBadCurve, h, "%v", err), false
	}
	eps := math.Inf(1)
	if conv > 0 {
		eps = min(epsilonAt(after, conv), addPure(spentPure, cost.admitPure))
	}
	if limit := s.share * a.capEps; eps > limit {
		r := refuse(CodeShareExceeded, h, "student %s: its spent and reserved ε of hospital %s with this batch's worst case would reach ε=%.6g, over its share %v of the hospital's cap ε=%v (ε=%.6g, at δ=%.3g): the federation's genesis fixes the share; another student's batches are not held back",
			student, h, eps, s.share, a.capEps, limit, conv)
		r.CapEpsilon = a.capEps
		return r, false
	}
	return Result{}, true
}

// epsilonAt converts a curve at δ; a δ the conversion refuses gives +Inf.
// A zero curve is 0-DP at every δ: its ε is 0, not the small positive
// figure the conversion reports from the largest order of the grid.
func epsilonAt(c mechanism.Curve, delta float64) float64 {
	conv := convert(c, delta)
	return conv.Epsilon
}

func convert(c mechanism.Curve, delta float64) mechanism.Conversion {
	if c.IsZero() && delta > 0 && delta < 1 {
		return mechanism.Conversion{Epsilon: 0, Delta: delta}
	}
	conv, err := c.FilterEpsilon(delta)
	if err != nil {
		return mechanism.Conversion{Epsilon: math.Inf(1), Delta: delta}
	}
	return conv
}

// addPure adds two pure ε on the lattice: exact below 2^12, +Inf beyond.
func addPure(a, b float64) float64 { return latticeUp(a + b) }

// PureSum returns the pure ε an account reaches after n accepted charges
// of pure ε each, as the gate sums them (each charge, and each sum, rounded
// up to the lattice): what a student planning n sessions is held
// to, where it is below the accounts' converted curve.
func PureSum(n int, each float64) float64 {
	c, total := latticeUp(each), 0.0
	for range n {
		total = addPure(total, c)
	}
	return total
}

func (s *State) spend(student string, hospitals []string, cost derived, answers uint64) {
	for _, h := range hospitals {
		k := usageKey(student, h)
		u := s.used[k]
		if u == nil {
			u = &usage{curve: s.grid.Zero()}
			s.used[k] = u
		}
		u.curve, _ = u.curve.Compose(cost.charge) // same grid: checked in capCheck
		u.pure = addPure(u.pure, cost.chargePure)
		u.deltaSpent += cost.chargeDelta
		a := s.accounts[h]
		a.curve, _ = a.curve.Compose(cost.charge) // same grid: checked in capCheck
		a.pure = addPure(a.pure, cost.chargePure)
		a.deltaSpent += cost.chargeDelta
		a.charges++
		a.answers += answers
	}
}

// once enforces that an ID is charged once: the same signed content again is
// a duplicate of the accepted entry and charges nothing; other content under
// the same ID is a conflict. key is the ID in seen, id its name in messages.
func once(seen map[string]applied, what, key, id string, digest [32]byte) (Result, bool) {
	prev, ok := seen[key]
	switch {
	case !ok:
		return Result{}, false
	case prev.digest == digest:
		return Result{Outcome: Outcome{Status: StatusDuplicate, Original: prev.index},
			Message: fmt.Sprintf("%s %s was charged at entry %d; nothing charged again", what, id, prev.index)}, true
	}
	return refuse(CodeConflict, id, "%s %s was charged at entry %d with different content; use a new %s id", what, id, prev.index, what), true
}

func (s *State) charge(c Command, signer Party, b *Charge, index uint64) (Result, func()) {
	if signer.Role != RoleAggregator {
		return refuse(CodeWrongSigner, signer.ID, "only an aggregator charges, %s is a %s", signer.ID, signer.Role), nil
	}
	digest, _ := c.Digest()
	if r, seen := s.onceBatch(b, digest); seen {
		return r, nil
	}
	if b.Answers > b.Queries {
		return refuse(CodeBadCharge, b.BatchID, "batch %s: %d answers for %d queries", b.BatchID, b.Answers, b.Queries), nil
	}
	if r, ok := s.ensembleCheck(b, s.ensembleSet(b)); !ok {
		return r, nil
	}
	if r, ok := s.notSuspended(b.Hospitals); !ok {
		return r, nil
	}
	// Admission at the batch's worst case: every query answered.
	if r, ok := s.studentQuota(b.Student, b.Queries, index, b.key()); !ok {
		return r, nil
	}
	if b.Session != "" {
		return s.sessionCharge(signer, b, digest, index)
	}
	r, stated, ok := s.checkCost(b.Student, b.Hospitals, b.Curve, b.Delta)
	if !ok {
		return r, nil
	}
	cost, r, ok := deriveCharge(s.grid, s.costs, b, stated)
	if !ok {
		return r, nil
	}
	// A charge that settles within its batch's live reservation was
	// admitted when the reservation was: the worst case it held already
	// passed the gate with every other live reservation counted. Any
	// other charge passes the gate now, its own reservation left out.
	settled := ""
	if rv, ok := s.liveReservation(b.key(), index); ok && rv.within(b, cost) {
		settled = fmt.Sprintf(", within its reservation at entry %d", rv.index)
	} else if r, ok := s.capCheck(b.Student, b.Hospitals, cost, index, b.key()); !ok {
		return r, nil
	}
	return accept("charged batch %s (%d answers) to %d hospitals%s", b.BatchID, b.Answers, len(b.Hospitals), settled), func() {
		delete(s.reservations, b.key())
		s.spend(b.Student, b.Hospitals, cost, b.Answers)
		s.students[b.Student].answers += b.Answers
		s.recordBatch(b.key(), applied{digest: digest, index: index})
	}
}

// Ensemble is a hospital's registered ensemble (RegisterEnsemble).
type Ensemble struct {
	Hospital string `json:"hospital"`
	Teachers uint64 `json:"teachers"`
	Classes  uint64 `json:"classes"`
	Version  uint64 `json:"version"`
	Entry    uint64 `json:"entry"` // the entry that registered it
}

// Ensembles returns every hospital's registered ensemble, sorted by
// hospital ID.
func (s *State) Ensembles() []Ensemble {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Ensemble, 0, len(s.ensembles))
	for _, e := range s.ensembles {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Ensemble) int { return strings.Compare(a.Hospital, b.Hospital) })
	return out
}

func (s *State) registerEnsemble(signer Party, b *RegisterEnsemble, index uint64) (Result, func()) {
	if signer.Role != RoleAdmin {
		return refuse(CodeWrongSigner, signer.ID, "only an administrator registers ensembles, %s is a %s", signer.ID, signer.Role), nil
	}
	if p, ok := s.parties[b.Hospital]; !ok || p.Role != RoleHospital {
		return refuse(CodeUnknownHospital, b.Hospital, "%s is not a registered hospital; register the party first", b.Hospital), nil
	}
	if b.Teachers < 1 || b.Teachers > MaxTeachers || b.Classes < 2 || b.Classes > MaxClasses {
		return refuse(CodeBadEnsemble, b.Hospital, "ensemble of %s: %d teachers on %d classes; want 1 to %d teachers and 2 to %d classes", b.Hospital, b.Teachers, b.Classes, MaxTeachers, MaxClasses), nil
	}
	if s.classes != 0 && b.Classes != s.classes {
		return refuse(CodeBadEnsemble, b.Hospital, "ensemble of %s votes on %d classes, the federation's registrations on %d; every hospital votes on the federation's classes", b.Hospital, b.Classes, s.classes), nil
	}
	prev := s.ensembles[b.Hospital]
	if b.Version != prev.Version+1 {
		return refuse(CodeStaleEnsemble, b.Hospital, "ensemble registration version %d for %s, the next is %d; sign a new registration", b.Version, b.Hospital, prev.Version+1), nil
	}
	return accept("registered the ensemble of %s: %d teachers on %d classes (version %d)", b.Hospital, b.Teachers, b.Classes, b.Version), func() {
		s.ensembles[b.Hospital] = Ensemble{Hospital: b.Hospital, Teachers: b.Teachers, Classes: b.Classes, Version: b.Version, Entry: index}
		s.classes = b.Classes
	}
}

// Suspension is a hospital's last suspension or reinstatement (Suspend).
type Suspension struct {
	Hospital  string `json:"hospital"`
	Suspended bool   `json:"suspended"`
	Reason    string `json:"reason"`
	Version   uint64 `json:"version"`
	Signer    string `json:"signer"`
	Entry     uint64 `json:"entry"` // the entry that recorded it
}

// Suspensions returns every hospital's last suspension or reinstatement,
// sorted by hospital ID; those with Suspended set are suspended now.
func (s *State) Suspensions() []Suspension {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Suspension, 0, len(s.suspensions))
	for _, h := range sortedKeys(s.suspensions) {
		out = append(out, s.suspensions[h])
	}
	return out
}

func (s *State) suspend(signer Party, b *Suspend, index uint64) (Result, func()) {
	if signer.Role != RoleAdmin {
		return refuse(CodeWrongSigner, signer.ID, "only an administrator suspends or reinstates a hospital, %s is a %s", signer.ID, signer.Role), nil
	}
	if p, ok := s.parties[b.Hospital]; !ok || p.Role != RoleHospital {
		return refuse(CodeUnknownHospital, b.Hospital, "%s is not a registered hospital", b.Hospital), nil
	}
	prev := s.suspensions[b.Hospital]
	if b.Version != prev.Version+1 {
		return refuse(CodeStaleSuspension, b.Hospital, "suspension version %d for %s, the next is %d; sign a new command", b.Version, b.Hospital, prev.Version+1), nil
	}
	if b.Suspended == prev.Suspended {
		state := "not suspended"
		if prev.Suspended {
			state = "already suspended"
		}
		return refuse(CodeStaleSuspension, b.Hospital, "hospital %s is %s; nothing to change", b.Hospital, state), nil
	}
	verb := "reinstated"
	if b.Suspended {
		verb = "suspended"
	}
	return accept("%s hospital %s (version %d): %s", verb, b.Hospital, b.Version, b.Reason), func() {
		s.suspensions[b.Hospital] = Suspension{Hospital: b.Hospital, Suspended: b.Suspended, Reason: b.Reason, Version: b.Version, Signer: signer.ID, Entry: index}
	}
}

// notSuspended refuses a command naming a suspended hospital; the first
// such hospital in the given (sorted) order is named.
func (s *State) notSuspended(hospitals []string) (Result, bool) {
	for _, h := range hospitals {
		if sp := s.suspensions[h]; sp.Suspended {
			return refuse(CodeSuspended, h, "hospital %s was suspended by %s at entry %d (%s); nothing may be charged to it until an administrator reinstates it",
				h, sp.Signer, sp.Entry, sp.Reason), false
		}
	}
	return Result{}, true
}

// ensembleSet returns the hospitals whose registered ensembles a charge's
// parameters are the sum of: its own, or, in a session, the session's,
// since the session's mechanism counts every teacher of the hospitals that
// paid for it (those absent from the batch abstain).
func (s *State) ensembleSet(b *Charge) []string {
	if ss, ok := s.sessions[b.Session]; ok && b.Session != "" {
		return ss.hospitals
	}
	return b.Hospitals
}

// ensembleCheck holds a charge to the registered ensembles: a charge-v2
// states each hospital's registered size, and its parameters the sum of
// the sizes of set (ensembleSet) and the federation's classes; a charge
// without sizes may name only hospitals with no registration.
func (s *State) ensembleCheck(b *Charge, set []string) (Result, bool) {
	if len(b.Ensembles) == 0 {
		for _, h := range b.Hospitals {
			if e, ok := s.ensembles[h]; ok {
				return refuse(CodeEnsembleMismatch, h, "batch %s names hospital %s without its registered ensemble size (%d teachers); state each hospital's registered size", b.BatchID, h, e.Teachers), false
			}
		}
		return Result{}, true
	}
	if len(b.Ensembles) != len(b.Hospitals) {
		return refuse(CodeEnsembleMismatch, b.BatchID, "batch %s states %d ensemble sizes for %d hospitals", b.BatchID, len(b.Ensembles), len(b.Hospitals)), false
	}
	for i, h := range b.Hospitals {
		e, ok := s.ensembles[h]
		if !ok {
			return refuse(CodeEnsembleMismatch, h, "batch %s states %d teachers for hospital %s, which has no registered ensemble", b.BatchID, b.Ensembles[i], h), false
		}
		if e.Teachers != b.Ensembles[i] {
			return refuse(CodeEnsembleMismatch, h, "batch %s states %d teachers for hospital %s, registered with %d (entry %d)", b.BatchID, b.Ensembles[i], h, e.Teachers, e.Entry), false
		}
	}
	var sum uint64
	for _, h := range set {
		sum += s.ensembles[h].Teachers
	}
	whose := "its hospitals'"
	if b.Session != "" {
		whose = "the hospitals of session " + b.Session + " have"
	}
	if pc := s.costs.get(s.grid, b.Mechanism, b.Params); pc.err == nil && (uint64(pc.p.Teachers) != sum || uint64(pc.p.Classes) != s.classes) {
		return refuse(CodeEnsembleMismatch, b.BatchID, "batch %s's parameters say %d teachers on %d classes; %s registered ensembles are %d teachers on %d classes", b.BatchID, pc.p.Teachers, pc.p.Classes, whose, sum, s.classes), false
	}
	return Result{}, true
}

// studentQuota admits a batch of queries against the student's quota at
// its worst case, every query answered, so that the decision does not
// depend on how many were. The student's live reservations at index,
// except batch except's own, count as answered: each holds its queries
// until it is settled or expires, so batches reserved at once cannot
// together pass the quota, and a charge settling within its reservation
// always fits.
func (s *State) studentQuota(student string, queries, index uint64, except string) (Result, bool) {
	st, ok := s.students[student]
	if !ok {
		return refuse(CodeUnknownStudent, student, "%s is not a registered student", student), false
	}
	if st.maxAnswers == 0 {
		return Result{}, true
	}
	held := s.reservedAnswers(student, index, except)
	if queries > st.maxAnswers || st.answers > st.maxAnswers-queries || held > st.maxAnswers-queries-st.answers {
		return refuse(CodeQuotaExceeded, student, "student %s has %d of its %d answers and %d more held by live reservations; a batch of %d queries could exceed the quota",
			student, st.answers, st.maxAnswers, held, queries), false
	}
	return Result{}, true
}

func (s *State) sessionCharge(signer Party, b *Charge, digest [32]byte, index uint64) (Result, func()) {
	ss, ok := s.sessions[b.Session]
	if !ok {
		return refuse(CodeUnknownSession, b.Session, "session %s was never opened", b.Session), nil
	}
	if ss.closed {
		return refuse(CodeSessionClosed, b.Session, "session %s is closed; open a new session", b.Session), nil
	}
	if ss.aggregator != signer.ID {
		return refuse(CodeWrongSigner, signer.ID, "session %s belongs to aggregator %s, not %s", b.Session, ss.aggregator, signer.ID), nil
	}
	if ss.supersededBy != "" {
		return refuse(CodeSessionSuperseded, b.Session, "session %s was replaced by session %s of the same student and hospitals; charge the batch in the open session", b.Session, ss.supersededBy), nil
	}
	if ss.student != b.Student {
		return refuse(CodeSessionMismatch, b.Session, "batch %s is student %s's, session %s is student %s's; charge the batch in its student's session", b.BatchID, b.Student, b.Session, ss.student), nil
	}
	// A batch in a session names the hospitals that voted on it: any of
	// the session's, which all paid for it when it opened (the others'
	// teachers abstained), and no other, which did not.
	for _, h := range b.Hospitals {
		if !slices.Contains(ss.hospitals, h) {
			return refuse(CodeSessionMismatch, h, "batch %s names hospital %s, which is not one of session %s's (%s) and has not paid for it; charge the batch without its votes, or in a session it opened with", b.BatchID, h, b.Session, strings.Join(ss.hospitals, ", ")), nil
		}
	}
	if r, ok := sessionParams(b.BatchID, b.Mechanism, b.Params, ss.maxRefusals, true); !ok {
		return r, nil
	}
	if r, ok := sessionBound(b, ss.mechanism, ss.params); !ok {
		return r, nil
	}
	if len(b.Curve) != s.grid.Len() || slices.ContainsFunc(b.Curve, func(v float64) bool { return v != 0 }) || b.Delta != 0 {
		return refuse(CodeBadCharge, b.BatchID, "batch %s in session %s must carry a zero curve on the default grid and zero δ: the session paid its cost at opening", b.BatchID, b.Session), nil
	}
	refusals := b.Queries - b.Answers
	// A session stops at its K-th refusal: once it has refused K queries it
	// answers nothing more, not even a batch without refusals (its cost
	// covers no query after the K-th refusal).
	if ss.queries-ss.answers >= ss.maxRefusals || refusals > ss.maxRefusals-(ss.queries-ss.answers) {
		return refuse(CodeSessionExhausted, b.Session, "session %s has refused %d of at most %d queries; %d more would exceed its bound", b.Session, ss.queries-ss.answers, ss.maxRefusals, refusals), nil
	}
	return accept("recorded batch %s (%d answers) in session %s at no further cost", b.BatchID, b.Answers, b.Session), func() {
		delete(s.reservations, b.key()) // settled: its queries are answers or refusals now
		ss.queries += b.Queries
		ss.answers += b.Answers
		for _, h := range b.Hospitals {
			s.accounts[h].answers += b.Answers
		}
		s.students[b.Student].answers += b.Answers
		s.recordBatch(b.key(), applied{digest: digest, index: index})
	}
}

func (s *State) openSession(c Command, signer Party, b *OpenSession, index uint64) (Result, func()) {
	if signer.Role != RoleAggregator {
		return refuse(CodeWrongSigner, signer.ID, "only an aggregator opens sessions, %s is a %s", signer.ID, signer.Role), nil
	}
	digest, _ := c.Digest()
	if r, seen := once(s.opened, "session", b.SessionID, b.SessionID, digest); seen {
		return r, nil
	}
	if b.MaxRefusals == 0 {
		return refuse(CodeBadCharge, b.SessionID, "session %s has no refusal bound; a sparse-vector session stops after K ≥ 1 refusals", b.SessionID), nil
	}
	r, stated, ok := s.checkCost(b.Student, b.Hospitals, b.Curve, b.Delta)
	if !ok {
		return r, nil
	}
	cost, r, ok := deriveSession(s.grid, b, stated)
	if !ok {
		return r, nil
	}
	if r, ok := s.capCheck(b.Student, b.Hospitals, cost, index, ""); !ok {
		return r, nil
	}
	return accept("opened session %s, its whole cost charged to %d hospitals", b.SessionID, len(b.Hospitals)), func() {
		s.spend(b.Student, b.Hospitals, cost, 0)
		s.sessions[b.SessionID] = &session{aggregator: signer.ID, student: b.Student, hospitals: slices.Clone(b.Hospitals), maxRefusals: b.MaxRefusals,
			mechanism: b.Mechanism, params: slices.Clone(b.Params)}
		s.opened[b.SessionID] = applied{digest: digest, index: index}
		key := sessionKey(signer.ID, b.Student, b.Hospitals)
		if prev, ok := s.latest[key]; ok {
			s.sessions[prev].supersededBy = b.SessionID
		}
		s.latest[key] = b.SessionID
	}
}

func (s *State) closeSession(c Command, signer Party, b *CloseSession, index uint64) (Result, func()) {
	if signer.Role != RoleAggregator {
		return refuse(CodeWrongSigner, signer.ID, "only an aggregator closes sessions, %s is a %s", signer.ID, signer.Role), nil
	}
	ss, ok := s.sessions[b.SessionID]
	if !ok {
		return refuse(CodeUnknownSession, b.SessionID, "session %s was never opened", b.SessionID), nil
	}
	if ss.aggregator != signer.ID {
		return refuse(CodeWrongSigner, signer.ID, "session %s belongs to aggregator %s, not %s", b.SessionID, ss.aggregator, signer.ID), nil
	}
	digest, _ := c.Digest()
	if ss.closed {
		if ss.closeDigest == digest {
			return Result{Outcome: Outcome{Status: StatusDuplicate, Original: ss.closeIndex},
				Message: fmt.Sprintf("session %s was closed at entry %d", b.SessionID, ss.closeIndex)}, nil
		}
		return refuse(CodeSessionClosed, b.SessionID, "session %s is already closed", b.SessionID), nil
	}
	if b.Answers > b.Queries {
		return refuse(CodeBadCharge, b.SessionID, "session %s: %d answers for %d queries", b.SessionID, b.Answers, b.Queries), nil
	}
	return accept("closed session %s after %d queries, %d answered", b.SessionID, b.Queries, b.Answers), func() {
		ss.closed, ss.closeDigest, ss.closeIndex = true, digest, index
	}
}

// Origin returns the log's origin, set by the genesis ("" before it).
func (s *State) Origin() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.origin
}

// TreeSize returns the number of entries.
func (s *State) TreeSize() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.log.size()
}

// RootHash returns the RFC 6962 Merkle tree hash of all entries.
func (s *State) RootHash() tlog.Hash {
	s.mu.RLock()
	defer s.mu.RUnlock()
	h, _ := s.log.treeHash(s.log.size())
	return h
}

// Entries returns copies of the encoded entries with index in [from, to).
func (s *State) Entries(from, to int64) ([][]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if n := s.log.size(); from < 0 || to < from || to > n {
		return nil, fmt.Errorf("ledger: entries [%d, %d) out of range [0, %d)", from, to, n)
	}
	out := make([][]byte, 0, to-from)
	for i := from; i < to; i++ {
		e, err := s.log.h.Entry(i)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// Account is a hospital's budget account as read from the state.
type Account struct {
	Hospital   string  `json:"hospital"`
	CapEpsilon float64 `json:"cap_epsilon"`
	CapDelta   float64 `json:"cap_delta"`
	CapVersion uint64  `json:"cap_version"`
	// DeltaSpent is the additive δ charged so far; the conversion uses
	// CapDelta − DeltaSpent.
	DeltaSpent float64 `json:"delta_spent"`
	// Epsilon is the composed curve's ε at CapDelta − DeltaSpent (+Inf when
	// nothing is left of δ or the curve is unbounded).
	// It is the smaller of the filter conversion of the curve and the sum
	// of the charges' pure ε, when every charge had one.
	Epsilon float64   `json:"epsilon"`
	Order   float64   `json:"order"` // the order attaining Epsilon; 0 when the pure-ε sum is smaller
	Curve   []float64 `json:"curve"`
	// PureEpsilon is the sum of the charges' pure ε, +Inf once a charge
	// without one was composed: the second bound Epsilon takes the smaller of.
	PureEpsilon float64 `json:"-"`
	Charges     uint64  `json:"charges"` // accepted charges and sessions
	Answers     uint64  `json:"answers"`
	Opened      uint64  `json:"opened"` // the entry that opened the account
	// FederationDelta is the federation's δ bound (Genesis.Bounds), and
	// EpsilonAtFederationDelta the account's ε converted at it (less the
	// δ spent): the figure every account states at the same δ, whatever
	// δ its cap names.
	FederationDelta          float64 `json:"federation_delta"`
	EpsilonAtFederationDelta float64 `json:"epsilon_at_federation_delta"`
	// CapChanges is every change of the cap after opening, oldest first.
	CapChanges []CapChange `json:"cap_changes,omitempty"`
	// Suspended is set while an administrator's suspension holds
	// (Suspend): the account refuses every charge, reservation and
	// session. SuspendedReason is the suspension's reason and
	// SuspendedAt its entry.
	Suspended       bool   `json:"suspended,omitempty"`
	SuspendedReason string `json:"suspended_reason,omitempty"`
	SuspendedAt     uint64 `json:"suspended_at,omitempty"`
}

// CapChange is one accepted change of a hospital's cap: who signed it, at
// which entry and time, from which cap to which, and whether it raised
// the cap (a larger ε or a larger δ).
type CapChange struct {
	Entry       uint64  `json:"entry"`
	Timestamp   int64   `json:"timestamp"` // the proposer's, unix nanoseconds
	Version     uint64  `json:"version"`
	Signer      string  `json:"signer"`
	FromEpsilon float64 `json:"from_epsilon"`
	FromDelta   float64 `json:"from_delta"`
	ToEpsilon   float64 `json:"to_epsilon"`
	ToDelta     float64 `json:"to_delta"`
	Raise       bool    `json:"raise"`
}

// Accounts returns every hospital account, sorted by hospital ID.
func (s *State) Accounts() []Account {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Account, 0, len(s.accounts))
	for _, h := range sortedKeys(s.accounts) {
		out = append(out, s.accountOf(h))
	}
	return out
}

// Account returns one hospital's account.
func (s *State) Account(hospital string) (Account, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if _, ok := s.accounts[hospital]; !ok {
		return Account{}, false
	}
	return s.accountOf(hospital), true
}

// StudentQuota is a registered student's answer quota and its use.
type StudentQuota struct {
	MaxAnswers uint64 // 0: no quota
	Answers    uint64
}

// Student returns a registered student's quota; false when the student is
// not registered.
func (s *State) Student(id string) (StudentQuota, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, ok := s.students[id]
	if !ok {
		return StudentQuota{}, false
	}
	return StudentQuota{MaxAnswers: st.maxAnswers, Answers: st.answers}, true
}

func (s *State) accountOf(h string) Account {
	a := s.accounts[h]
	acc := Account{Hospital: h, CapEpsilon: a.capEps, CapDelta: a.capDelta, CapVersion: a.capVersion,
		DeltaSpent: a.deltaSpent, Epsilon: math.Inf(1), Curve: a.curve.Values(),
		Charges: a.charges, Answers: a.answers, Opened: a.opened, PureEpsilon: a.pure,
		FederationDelta: s.deltaBound, EpsilonAtFederationDelta: math.Inf(1), CapChanges: slices.Clone(a.capChanges)}
	if sp := s.suspensions[h]; sp.Suspended {
		acc.Suspended, acc.SuspendedReason, acc.SuspendedAt = true, sp.Reason, sp.Entry
	}
	if d := a.conversionDelta(); d > 0 {
		conv := convert(a.curve, d)
		acc.Epsilon, acc.Order = conv.Epsilon, conv.Order
		if a.pure < acc.Epsilon {
			acc.Epsilon, acc.Order = a.pure, 0
		}
	}
	if d := s.deltaBound - a.deltaSpent; d > 0 {
		acc.EpsilonAtFederationDelta = min(convert(a.curve, d).Epsilon, a.pure)
	}
	return acc
}

// Parties returns the registered parties, sorted by ID.
func (s *State) Parties() []Party {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Party, 0, len(s.parties))
	for _, id := range sortedKeys(s.parties) {
		out = append(out, s.parties[id])
	}
	return out
}

// Auditors returns the auditors registered by the first size entries,
// sorted by ID: the key set whose majority must sign a checkpoint of that
// size.
func (s *State) Auditors(size int64) []Party {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []Party
	for _, id := range sortedKeys(s.parties) {
		if p := s.parties[id]; p.Role == RoleAuditor && int64(s.joined[id]) < size {
			out = append(out, p)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// fail records the first error of the history under a decision.
func (s *State) fail(err error) {
	s.failed.CompareAndSwap(nil, &err)
}

// chargedBatch returns the entry that charged batch key and the digest of
// its command: from memory, or from the history's KeyIndex, which holds
// the entry's index only (the digest is the entry's command's).
func (s *State) chargedBatch(key string) (applied, bool) {
	if a, ok := s.batches[key]; ok {
		return a, true
	}
	ki := s.keyIndex()
	if ki == nil {
		return applied{}, false
	}
	i, ok, err := ki.GetKey(key)
	if err == nil && ok {
		var b []byte
		if b, err = s.log.h.Entry(i); err == nil {
			var en Entry
			if en, err = DecodeEntry(b); err == nil {
				var c Command
				if c, err = DecodeCommand(en.Command); err == nil {
					d, _ := c.Digest()
					return applied{digest: d, index: uint64(i)}, true
				}
			}
		}
	}
	if err != nil {
		s.fail(fmt.Errorf("ledger: looking up batch %q in the history: %w", key, err))
	}
	return applied{}, false
}

// recordBatch notes that the entry a charged batch key: in the history's
// KeyIndex when it keeps one, in memory otherwise.
func (s *State) recordBatch(key string, a applied) {
	ki := s.keyIndex()
	if ki == nil {
		s.batches[key] = a
		return
	}
	if err := ki.PutKey(key, int64(a.index)); err != nil {
		s.fail(fmt.Errorf("ledger: recording batch %q in the history: %w", key, err))
	}
}

// onceBatch is once for a charge's batch.
func (s *State) onceBatch(b *Charge, digest [32]byte) (Result, bool) {
	prev, ok := s.chargedBatch(b.key())
	if !ok {
		return Result{}, false
	}
	return once(map[string]applied{b.key(): prev}, "batch", b.key(), b.BatchID, digest)
}
