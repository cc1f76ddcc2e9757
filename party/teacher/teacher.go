// Package teacher is a hospital's node. It trains teachers on disjoint
// shards of the hospital's own data, dials the aggregator (a hospital never
// listens on a port), registers its teachers, opens its privacy-budget
// account in the ledger with a command only it can sign, and answers query
// batches with one vote histogram per query, sealed to the aggregator.
package teacher

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/internal/backoff"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// Voter is a hospital's ensemble: *Ensemble, or anything that votes.
type Voter interface {
	Teachers() int
	Classes() int
	Dim() int
	// Votes returns, for each query (rows of Dim values), how many teachers
	// voted for each class.
	Votes(ctx context.Context, x []float32) ([][]int, error)
}

// Config is what a teacher node needs.
type Config struct {
	ID         string
	Aggregator string // host:port
	Net        quicnet.Config
	Identity   *crypto.Identity   // opens query features
	SigningKey ed25519.PrivateKey // signs the hospital's ledger account commands
	// CapEpsilon and CapDelta are the hospital's privacy cap, set when its
	// account is opened. Zero CapEpsilon opens no account.
	CapEpsilon, CapDelta float64
	// Registration, when set, is what nzc init add-hospital wrote for a
	// hospital provisioned after the genesis: the administrator-signed
	// command that registers it in the ledger, or a JSON list of commands
	// (that one, then the registration of its ensemble). They are relayed
	// before the Hello, which the aggregator checks against the ledger's
	// ensemble registration, and again before the account is opened.
	Registration []byte
	// Genesis, when set and Registration is not, is the federation's
	// genesis file (a JSON list of commands, as nzc init writes it), whose
	// first command, the administrator-signed genesis, registers this
	// hospital. It is sent in the Hello as the hospital's registration, so
	// that students holding the administrator's key verify its recipient.
	// It is never relayed: the ledger began with it.
	Genesis []byte
	Voter   Voter
	// AuditorKeys are the auditors' note verifier keys, pinned: with them
	// the hospital checks the receipt of every charge made for its votes,
	// and stops voting when ProofLag batches it voted on are unproven
	// (DefaultProofLag when 0). Without them it checks nothing.
	AuditorKeys []string
	ProofLag    int
	// State is the directory where the hospital keeps its record of the
	// batches it voted on (VoteRecordFile), so that a restart forgets no
	// unproven vote. Empty keeps the record in memory only.
	State   string
	Backoff quicnet.Backoff
	Now     func() time.Time
	Logger  *slog.Logger
	// Pause, when set, is called at PauseVotesSealed. Fault tests use it to
	// stop a hospital in the middle of a batch and kill it there;
	// production leaves it nil.
	Pause func(ctx context.Context, point string)
}

// PauseVotesSealed is the point, for Config.Pause, where a hospital has
// sealed its votes on a query batch but not yet sent them.
const PauseVotesSealed = "votes-sealed"

// Node is a running hospital.
type Node struct {
	cfg Config
	log *slog.Logger
	// registrations are the commands of Config.Registration.
	registrations [][]byte
	// proof is the registration sent in the Hello: the first of
	// registrations, or the genesis that registers this hospital.
	proof     []byte
	connected atomic.Bool
	// stanza is the index of this hospital's stanza in the last batch it
	// opened: a student seals every batch to the same hospitals in the
	// same order, so the next batch's is tried first.
	stanza   atomic.Int64
	answered atomic.Int64
	status   atomic.Pointer[string]
	// voting serialises the teachers' inference: models are not safe for
	// concurrent use, and one batch's inference already uses every core.
	// Batches asked at once (several students, or one student's window)
	// still overlap their decryption, transfer and ledger commit.
	voting sync.Mutex
	spend  *spending
}

// New checks cfg.
func New(cfg Config) (*Node, error) {
	switch {
	case cfg.ID == "":
		return nil, errors.New("teacher: no hospital id configured")
	case cfg.Aggregator == "":
		return nil, errors.New("teacher: no aggregator address configured")
	case cfg.Identity == nil:
		return nil, errors.New("teacher: no age identity configured: it opens query features")
	case cfg.Voter == nil:
		return nil, errors.New("teacher: no trained teachers: run `nzc-teacher train` first")
	case cfg.CapEpsilon != 0 && len(cfg.SigningKey) != ed25519.PrivateKeySize:
		return nil, errors.New("teacher: opening the budget account needs the hospital's signing key")
	case cfg.ProofLag < 0:
		return nil, fmt.Errorf("teacher: proof lag %d: give the number of batches (≥ 1) voted on without a proof of their charge before the hospital stops voting, or 0 for %d", cfg.ProofLag, DefaultProofLag)
	}
	var receipts *ledger.Verifier
	if len(cfg.AuditorKeys) > 0 {
		var err error
		if receipts, err = ledger.NewVerifier(cfg.AuditorKeys); err != nil {
			return nil, fmt.Errorf("teacher: auditor keys: %w", err)
		}
	}
	var (
		regs  [][]byte
		proof []byte
	)
	switch {
	case len(cfg.Registration) > 0:
		var err error
		if regs, err = checkRegistration(cfg.Registration, cfg.ID, cfg.SigningKey); err != nil {
			return nil, err
		}
		proof = regs[0]
	case len(cfg.Genesis) > 0:
		var err error
		if proof, err = GenesisRegistration(cfg.Genesis, cfg.ID, cfg.SigningKey); err != nil {
			return nil, err
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	record := ""
	if cfg.State != "" && len(cfg.AuditorKeys) > 0 {
		if err := os.MkdirAll(cfg.State, 0o700); err != nil {
			return nil, fmt.Errorf("teacher: state directory: %w", err)
		}
		record = filepath.Join(cfg.State, VoteRecordFile)
	}
	spend, err := newSpending(cfg.ID, receipts, cfg.ProofLag, log, record)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: log, registrations: regs, proof: proof, spend: spend}
	switch {
	case len(cfg.AuditorKeys) == 0:
		log.Warn("no auditor keys configured: this hospital does not check that its votes are charged to it")
	case record == "":
		log.Warn("no state directory configured: a restart forgets the votes whose charges this hospital has not seen proven")
	}
	s := "connecting to the aggregator at " + cfg.Aggregator
	n.status.Store(&s)
	return n, nil
}

// ErrBadRegistration is matched when the configured registration is not a
// ledger registration of this hospital with its own signing key.
var ErrBadRegistration = errors.New("teacher: the registration is not this hospital's")

// checkRegistration checks, before anything is relayed, that reg is the
// registration of hospital id with the public half of key (when set),
// alone or followed by registrations of its ensemble, and returns the
// commands. The administrator's signature is the ledger's to check.
func checkRegistration(reg []byte, id string, key ed25519.PrivateKey) ([][]byte, error) {
	cmds, err := Registrations(reg)
	if err != nil {
		return nil, fmt.Errorf("%w: %v; use the file `nzc init add-hospital` wrote for this hospital", ErrBadRegistration, err)
	}
	for i, b := range cmds {
		c, err := ledger.DecodeCommand(b)
		if err != nil {
			return nil, fmt.Errorf("%w: it is not a ledger command (%v); use the file `nzc init add-hospital` wrote for this hospital", ErrBadRegistration, err)
		}
		switch b := c.Body.(type) {
		case *ledger.RegisterParty:
			switch {
			case i != 0:
				return nil, fmt.Errorf("%w: it holds a second party registration; use the file `nzc init add-hospital` wrote for this hospital", ErrBadRegistration)
			case b.Party.ID != id || b.Party.Role != ledger.RoleHospital:
				return nil, fmt.Errorf("%w: it registers %s %s, not hospital %s; use the file `nzc init add-hospital` wrote for this hospital", ErrBadRegistration, b.Party.Role, b.Party.ID, id)
			case len(key) == ed25519.PrivateKeySize && !b.Party.PublicKey.Equal(key.Public()):
				return nil, fmt.Errorf("%w: it registers another signing key than this hospital's; use the registration made with its keys", ErrBadRegistration)
			}
		case *ledger.RegisterEnsemble:
			if i == 0 || b.Hospital != id {
				return nil, fmt.Errorf("%w: it registers the ensemble of %s where hospital %s's registration should come first; use the file `nzc init add-hospital` wrote for this hospital", ErrBadRegistration, b.Hospital, id)
			}
		default:
			return nil, fmt.Errorf("%w: it is a %s command, not a registration; use the file `nzc init add-hospital` wrote for this hospital", ErrBadRegistration, c.Body.Kind())
		}
	}
	return cmds, nil
}

// GenesisRegistration returns the genesis command of a genesis file (a
// JSON list of commands, the genesis first, as nzc init writes it) when it
// registers hospital id, with the public half of key when set: what a
// founding hospital sends students as its registration. The
// administrator's signature is the students' to check.
func GenesisRegistration(file []byte, id string, key ed25519.PrivateKey) ([]byte, error) {
	const fix = "use the genesis.json of this hospital's federation, or leave genesis unset (students then seal to this hospital only when it is listed under their hospitals)"
	if len(file) == 0 || file[0] != '[' {
		return nil, fmt.Errorf("%w: the genesis file is not a JSON list of ledger commands; %s", ErrBadRegistration, fix)
	}
	cmds, err := Registrations(file)
	if err != nil {
		return nil, fmt.Errorf("%w: the genesis file: %v; %s", ErrBadRegistration, err, fix)
	}
	c, err := ledger.DecodeCommand(cmds[0])
	if err != nil {
		return nil, fmt.Errorf("%w: the genesis file's first command: %v; %s", ErrBadRegistration, err, fix)
	}
	g, ok := c.Body.(*ledger.Genesis)
	if !ok {
		return nil, fmt.Errorf("%w: the genesis file's first command is a %s, not a genesis; %s", ErrBadRegistration, c.Body.Kind(), fix)
	}
	i := slices.IndexFunc(g.Parties, func(p ledger.Party) bool { return p.ID == id && p.Role == ledger.RoleHospital })
	switch {
	case i < 0:
		return nil, fmt.Errorf("%w: the genesis does not register hospital %s; a hospital admitted later configures the registration `nzc init add-hospital` wrote for it instead", ErrBadRegistration, id)
	case len(key) == ed25519.PrivateKeySize && !g.Parties[i].PublicKey.Equal(key.Public()):
		return nil, fmt.Errorf("%w: the genesis registers another signing key for hospital %s than this hospital's; %s", ErrBadRegistration, id, fix)
	case len(cmds[0]) > protocol.MaxRegistration:
		return nil, fmt.Errorf("%w: the genesis is %d bytes, more than the %d a Hello carries; leave genesis unset and list this hospital under the students' hospitals", ErrBadRegistration, len(cmds[0]), protocol.MaxRegistration)
	}
	return cmds[0], nil
}

// Registrations splits what nzc init add-hospital writes for a hospital
// added after the genesis: one ledger command, or a JSON list of them (the
// hospital's registration, then its ensemble's). A ledger command starts
// with its version byte, never with '['.
func Registrations(b []byte) ([][]byte, error) {
	if len(b) == 0 || b[0] != '[' {
		return [][]byte{b}, nil
	}
	var cmds [][]byte
	if err := json.Unmarshal(b, &cmds); err != nil || len(cmds) == 0 {
		return nil, fmt.Errorf("it is not a ledger command nor a list of them (%v)", err)
	}
	return cmds, nil
}

// relayRegistrations relays the hospital's registrations through the
// aggregator; a refusal (an earlier run registered it already) is logged.
func (n *Node) relayRegistrations(ctx context.Context, c *quicnet.Conn) error {
	for _, cmd := range n.registrations {
		var res nzcpb.LedgerResult
		if err := c.Invoke(ctx, &nzcpb.LedgerSubmit{Command: cmd}, &res); err != nil {
			return fmt.Errorf("relaying this hospital's registration: %w", err)
		}
		n.log.Info("relayed this hospital's registration", "code", res.GetCode().String(), "reason", res.GetReason())
	}
	return nil
}

// Ready reports whether the hospital is registered with the aggregator.
func (n *Node) Ready() (bool, string) { return n.connected.Load(), *n.status.Load() }

// Answered is the number of query batches answered so far.
func (n *Node) Answered() int64 { return n.answered.Load() }

// Spending is the hospital's record of the batches it voted on, matched
// against the charges it has seen proven.
func (n *Node) Spending() Spending { return n.spend.status() }

// Run keeps the hospital connected to the aggregator until ctx ends,
// reconnecting with backoff. It returns at once when either side refuses
// the other's certificate.
func (n *Node) Run(ctx context.Context) error {
	t := quicnet.Target{Name: "aggregator", Addr: n.cfg.Aggregator, Role: crypto.RoleAggregator}
	err := quicnet.KeepConnected(ctx, n.cfg.Net, t, n.cfg.Backoff, n.session)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (n *Node) setStatus(s string) { n.status.Store(&s) }

func (n *Node) session(ctx context.Context, c *quicnet.Conn) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var aggRecipient atomic.Pointer[crypto.Recipient]
	mux := quicnet.Mux{protocol.TypeQueryBatch: {Roles: []crypto.Role{crypto.RoleAggregator},
		Handle: func(ctx context.Context, r *quicnet.Request) (protocol.MsgType, []byte, error) {
			rc := aggRecipient.Load()
			if rc == nil {
				return 0, nil, protocol.Errorf(protocol.CodeUnavailable, "hospital %s is still registering", n.cfg.ID)
			}
			var q nzcpb.QueryBatch
			if err := r.Decode(&q); err != nil {
				return 0, nil, err
			}
			n.spend.accept(q.GetChargeReceipts())
			vb, err := n.answer(ctx, &q, rc)
			if err != nil {
				return 0, nil, err
			}
			if n.cfg.Pause != nil {
				n.cfg.Pause(ctx, PauseVotesSealed)
			}
			return quicnet.Reply(vb)
		}}}
	served := make(chan error, 1)
	go func() { served <- c.Serve(ctx, mux) }()

	// A hospital added after the genesis is registered (its ensemble too)
	// before its Hello, which the aggregator checks against the ledger.
	registered := true
	if len(n.registrations) > 0 {
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		if err := n.relayRegistrations(rctx, c); err != nil {
			registered = false
			n.log.Warn("could not relay this hospital's registration before registering with the aggregator", "err", err)
		}
		rcancel()
	}
	hello := &nzcpb.Hello{ProtocolVersion: protocol.ProtocolVersion, Role: nzcpb.Role_ROLE_HOSPITAL, PartyId: n.cfg.ID,
		AgeRecipient: n.cfg.Identity.Recipient().String(), Software: "nzc-teacher",
		Hospital: &nzcpb.HospitalInfo{NumTeachers: uint32(n.cfg.Voter.Teachers()), NumClasses: uint32(n.cfg.Voter.Classes())}}
	if len(n.cfg.SigningKey) == ed25519.PrivateKeySize {
		// Students seal features to this recipient only with this
		// signature by the hospital's registered ledger key, checked
		// against its administrator-signed registration.
		hello.RecipientSignature = ed25519.Sign(n.cfg.SigningKey, protocol.RecipientMessage(n.cfg.ID, hello.AgeRecipient))
		hello.Registration = n.proof
	}
	var ack nzcpb.Ack
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	err := c.Invoke(rctx, hello, &ack)
	rcancel()
	if err != nil {
		err = fmt.Errorf("register with the aggregator: %w", err)
		if refusedConfiguration(err, registered) {
			// Reconnecting sends the same Hello: stop, and say why.
			return quicnet.Stop(fmt.Errorf("%w: %w", ErrRefused, err))
		}
		return err
	}
	rc, err := crypto.ParseRecipient(ack.GetAgeRecipient())
	if err != nil {
		return fmt.Errorf("the aggregator's age recipient: %w", err)
	}
	aggRecipient.Store(rc)
	n.connected.Store(true)
	defer n.connected.Store(false)
	n.setStatus("registered with the aggregator: " + ack.GetMessage())
	n.log.Info("registered with the aggregator", "teachers", n.cfg.Voter.Teachers(), "aggregator", ack.GetMessage())
	go n.keepOpeningAccount(ctx, c)
	select {
	case err := <-served:
		n.setStatus("disconnected from the aggregator; reconnecting")
		return err
	case <-ctx.Done():
		return nil
	}
}

// ErrRefused reports that the aggregator refused this hospital's
// configuration (its ensemble, its classes, its identity) against the
// federation's registrations: the hospital stops instead of reconnecting.
var ErrRefused = errors.New("the aggregator refuses this hospital's configuration; fix it (or have the registration changed) and start the hospital again")

// refusedConfiguration tells whether the aggregator's refusal of a Hello
// is one the same configuration meets again: a bad request (the ensemble
// or classes differ from the registration), or, once the hospital's own
// registration (if any) reached the ledger, an unauthorized one (no
// registration at all, or a Hello naming another party).
func refusedConfiguration(err error, registered bool) bool {
	return errors.Is(err, protocol.CodeBadRequest.Sentinel()) ||
		(registered && errors.Is(err, protocol.CodeUnauthorized.Sentinel()))
}

// keepOpeningAccount tries to open the account until it is open (the
// ledger may not have its genesis yet when the hospital first connects).
func (n *Node) keepOpeningAccount(ctx context.Context, c *quicnet.Conn) {
	for attempt := 1; ; attempt++ {
		err := n.openAccount(ctx, c)
		if err == nil || ctx.Err() != nil {
			return
		}
		wait := backoff.Ceiling(attempt, 500*time.Millisecond, 15*time.Second)
		n.log.Warn("could not open the budget account yet; charges to this hospital are refused until it is open", "err", err, "retry_in", wait)
		if backoff.Wait(ctx, wait) != nil {
			return
		}
	}
}

// openAccount opens the hospital's ledger account with its cap, unless the
// ledger already has one.
func (n *Node) openAccount(ctx context.Context, c *quicnet.Conn) error {
	if n.cfg.CapEpsilon == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var budget nzcpb.BudgetResponse
	if err := c.Invoke(ctx, &nzcpb.BudgetRequest{HospitalIds: []string{n.cfg.ID}}, &budget); err != nil {
		return err
	}
	if len(budget.GetBudgets()) > 0 {
		b := budget.GetBudgets()[0]
		n.log.Info("budget account open", "cap_epsilon", b.GetEpsilonCap(), "epsilon_spent", b.GetEpsilonSpent())
		return nil
	}
	// Opening the account below says whether the ledger knows this
	// hospital.
	if err := n.relayRegistrations(ctx, c); err != nil {
		return err
	}
	cmd, err := ledger.Sign(&ledger.OpenAccount{Hospital: n.cfg.ID, CapEpsilon: n.cfg.CapEpsilon, CapDelta: n.cfg.CapDelta,
		Timestamp: n.cfg.Now().UnixNano()}, n.cfg.ID, n.cfg.SigningKey)
	if err != nil {
		return err
	}
	var res nzcpb.LedgerResult
	if err := c.Invoke(ctx, &nzcpb.LedgerSubmit{Command: cmd}, &res); err != nil {
		return err
	}
	if res.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED && res.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_DUPLICATE {
		return fmt.Errorf("the ledger refused to open the account: %s", res.GetReason())
	}
	n.log.Info("opened the budget account", "cap_epsilon", n.cfg.CapEpsilon, "cap_delta", n.cfg.CapDelta, "ledger_index", res.GetIndex())
	return nil
}

// answer computes the hospital's votes on a query batch.
func (n *Node) answer(ctx context.Context, q *nzcpb.QueryBatch, to *crypto.Recipient) (*nzcpb.VoteBatch, error) {
	deadline := time.UnixMilli(q.GetDeadlineUnixMs())
	if !n.cfg.Now().Before(deadline) {
		return nil, protocol.Errorf(protocol.CodeBadRequest, "the batch's deadline %s has passed", deadline.UTC().Format(time.RFC3339))
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	v := n.cfg.Voter
	if int(q.GetNumClasses()) != v.Classes() {
		return nil, protocol.Errorf(protocol.CodeBadRequest, "the batch asks for %d classes, these teachers vote on %d", q.GetNumClasses(), v.Classes())
	}
	plain, at, err := crypto.OpenFrom(q.GetSealedFeatures(), n.cfg.Identity, int(n.stanza.Load()))
	if err == nil {
		n.stanza.Store(int64(at))
	}
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeBadRequest, "the query features are not sealed to hospital %s: %v", n.cfg.ID, err)
	}
	var f nzcpb.Features
	if err := protocol.DecodePlain(plain, &f); err != nil {
		return nil, protocol.Errorf(protocol.CodeBadRequest, "features: %v", err)
	}
	if f.GetNumQueries() != q.GetNumQueries() || int(f.GetFeatureDim()) != v.Dim() {
		return nil, protocol.Errorf(protocol.CodeBadRequest, "features hold %d queries of %d values; the batch says %d, these teachers take %d",
			f.GetNumQueries(), f.GetFeatureDim(), q.GetNumQueries(), v.Dim())
	}
	if q.GetStudentId() == "" {
		return nil, protocol.Errorf(protocol.CodeBadRequest, "the batch names no student: hospital %s binds each batch to the student it is charged to", n.cfg.ID)
	}
	bound := binding{queries: queryDigest(&f), student: q.GetStudentId(), count: q.GetNumQueries()}
	if err := n.spend.allow(q.GetBatchId(), bound); err != nil {
		n.log.Warn("not voting", "err", err)
		return nil, err
	}
	n.voting.Lock()
	hist, err := v.Votes(ctx, f.GetValues())
	n.voting.Unlock()
	if err != nil {
		return nil, fmt.Errorf("teachers' votes: %w", err)
	}
	nq, nc := int(q.GetNumQueries()), v.Classes()
	if len(hist) != nq {
		return nil, fmt.Errorf("teachers voted on %d queries of %d", len(hist), nq)
	}
	counts := make([]uint32, 0, nq*nc)
	for _, row := range hist {
		for _, c := range row {
			counts = append(counts, uint32(c))
		}
	}
	hb, err := protocol.Marshal(&nzcpb.Histograms{NumQueries: uint32(nq), NumClasses: uint32(nc), NumTeachers: uint32(v.Teachers()), Counts: counts})
	if err != nil {
		return nil, err
	}
	sealed, err := crypto.Seal(hb, to)
	if err != nil {
		return nil, err
	}
	if err := n.spend.record(q.GetBatchId(), bound, n.cfg.Now()); err != nil {
		n.log.Error("not voting", "err", err)
		return nil, err
	}
	n.answered.Add(1)
	n.log.Debug("answered a query batch", "queries", nq)
	return &nzcpb.VoteBatch{BatchId: q.GetBatchId(), HospitalId: n.cfg.ID, NumQueries: q.GetNumQueries(),
		NumClasses: q.GetNumClasses(), SealedHistograms: sealed}, nil
}
