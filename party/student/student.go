// Package student is the student's node: it sends its unlabelled data to
// the aggregator in batches, receives labels (or refusals) once the ledger
// has committed their charge, and trains and evaluates its model on them.
//
// Labelling is resumable: batch ids are derived from the student id, the
// data set's hash, the batch size and the batch index, and every labelled
// batch is recorded in the state directory, so an interrupted run continues
// where it stopped — and a batch whose answer was lost is asked again under
// the same id, which the aggregator answers from its outbox without a new
// charge.
package student

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/internal/backoff"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/selection"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// Config is what a student needs.
type Config struct {
	ID         string
	Aggregator string
	Net        quicnet.Config
	Identity   *crypto.Identity // opens released labels
	// Hospitals are the age recipients query features are always sealed
	// to (pinned).
	Hospitals []*crypto.Recipient
	// AdminKey, when set, is the federation administrator's ledger key:
	// features are also sealed to the hospitals the aggregator passes
	// whose age recipient is signed by the key the administrator
	// registered for them, so a hospital admitted later is asked from the
	// next batch on. A recipient whose signature does not verify stops
	// the run with a *RecipientError naming the hospital.
	AdminKey ed25519.PublicKey
	// AuditorKeys are the auditors' checkpoint verifier keys
	// (ledger.VerifierKey): labels are accepted only with a receipt of their
	// charge whose checkpoint a majority of them signed. Required.
	AuditorKeys []string
	BatchSize   int
	// StateDir records labelled batches, for resumable runs.
	StateDir string
	// Attempts bounds how often one batch is asked when the answer is a
	// retryable refusal (quorum, ledger unavailable) or the connection is
	// lost; 0 means 10, which with retryWait's backoff spans about a
	// minute.
	Attempts int
	// Window is how many batches are asked at once: with 2, the hospitals
	// vote on the next batch while the previous one's charge is being
	// committed. Answers are recorded and reported in batch order. 0 means 1.
	Window int
	// Selection is the order in which the queries are asked (empty or
	// sequential: the data's own order). It is computed from the student's
	// own features only, so it costs no privacy; with an nzc-svt
	// aggregator, typical asks first about the queries the teachers are
	// likely to agree on, which the session answers without ending.
	Selection selection.Config
	// Bootstrap, when positive, asks in the Selection order only until
	// this many queries are answered, then asks the rest in the order Rank
	// gives from the labels released so far: a student trained on them
	// asks next about what it is sure of, which an nzc-svt session answers
	// without spending its refusals. Post-processing of released labels:
	// no privacy cost.
	Bootstrap int
	// Rank orders the queries of d not asked yet (asked[i] false), given
	// the labels released so far (−1 where none). Required with Bootstrap;
	// it may return fewer queries than are left (those are not asked).
	Rank func(ctx context.Context, d *data.Dataset, labels []int, asked []bool) ([]int, error)
	// MaxQueries, when positive, is the most queries asked in all: the
	// first MaxQueries of the order (with Bootstrap: of the first order,
	// then of the ranked rest, together). The rest of the data is the
	// student's unlabelled pool (PlanQueries gives the count a budget
	// allows).
	MaxQueries int
	// Deadline, when positive, bounds a whole Label run: when it passes,
	// Label returns the labels so far and a *DeadlineError naming what
	// the batch being asked was waiting for.
	Deadline time.Duration
	// Fallback, when set, plans the run within a cap from what is
	// released: the student asks in its session until the session has
	// used its refusals, then, when the aggregator offers a per-query
	// fallback, asks as many of the queries it has not asked as the rest
	// of the cap buys under it (fallback.go). Nil: every batch asks the
	// aggregator's mechanism.
	Fallback *FallbackConfig
	Backoff  quicnet.Backoff
	Logger   *slog.Logger
}

// Client labels data through the aggregator.
type Client struct {
	cfg Config
	log *slog.Logger
	// receipts checks the receipts of charges against the pinned auditor
	// keys.
	receipts *ledger.Verifier
	// dir holds the recipients features are sealed to.
	dir *directory

	mu sync.Mutex
	// offer is the per-query fallback the aggregator's last Ack offered
	// (its Mechanism empty: none).
	offer mechanism.Params
}

// New checks cfg.
func New(cfg Config) (*Client, error) {
	switch {
	case cfg.ID == "":
		return nil, errors.New("student: no student id configured")
	case cfg.Identity == nil:
		return nil, errors.New("student: no age identity configured: it opens the labels")
	case len(cfg.Hospitals) == 0 && cfg.AdminKey == nil:
		return nil, errors.New("student: no hospital age recipients and no administrator key configured: query features are sealed to the hospitals configured or to those whose registration the administrator's key verifies")
	case cfg.AdminKey != nil && len(cfg.AdminKey) != ed25519.PublicKeySize:
		return nil, fmt.Errorf("student: the administrator key has %d bytes, want %d (ed25519)", len(cfg.AdminKey), ed25519.PublicKeySize)
	case cfg.BatchSize < 1:
		return nil, fmt.Errorf("student: batch size %d", cfg.BatchSize)
	case cfg.StateDir == "":
		return nil, errors.New("student: no state directory configured")
	case len(cfg.AuditorKeys) == 0:
		return nil, errors.New("student: no auditor keys configured: labels are accepted only with a receipt a majority of the auditors signed")
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = 10
	}
	if cfg.Window <= 0 {
		cfg.Window = 1
	}
	if cfg.Selection.Strategy == "" {
		cfg.Selection.Strategy = selection.Sequential
	}
	if err := cfg.Selection.Validate(); err != nil {
		return nil, fmt.Errorf("student: %w", err)
	}
	switch {
	case cfg.Bootstrap < 0:
		return nil, fmt.Errorf("%w: bootstrap after %d answers, want 0 (off) or more", selection.ErrConfig, cfg.Bootstrap)
	case cfg.Bootstrap > 0 && cfg.Rank == nil:
		return nil, fmt.Errorf("%w: bootstrap after %d answers needs a way to rank the rest", selection.ErrConfig, cfg.Bootstrap)
	case cfg.MaxQueries < 0:
		return nil, fmt.Errorf("student: ask at most %d queries: want 0 (all) or more", cfg.MaxQueries)
	}
	if f := cfg.Fallback; f != nil && (!(f.Cap >= 0) || math.IsInf(f.Cap, 0) || !(f.Delta >= 0 && f.Delta < 1) || (f.Cap > 0) != (f.Delta > 0)) {
		return nil, fmt.Errorf("student: the plan's cap ε %v at δ %v: want both 0 (the smallest hospital cap in the ledger) or a finite ε > 0 and δ in (0, 1)", f.Cap, f.Delta)
	}
	receipts, err := ledger.NewVerifier(cfg.AuditorKeys)
	if err != nil {
		return nil, fmt.Errorf("student: auditor keys: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{cfg: cfg, log: log, receipts: receipts, dir: newDirectory(cfg.AdminKey, cfg.Hospitals)}, nil
}

// BatchID is the id of batch index of a data set for a student.
func BatchID(student, dataHash string, batchSize, index int) []byte {
	h := sha256.New()
	h.Write([]byte("nzc student batch v1\x00"))
	h.Write([]byte(student))
	h.Write([]byte{0})
	h.Write([]byte(dataHash))
	h.Write([]byte{0})
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(batchSize))
	binary.BigEndian.PutUint64(b[8:], uint64(index))
	h.Write(b[:])
	return h.Sum(nil)
}

// FeatureHash identifies a data set by its features alone: the labels a
// student may hold for evaluation play no part in its batch ids.
func FeatureHash(d *data.Dataset) string {
	return (&data.Dataset{X: d.X, Y: make([]int, d.Len()), Shape: d.Shape, Classes: d.Classes}).Hash()
}

// Batch is one labelled batch as recorded in the state directory.
type Batch struct {
	Index       int     `json:"index"`
	BatchID     string  `json:"batch_id"`
	From        int     `json:"from"`
	Labels      []int32 `json:"labels"` // −1 where refused
	LedgerIndex uint64  `json:"ledger_index"`
	AnswersHash string  `json:"answers_hash"`
	Replayed    bool    `json:"replayed"`
	// LeftOut names the hospitals whose budgets could not pay for the
	// batch, or that were left out after missing a batch deadline: they
	// did not vote on it and were not charged.
	LeftOut []string `json:"left_out,omitempty"`
	// Receipt proves the batch's charge was committed by a majority of the
	// auditors; it was verified when the labels were accepted and can be
	// verified again (VerifyBatch).
	Receipt *ledger.Receipt `json:"receipt,omitempty"`

	fresh bool // asked in this run, not loaded from the state directory
}

// save records batch index of the data set with the given hash.
func (c *Client) save(hash string, index int, bt *Batch) error {
	b, _ := json.Marshal(bt)
	if err := os.MkdirAll(filepath.Dir(c.statePath(hash, index)), 0o700); err != nil {
		return err
	}
	return crypto.WriteFile(c.statePath(hash, index), b, 0o600, true)
}

// Result is a labelling run.
type Result struct {
	Student  string `json:"student"`
	DataHash string `json:"data_hash"`
	Queries  int    `json:"queries"`
	Labels   []int  `json:"labels"` // −1 where refused or not asked
	// Order is the order in which the queries were asked, when not the
	// data's own (Config.Selection); Batch.From indexes it.
	Order    []int    `json:"order,omitempty"`
	Answered int      `json:"answered"`
	Refused  int      `json:"refused"`
	Batches  []*Batch `json:"batches"`
	// Stopped says why labelling stopped before the end (a typed refusal
	// from the aggregator, e.g. the budget is exhausted); empty when every
	// batch was labelled.
	Stopped string `json:"stopped,omitempty"`
	// Resumed is the number of batches found already labelled.
	Resumed int `json:"resumed"`
	// ProofsVerified is the number of batches whose receipt was verified
	// against the pinned auditor keys in this run (every batch received,
	// and every resumed batch that kept its receipt).
	ProofsVerified int `json:"proofs_verified"`
	// Plan is what a planned run (Config.Fallback) did; nil otherwise.
	Plan *PlanReport `json:"plan,omitempty"`
}

// ErrStopped is matched by Label's error when the aggregator refused a
// batch for a reason retrying will not fix.
var ErrStopped = errors.New("labelling stopped")

// Progress is told after each batch.
type Progress func(done, total int)

func (c *Client) statePath(dataHash string, index int) string {
	return filepath.Join(c.cfg.StateDir, dataHash[:16], fmt.Sprintf("batch-%06d.json", index))
}

// loadBatch reads the record of batch index, which holds the queries
// [from, from+count) of a data set. A record that is not exactly that
// batch's is an error: its labels would land on other queries. (Labels are
// checked against the protocol's bound on classes, not the data set's own
// count: a student's unlabelled data may carry placeholder labels.)
func (c *Client) loadBatch(dataHash string, index int, id []byte, from, count int) (*Batch, error) {
	b, err := os.ReadFile(c.statePath(dataHash, index))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var bt Batch
	if err := json.Unmarshal(b, &bt); err != nil || bt.BatchID != hex.EncodeToString(id) || bt.Index != index ||
		bt.From != from || len(bt.Labels) != count || !validLabels(bt.Labels, protocol.MaxClasses) {
		return nil, fmt.Errorf("student: state file %s is damaged or from another run; move it away to ask that batch again (the aggregator answers a known batch without a new charge)", c.statePath(dataHash, index))
	}
	return &bt, nil
}

// validLabels reports whether every label is a class or −1 (refused).
func validLabels(ls []int32, classes int) bool {
	for _, l := range ls {
		if l < -1 || (classes > 0 && int(l) >= classes) {
			return false
		}
	}
	return true
}

// Label labels every row of x (the features of d; its labels are not
// sent) and returns the labels. Batches recorded in the state directory are
// not asked again. On a refusal that retrying cannot fix it returns the
// labels so far and an error matching ErrStopped (and the refusal's
// protocol sentinel, e.g. protocol.ErrBudgetExhausted).
func (c *Client) Label(ctx context.Context, d *data.Dataset, progress Progress) (*Result, error) {
	if c.cfg.Deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, c.cfg.Deadline, errDeadline)
		defer cancel()
	}
	if c.cfg.Fallback != nil {
		return c.labelPlanned(ctx, d, progress)
	}
	return c.labelOrdered(ctx, d, progress, phase{})
}

// phase is how one part of a run asks: in the student's session, watching
// for its end (track), or under the federation's fallback.
type phase struct {
	// track, when set, records the sessions the batches ran in, and the
	// part asks one batch at a time and no batch more once the last
	// session has used its refusals.
	track *sessionTrack
	// fallback asks every batch under the federation's per-query
	// fallback (LabelRequest.fallback).
	fallback bool
}

// labelOrdered labels d in the configured order (Selection, Bootstrap,
// MaxQueries).
func (c *Client) labelOrdered(ctx context.Context, d *data.Dataset, progress Progress, ph phase) (*Result, error) {
	hash := FeatureHash(d)
	limit := c.cfg.MaxQueries
	if limit >= d.Len() {
		limit = 0
	}
	if c.cfg.Selection.Strategy == selection.Sequential && c.cfg.Bootstrap == 0 && limit == 0 {
		return c.label(ctx, d, hash, hash, nil, progress, ph)
	}
	// Ask in the selected order: label the reordered data, whose batches
	// are named after the data and the order, and put every label back
	// where its query is.
	order := make([]int, d.Len())
	for i := range order {
		order[i] = i
	}
	name := hash
	if c.cfg.Selection.Strategy != selection.Sequential {
		var err error
		if order, err = selection.Order(ctx, c.cfg.Selection, d); err != nil {
			return nil, err
		}
		sel, _ := json.Marshal(c.cfg.Selection)
		name = hash + "/" + string(sel)
	}
	if limit > 0 {
		// Named after the limit too: its last batch may be shorter than
		// the same batch of a longer run.
		order = order[:limit]
		name = fmt.Sprintf("%s/first %d", name, limit)
	}
	if c.cfg.Bootstrap > 0 {
		return c.bootstrap(ctx, d, hash, name, order, progress, ph)
	}
	res, err := c.label(ctx, d.Subset(order), hash, name, nil, progress, ph)
	return placed(res, order, d.Len()), err
}

// placed puts res's labels, asked in the given order, back where their
// queries are among n.
func placed(res *Result, order []int, n int) *Result {
	if res == nil {
		return nil
	}
	labels := make([]int, n)
	for i := range labels {
		labels[i] = -1
	}
	for j, q := range order[:len(res.Labels)] {
		labels[q] = res.Labels[j]
	}
	out := *res
	out.Labels, out.Order, out.Queries = labels, order, n
	return &out
}

// bootstrapRecord is the order a bootstrapped run asks its second part
// in, kept in the state directory: a resumed run asks the same batches.
type bootstrapRecord struct {
	// Asked is how many queries of the first order were asked.
	Asked int   `json:"asked"`
	Order []int `json:"order"`
}

// bootstrap labels d in two parts (Config.Bootstrap): the first queries of
// order until Bootstrap are answered, then the rest in the order Rank
// gives. The second order is recorded before it is asked.
func (c *Client) bootstrap(ctx context.Context, d *data.Dataset, hash, name string, order []int, progress Progress, ph phase) (*Result, error) {
	recPath := c.bootstrapPath(hash, name)
	var rec bootstrapRecord
	known := false
	if b, err := os.ReadFile(recPath); err == nil {
		if json.Unmarshal(b, &rec) != nil || rec.Asked < 1 || rec.Asked > len(order) || !isPartialPermutation(rec.Order, d.Len()) {
			return nil, fmt.Errorf("student: state file %s is damaged; move it away to rank the rest again", recPath)
		}
		known = true
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	// The first part: until Bootstrap are answered, or, when the order of
	// the rest is recorded, exactly the batches asked before it was made
	// (the batches in flight when the answers sufficed included).
	firstPart, stop := order, func(r *Result) bool { return r.Answered >= c.cfg.Bootstrap }
	if known {
		firstPart, stop = order[:rec.Asked], nil
	}
	first, err := c.label(ctx, d.Subset(firstPart), hash, name, stop, progress, ph)
	if err != nil || (!known && first.Answered < c.cfg.Bootstrap) || (ph.track != nil && ph.track.ended()) {
		return placed(first, order, d.Len()), err
	}
	asked := 0
	for _, b := range first.Batches {
		asked += len(b.Labels)
	}
	firstAll := placed(first, order, d.Len())
	if !known {
		isAsked := make([]bool, d.Len())
		for _, q := range order[:asked] {
			isAsked[q] = true
		}
		rest, err := c.cfg.Rank(ctx, d, firstAll.Labels, isAsked)
		if err != nil {
			return firstAll, fmt.Errorf("student: rank the queries after the first %d answers: %w", first.Answered, err)
		}
		for _, q := range rest {
			if q < 0 || q >= d.Len() || isAsked[q] {
				return firstAll, fmt.Errorf("student: the ranking names query %d, which is asked already or out of range", q)
			}
			isAsked[q] = true
		}
		if c.cfg.MaxQueries > 0 && asked+len(rest) > c.cfg.MaxQueries {
			rest = rest[:max(0, c.cfg.MaxQueries-asked)]
		}
		rec = bootstrapRecord{Asked: asked, Order: rest}
		b, _ := json.Marshal(rec)
		// The batches of a selected order are kept under their own name's
		// directory, so the data's may not exist yet.
		if err := os.MkdirAll(filepath.Dir(recPath), 0o700); err != nil {
			return firstAll, err
		}
		if err := crypto.WriteFile(recPath, b, 0o600, true); err != nil {
			return firstAll, err
		}
		c.log.Info("bootstrapped", "answered", first.Answered, "asked", asked, "asking next", len(rest))
	}
	all := append(slices.Clip(order[:asked]), rec.Order...)
	next := func(done, _ int) {
		if progress != nil {
			progress(asked+done, len(all))
		}
	}
	second, err := c.label(ctx, d.Subset(rec.Order), hash, name+"/then/"+shortHash(fmt.Sprint(rec.Order)), nil, next, ph)
	if second == nil {
		return firstAll, err
	}
	// One result in the order asked: the first part's queries, then the
	// second's, whose batches' From is shifted past the first part.
	res := first
	res.Labels = append(first.Labels[:asked], second.Labels...)
	for _, b := range second.Batches {
		shifted := *b
		shifted.From += asked
		res.Batches = append(res.Batches, &shifted)
	}
	res.Answered += second.Answered
	res.Refused += second.Refused
	res.Resumed += second.Resumed
	res.ProofsVerified += second.ProofsVerified
	res.Stopped = second.Stopped
	return placed(res, all, d.Len()), err
}

// bootstrapPath is where the order of a bootstrapped run's second part is
// recorded, for the data of hash asked in the order name.
func (c *Client) bootstrapPath(hash, name string) string {
	return filepath.Join(c.cfg.StateDir, hash[:16], "bootstrap-"+shortHash(fmt.Sprintf("%s/bootstrap/%d", name, c.cfg.Bootstrap))+".json")
}

func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}

// isPartialPermutation reports whether order names distinct queries of n.
func isPartialPermutation(order []int, n int) bool {
	seen := make([]bool, n)
	for _, q := range order {
		if q < 0 || q >= n || seen[q] {
			return false
		}
		seen[q] = true
	}
	return true
}

// label labels d in its own order; dataHash is reported, batchHash names
// its batches and state.
// After each batch recorded, stop (if not nil) says whether to ask no
// more: batches already asked are still waited for and recorded, since they
// may have been charged.
func (c *Client) label(ctx context.Context, d *data.Dataset, dataHash, batchHash string, stop func(*Result) bool, progress Progress, ph phase) (*Result, error) {
	hash := batchHash
	if batchHash != dataHash {
		h := sha256.Sum256([]byte(batchHash))
		hash = hex.EncodeToString(h[:])
	}
	n := d.Len()
	res := &Result{Student: c.cfg.ID, DataHash: dataHash, Queries: n, Labels: make([]int, n)}
	for i := range res.Labels {
		res.Labels[i] = -1
	}
	nb := (n + c.cfg.BatchSize - 1) / c.cfg.BatchSize
	conn := quicnet.NewHolder(c.connect) // shared by the batches in flight
	defer conn.Close()
	// inflight[i] is batch i's answer, inflight up to Window batches ahead of
	// the one being recorded.
	type answer struct {
		done chan struct{}
		bt   *Batch
		err  error
	}
	inflight := make([]*answer, nb)
	ask := func(i int) {
		if i >= nb || inflight[i] != nil {
			return
		}
		a := &answer{done: make(chan struct{})}
		inflight[i] = a
		from, to := i*c.cfg.BatchSize, min((i+1)*c.cfg.BatchSize, n)
		id := BatchID(c.cfg.ID, hash, c.cfg.BatchSize, i)
		go func() {
			defer close(a.done)
			a.bt, a.err = c.loadBatch(hash, i, id, from, to-from)
			if a.err != nil || a.bt != nil {
				return
			}
			a.bt, a.err = c.ask(ctx, conn, d.Slice(from, to), id, i, from, ph.fallback)
			if a.err == nil {
				a.err = c.save(hash, i, a.bt)
			}
			if a.err == nil {
				a.bt.fresh = true
			}
		}()
	}
	// Batches still being inflight when Label returns are waited for: they
	// may have been charged, and their answers are saved for the next run.
	defer func() {
		for _, a := range inflight {
			if a != nil {
				<-a.done
			}
		}
	}()
	var stopErr error
	window := c.cfg.Window
	if ph.track != nil {
		// One batch at a time: a batch asked past the session's end would
		// open, and pay for, another session.
		window = 1
	}
	stopped := ph.track != nil && ph.track.ended()
	for i := range nb {
		if !stopped {
			for k := i; k < i+window; k++ {
				ask(k)
			}
		}
		a := inflight[i]
		if a == nil {
			break // stopped, and every batch asked is recorded
		}
		<-a.done
		from, to := i*c.cfg.BatchSize, min((i+1)*c.cfg.BatchSize, n)
		bt, err := a.bt, a.err
		if err != nil {
			var pe *protocol.Error
			if errors.As(err, &pe) {
				stopErr = fmt.Errorf("%w at batch %d of %d: %w", ErrStopped, i+1, nb, err)
				res.Stopped = pe.Error()
				break
			}
			return res, err
		}
		switch {
		case bt.fresh: // its receipt was verified when it was received
			res.ProofsVerified++
		case bt.Receipt != nil:
			if err := VerifyBatch(bt, c.cfg.ID, c.receipts); err != nil {
				return res, fmt.Errorf("the recorded batch %d: %w", i, err)
			}
			res.ProofsVerified++
		}
		if !bt.fresh {
			res.Resumed++
		}
		res.Batches = append(res.Batches, bt)
		for j, l := range bt.Labels {
			res.Labels[from+j] = int(l)
			if l >= 0 {
				res.Answered++
			}
		}
		if progress != nil {
			progress(to, n)
		}
		if stop != nil && !stopped && stop(res) {
			stopped = true
		}
		if ph.track != nil {
			if _, err := ph.track.see(bt, c.cfg.ID, c.receipts); err != nil {
				return res, err
			}
			stopped = stopped || ph.track.ended()
		}
	}
	asked := 0
	for _, b := range res.Batches {
		asked += len(b.Labels)
	}
	res.Refused = asked - res.Answered
	return res, stopErr
}

// connect dials the aggregator and registers.
func (c *Client) connect(ctx context.Context) (*quicnet.Conn, error) {
	conn, err := quicnet.Connect(ctx, c.cfg.Net, quicnet.Target{Name: "aggregator", Addr: c.cfg.Aggregator, Role: crypto.RoleAggregator}, c.cfg.Backoff)
	if err != nil {
		return nil, err
	}
	var ack nzcpb.Ack
	err = conn.Invoke(ctx, &nzcpb.Hello{ProtocolVersion: protocol.ProtocolVersion, Role: nzcpb.Role_ROLE_STUDENT,
		PartyId: c.cfg.ID, AgeRecipient: c.cfg.Identity.Recipient().String(), Software: "nzc-student"}, &ack)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("register with the aggregator: %w", err)
	}
	if err := c.learn(ack.GetHospitals()); err != nil {
		_ = conn.Close()
		return nil, err
	}
	if err := c.learnOffer(ack.GetFallback()); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("the aggregator's fallback: %w", err)
	}
	c.log.Info("registered with the aggregator", "status", ack.GetMessage())
	return conn, nil
}

// learn takes the hospitals' signed recipients the aggregator passed,
// which the next batches are sealed to once verified.
func (c *Client) learn(rs []*nzcpb.SignedRecipient) error {
	added, unverifiable, err := c.dir.learn(c.cfg.Aggregator, rs)
	if err != nil {
		return err
	}
	if len(added) > 0 {
		c.log.Info("sealing the next batches to hospitals learned from the aggregator, their recipients signed by their registered keys", "hospitals", added)
	}
	if len(unverifiable) > 0 {
		c.log.Debug("hospitals passed without a registration and not pinned in hospitals: not sealed to", "hospitals", unverifiable)
	}
	return nil
}

// recipientsKey names a list of recipients, to tell whether a request is
// sealed to all of them.
func recipientsKey(rs []*crypto.Recipient) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.String())
		b.WriteByte(' ')
	}
	return b.String()
}

// ask labels one batch, retrying retryable refusals and lost connections
// under the same batch id.
func (c *Client) ask(ctx context.Context, conn *quicnet.Holder, part *data.Dataset, id []byte, index, from int, fallback bool) (_ *Batch, err error) {
	// last is the batch's last answer: a retryable refusal, or why the
	// aggregator could not be reached or the call broke.
	var last error
	defer func() {
		if err != nil && expired(ctx) && (ctx.Err() == nil || errors.Is(context.Cause(ctx), errDeadline)) && c.cfg.Deadline > 0 {
			err = &DeadlineError{Deadline: c.cfg.Deadline, Batch: index, Aggregator: c.cfg.Aggregator, Last: last}
		}
	}()
	plain, err := protocol.Marshal(&nzcpb.Features{NumQueries: uint32(part.Len()), FeatureDim: uint32(part.Dim()), Values: part.X})
	if err != nil {
		return nil, err
	}
	var (
		req       *nzcpb.LabelRequest
		sealedFor string // the recipients req is sealed to
	)
	for attempt := 1; attempt <= c.cfg.Attempts; attempt++ {
		cn, err := conn.Get(ctx)
		if err != nil {
			if ctx.Err() == nil || last == nil {
				last = fmt.Errorf("the aggregator at %s could not be reached: %w", c.cfg.Aggregator, err)
			}
			return nil, err
		}
		rs := c.dir.recipients()
		if req == nil || recipientsKey(rs) != sealedFor {
			// Sealed once connected, so that the hospitals learned from
			// the aggregator's Ack are among the recipients, and again
			// only when a reconnection taught the student more: the
			// hospitals bind a batch id to its queries, not to their
			// sealing, and a batch the aggregator already holds is
			// answered from its outbox whatever the retry's sealing.
			if len(rs) == 0 {
				// No hospital has registered with the aggregator yet:
				// register again later, to learn those that have since.
				last = ErrNoHospital
				conn.Drop(cn, nil)
				wait := retryWait(attempt, 0)
				c.log.Warn("no hospital to seal the features to yet; registering with the aggregator again", "batch", index, "attempt", attempt, "wait", wait)
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				continue
			}
			sealed, err := crypto.Seal(plain, rs...)
			if err != nil {
				return nil, err
			}
			req = &nzcpb.LabelRequest{BatchId: id, NumQueries: uint32(part.Len()), FeatureDim: uint32(part.Dim()), SealedFeatures: sealed, Fallback: fallback}
			sealedFor = recipientsKey(rs)
		}
		var resp nzcpb.LabelResponse
		err = cn.Invoke(ctx, req, &resp)
		if err == nil {
			if err := c.learn(resp.GetHospitals()); err != nil {
				return nil, err
			}
			return c.open(&resp, id, index, from, part.Len())
		}
		if expired(ctx) {
			return nil, err // the call was cut short: last is the answer before it
		}
		last = err
		var pe *protocol.Error
		if errors.As(err, &pe) {
			if !pe.Code.Retryable() {
				return nil, pe
			}
		} else if ctx.Err() != nil {
			return nil, err
		} else {
			conn.Drop(cn, nil)
		}
		var after time.Duration
		if pe != nil {
			after = pe.RetryAfter
		}
		wait := retryWait(attempt, after)
		c.log.Warn("batch not labelled yet; asking again under the same id", "batch", index, "attempt", attempt, "err", err, "wait", wait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var pe *protocol.Error
	if errors.As(last, &pe) {
		return nil, pe
	}
	return nil, fmt.Errorf("batch %d not labelled after %d attempts: %w", index, c.cfg.Attempts, last)
}

// expired says whether ctx has ended or its deadline has passed (a call's
// stream deadline, set from ctx's, may fire before ctx ends).
func expired(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ctx.Err() != nil || ok && !time.Now().Before(d)
}

// ErrNoHospital is a batch that could not be sealed: the aggregator
// passed no hospital recipient this student could verify, and none is
// configured under hospitals.
var ErrNoHospital = errors.New("student: no hospital to seal the features to: the aggregator passed no hospital recipient this student could verify and none is configured; start the hospitals (a founding hospital needs genesis in its configuration, a later one its registration), or add their age recipients to hospitals")

// errDeadline is the cause of a run's context ending at Config.Deadline.
var errDeadline = errors.New("the run's deadline passed")

// ErrDeadline matches a *DeadlineError.
var ErrDeadline = errors.New("student: the run's deadline passed")

// DeadlineError is a run that ended at Config.Deadline with a batch not
// labelled. Last is that batch's last answer — a refusal that names the
// hospitals or auditors that did not answer, or why the aggregator could
// not be reached — or nil when its one request was still unanswered.
type DeadlineError struct {
	Deadline   time.Duration
	Batch      int // index of the batch, from 0
	Aggregator string
	Last       error
}

func (e *DeadlineError) Error() string {
	if e.Last == nil {
		return fmt.Sprintf("gave up at the %v deadline: batch %d was asked of the aggregator at %s, which had not answered (it waits for the hospitals' votes up to its batch deadline and for the ledger up to its ledger timeout; its /readyz says what it waits for); run again to resume, with a longer --deadline",
			e.Deadline, e.Batch+1, e.Aggregator)
	}
	return fmt.Sprintf("gave up at the %v deadline: batch %d was not labelled; its last answer: %v; run again to resume, with a longer --deadline", e.Deadline, e.Batch+1, e.Last)
}

// Is makes a DeadlineError match ErrDeadline.
func (e *DeadlineError) Is(target error) bool { return target == ErrDeadline }

// Unwrap returns the batch's last answer.
func (e *DeadlineError) Unwrap() error { return e.Last }

// retryWait is how long to wait before asking a batch again after the given
// attempt failed: at least what the aggregator asked for, and doubling from
// 500ms up to 10s, so that the default 10 attempts span about a minute — a
// transient fault (the aggregator restarting, hospitals reconnecting, a
// ledger election) does not stop a long run.
func retryWait(attempt int, retryAfter time.Duration) time.Duration {
	return max(backoff.Ceiling(attempt, 500*time.Millisecond, maxRetryWait), retryAfter)
}

const maxRetryWait = 10 * time.Second

func (c *Client) open(resp *nzcpb.LabelResponse, id []byte, index, from, nq int) (*Batch, error) {
	if string(resp.GetBatchId()) != string(id) || int(resp.GetNumQueries()) != nq {
		return nil, fmt.Errorf("the aggregator answered another batch or another size")
	}
	plain, err := crypto.Open(resp.GetSealedLabels(), c.cfg.Identity)
	if err != nil {
		return nil, fmt.Errorf("open the labels: %w", err)
	}
	h := sha256.Sum256(plain)
	if string(h[:]) != string(resp.GetAnswersHash()) {
		return nil, errors.New("the labels do not match the answers hash the ledger committed: refusing them")
	}
	rcpt, ok, err := protocol.ReceiptFromWire(resp.GetReceipt())
	if err != nil || !ok {
		return nil, fmt.Errorf("%w: the aggregator sent no proof that the auditors committed the charge (%v): refusing the labels", ErrNoProof, err)
	}
	var l nzcpb.Labels
	if err := protocol.DecodePlain(plain, &l); err != nil {
		return nil, err
	}
	if len(l.GetLabels()) != nq {
		return nil, fmt.Errorf("%d labels for %d queries", len(l.GetLabels()), nq)
	}
	_, _, _, err = c.receipts.ChargeReceipt(rcpt, hex.EncodeToString(id), c.cfg.ID, l.GetLabels(), h)
	if err != nil {
		return nil, fmt.Errorf("%w: %w: refusing the labels", ErrNoProof, err)
	}
	return &Batch{Index: index, BatchID: hex.EncodeToString(id), From: from, Labels: l.GetLabels(),
		LedgerIndex: resp.GetLedgerIndex(), AnswersHash: hex.EncodeToString(h[:]), Replayed: resp.GetReplayed(),
		LeftOut: resp.GetLeftOut(), Receipt: &rcpt}, nil
}

// labelsHash is the SHA-256 of the encoding of labels as released, which
// a charge commits to.
func labelsHash(labels []int32) ([32]byte, error) {
	plain, err := protocol.Marshal(&nzcpb.Labels{Labels: labels, Refused: refusedOf(labels)})
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(plain), nil
}

func refusedOf(labels []int32) []bool {
	out := make([]bool, len(labels))
	for i, l := range labels {
		out[i] = l < 0
	}
	return out
}

// ErrNoProof is matched by the error of a batch whose labels came without a
// receipt that verifies against the pinned auditor keys: the labels are
// refused, as if never received.
var ErrNoProof = errors.New("no proof of the charge")

// VerifyBatch checks a recorded batch's receipt with the auditors' keys in
// receipts: a checkpoint signed by a majority holding the accepted charge of
// this batch, for this student, committing to exactly these labels.
func VerifyBatch(bt *Batch, student string, receipts *ledger.Verifier) error {
	if bt.Receipt == nil {
		return fmt.Errorf("%w: batch %s has no receipt", ErrNoProof, bt.BatchID)
	}
	h, err := labelsHash(bt.Labels)
	if err != nil {
		return err
	}
	if hex.EncodeToString(h[:]) != bt.AnswersHash {
		return fmt.Errorf("%w: batch %s: its labels do not hash to the recorded answers hash", ErrNoProof, bt.BatchID)
	}
	if _, _, _, err := receipts.ChargeReceipt(*bt.Receipt, bt.BatchID, student, bt.Labels, h); err != nil {
		return fmt.Errorf("%w: batch %s: %w", ErrNoProof, bt.BatchID, err)
	}
	return nil
}

// Budget asks the ledger, through the aggregator, what the hospitals have
// spent and have left.
func (c *Client) Budget(ctx context.Context, req *nzcpb.BudgetRequest) (*nzcpb.BudgetResponse, error) {
	conn, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var resp nzcpb.BudgetResponse
	if err := conn.Invoke(ctx, req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}
