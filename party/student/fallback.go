package student

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/mechanism/budget"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/selection"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// FallbackConfig is the cap a planned run (Config.Fallback) stays within.
type FallbackConfig struct {
	// Cap and Delta are the ε at δ that every charge of the run — its
	// sessions' whole costs and the fallback's queries, each at its
	// data-independent worst case — composed as the ledger composes a
	// hospital's account, stays within. Both zero: the smallest cap of the
	// hospitals, at its δ, as the ledger reports them through the
	// aggregator.
	Cap, Delta float64
	// Surest asks the fallback's queries in the order Config.Rank gives
	// from the labels released so far (what a student trained on them is
	// surest of first). False: in the Selection order, of the queries not
	// asked. A per-query mechanism charges every query alike, so the
	// Selection order (balanced: every kind of example its share) serves a
	// student that the session's surest-first order left without some
	// classes.
	Surest bool
}

// PlanReport is what a planned run did (Result.Plan): its session's answers and
// refusals, the fallback's queries, and the ε all of them cost, from the
// charges the run holds receipts of.
type PlanReport struct {
	// Sessions is how many sessions the run's batches ran in;
	// SessionAnswered and SessionRefused count their labels and refusals
	// (a query after a session's last refusal, which it did not look at,
	// counts as refused).
	Sessions        int `json:"sessions"`
	SessionAnswered int `json:"session_answered"`
	SessionRefused  int `json:"session_refused"`
	// Fallback is the per-query mechanism the aggregator offered ("" when
	// it offered none); FallbackPlanned is how many queries the rest of the
	// cap bought under it (budget.Rest), FallbackAnswered how many of them
	// were labelled.
	Fallback         string `json:"fallback,omitempty"`
	FallbackPlanned  int    `json:"fallback_planned"`
	FallbackAnswered int    `json:"fallback_answered"`
	// Cap and Delta are the cap planned within.
	Cap   float64 `json:"cap"`
	Delta float64 `json:"delta"`
	// Epsilon is the ε at Delta of every charge of the run's batches
	// composed (each session's whole cost once, each per-query charge at
	// its worst case, every query answered), as budget.Epsilon takes it:
	// what each hospital that voted on every batch was charged for them,
	// at most. Charges is how many charges it composes and ProvenBy who
	// proved them: receipts checked against the pinned auditor keys.
	Epsilon  float64 `json:"epsilon"`
	Charges  int     `json:"charges"`
	ProvenBy string  `json:"proven_by"`
	// Note says why no fallback query was asked, when none was.
	Note string `json:"note,omitempty"`
}

// ErrFallbackMismatch is matched by the error of a planned run whose
// aggregator charged a batch asked under its fallback as another mechanism
// than the one it offered: the run stops there.
var ErrFallbackMismatch = errors.New("student: a fallback batch was charged under another mechanism than the one offered")

// learnOffer keeps the per-query fallback an Ack offers (none when o is
// nil).
func (c *Client) learnOffer(o *nzcpb.MechanismOffer) error {
	p, _, err := protocol.OfferFromWire(o)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.offer = p
	c.mu.Unlock()
	return nil
}

func (c *Client) fallbackOffer() mechanism.Params {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offer
}

// sessionTrack follows, from the receipts of a run's batches, the sessions
// they ran in and the per-query charges, so that the run knows when its
// session has used its refusals and what it has spent: released outputs
// only, never a vote.
type sessionTrack struct {
	sessions map[string]*trackedSession
	last     string // the session of the last batch seen in one
	// perQuery are the charges of the batches answered per query.
	perQuery []*ledger.Charge
}

type trackedSession struct {
	params   mechanism.Params
	refusals uint64
	answered int
	refused  int
}

func newSessionTrack() *sessionTrack { return &sessionTrack{sessions: map[string]*trackedSession{}} }

// see records batch bt's charge, from its receipt (checked again against
// the pinned auditor keys), and returns the charge's mechanism.
func (t *sessionTrack) see(bt *Batch, student string, receipts *ledger.Verifier) (mechanism.Params, error) {
	if bt.Receipt == nil {
		return mechanism.Params{}, fmt.Errorf("%w: batch %s has no receipt, so the plan cannot know what it cost", ErrNoProof, bt.BatchID)
	}
	h, err := labelsHash(bt.Labels)
	if err != nil {
		return mechanism.Params{}, err
	}
	ch, _, _, err := receipts.ChargeReceipt(*bt.Receipt, bt.BatchID, student, bt.Labels, h)
	if err != nil {
		return mechanism.Params{}, fmt.Errorf("%w: batch %s: %w", ErrNoProof, bt.BatchID, err)
	}
	p, err := mechanism.ParseLedgerParams(mechanism.Kind(ch.Mechanism), ch.Params)
	if err != nil {
		return mechanism.Params{}, fmt.Errorf("batch %s: its charge's parameters: %w", bt.BatchID, err)
	}
	answered := 0
	for _, l := range bt.Labels {
		if l >= 0 {
			answered++
		}
	}
	if ch.Session == "" {
		t.perQuery = append(t.perQuery, ch)
		return p, nil
	}
	s := t.sessions[ch.Session]
	if s == nil {
		s = &trackedSession{params: p}
		t.sessions[ch.Session] = s
	}
	s.refusals += ch.Queries - ch.Answers
	s.answered += answered
	s.refused += len(bt.Labels) - answered
	t.last = ch.Session
	return p, nil
}

// ended reports whether the last session seen has used its refusals.
func (t *sessionTrack) ended() bool {
	s := t.sessions[t.last]
	return s != nil && s.refusals >= uint64(s.params.MaxRefusals)
}

// spent is every charge seen composed, each at its data-independent cost:
// a session's whole cost once, a per-query charge with every query
// answered.
func (t *sessionTrack) spent(g mechanism.Grid) (mechanism.Charge, int, error) {
	total := mechanism.Charge{RDP: g.Zero()}
	n := 0
	add := func(ch mechanism.Charge) error {
		var err error
		total, err = budget.Compose(total, ch)
		n++
		return err
	}
	for _, s := range t.sessions {
		ch, err := s.params.Charge(g, 0, 0)
		if err != nil {
			return total, n, err
		}
		if err := add(ch); err != nil {
			return total, n, err
		}
	}
	for _, c := range t.perQuery {
		p, err := mechanism.ParseLedgerParams(mechanism.Kind(c.Mechanism), c.Params)
		if err != nil {
			return total, n, err
		}
		ch, err := p.Charge(g, int(c.Queries), 0)
		if err != nil {
			return total, n, err
		}
		if err := add(ch); err != nil {
			return total, n, err
		}
	}
	return total, n, nil
}

// fallbackRecord is the order a planned run asks under the fallback,
// kept in the state directory so that a resumed run asks the same
// batches.
type fallbackRecord struct {
	Order []int `json:"order"`
}

// labelPlanned runs a planned run (Config.Fallback): the configured order
// in the student's session until it has used its refusals, then the
// fallback on as many of the queries not asked as the rest of the cap buys
// (budget.Rest), in fallbackOrder's order. Every decision reads released
// labels and receipts only.
func (c *Client) labelPlanned(ctx context.Context, d *data.Dataset, progress Progress) (*Result, error) {
	// What the aggregator offers decides the plan: learn it first.
	conn, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	_ = conn.Close()
	if c.fallbackOffer().Mechanism == "" {
		res, err := c.labelOrdered(ctx, d, progress, phase{})
		if res != nil {
			res.Plan = &PlanReport{Note: "the aggregator offers no per-query fallback: every batch was asked of its mechanism"}
		}
		return res, err
	}
	track := newSessionTrack()
	first, err := c.labelOrdered(ctx, d, progress, phase{track: track})
	if first == nil {
		return nil, err
	}
	plan := &PlanReport{ProvenBy: fmt.Sprintf("receipts checked against the %d pinned auditor keys, each a checkpoint a majority of them cosigned", len(c.cfg.AuditorKeys))}
	first.Plan = plan
	g := mechanism.DefaultGrid()
	defer func() {
		plan.Sessions = len(track.sessions)
		for _, s := range track.sessions {
			plan.SessionAnswered += s.answered
			plan.SessionRefused += s.refused
		}
		if spent, n, err := track.spent(g); err == nil && plan.Delta > 0 {
			plan.Charges = n
			plan.Epsilon, _ = budget.Epsilon(spent, plan.Delta)
		}
	}()
	if err != nil && !errors.Is(err, ErrStopped) {
		return first, err
	}
	if plan.Cap, plan.Delta, err = c.planCap(ctx); err != nil {
		return first, err
	}
	offer := c.fallbackOffer()
	plan.Fallback = string(offer.Mechanism) + " " + offer.String()
	asked := askedQueries(first, d.Len())
	unasked := len(asked) - countAsked(asked)
	switch {
	case !track.ended():
		plan.Note = "the session did not end at its refusal bound"
		return first, err
	case unasked == 0:
		plan.Note = "every query was asked in the session"
		return first, err
	}
	spent, _, serr := track.spent(g)
	if serr != nil {
		return first, serr
	}
	// The fallback's cost does not depend on the ensemble: the session's
	// stands in for the voters'.
	for _, s := range track.sessions {
		offer.Teachers = s.params.Teachers
	}
	limit := unasked
	if c.cfg.MaxQueries > 0 {
		limit = min(limit, max(0, c.cfg.MaxQueries-countAsked(asked)))
	}
	n, _, rerr := budget.Rest(spent, offer, plan.Cap, plan.Delta, limit)
	if errors.Is(rerr, budget.ErrBudget) || (rerr == nil && n == 0) {
		plan.Note = "the session's cost leaves no fallback query within the cap"
		return first, err
	}
	if rerr != nil {
		return first, rerr
	}
	plan.FallbackPlanned = n
	order, oerr := c.fallbackOrder(ctx, d, first, asked, n)
	if oerr != nil {
		return first, oerr
	}
	c.log.Info("the session has ended: asking the rest of the plan under the fallback", "fallback", plan.Fallback, "queries", len(order),
		"cap", plan.Cap, "delta", plan.Delta, "session_answered", first.Answered)
	hash := FeatureHash(d)
	name := hash + "/fallback/" + shortHash(fmt.Sprint(order))
	done := countAsked(asked)
	next := func(k, _ int) {
		if progress != nil {
			progress(done+k, done+len(order))
		}
	}
	second, err := c.label(ctx, d.Subset(order), hash, name, nil, next, phase{fallback: true})
	if second == nil {
		return first, err
	}
	for j, q := range order[:len(second.Labels)] {
		if l := second.Labels[j]; l >= 0 {
			first.Labels[q] = l
			plan.FallbackAnswered++
		}
	}
	base := 0
	for _, b := range first.Batches {
		base += len(b.Labels)
	}
	firstOrder := first.Order
	if firstOrder == nil {
		firstOrder = make([]int, d.Len())
		for i := range firstOrder {
			firstOrder[i] = i
		}
	}
	first.Order = append(append([]int(nil), firstOrder[:base]...), order...)
	for _, b := range second.Batches {
		shifted := *b
		shifted.From += base
		first.Batches = append(first.Batches, &shifted)
		p, err := track.see(b, c.cfg.ID, c.receipts)
		if err != nil {
			return first, err
		}
		// The charge must be of the fallback the aggregator offered, for
		// the batch's voters.
		p.Teachers, p.Classes = offer.Teachers, offer.Classes
		if p != offer {
			return first, fmt.Errorf("%w: batch %s was asked under the fallback %s and charged under %s %s", ErrFallbackMismatch, b.BatchID, plan.Fallback, p.Mechanism, p)
		}
	}
	first.Answered += second.Answered
	first.Refused += second.Refused
	first.Resumed += second.Resumed
	first.ProofsVerified += second.ProofsVerified
	first.Stopped = second.Stopped
	return first, err
}

// planCap is the cap the plan stays within: the configured one, or the
// smallest cap of the hospitals the ledger reports, at its δ.
func (c *Client) planCap(ctx context.Context) (float64, float64, error) {
	if f := c.cfg.Fallback; f.Cap > 0 {
		return f.Cap, f.Delta, nil
	}
	resp, err := c.Budget(ctx, &nzcpb.BudgetRequest{})
	if err != nil {
		return 0, 0, fmt.Errorf("read the hospitals' caps to plan the rest of the run (or configure the plan's cap): %w", err)
	}
	capEps, capDelta := math.Inf(1), 0.0
	for _, b := range resp.GetBudgets() {
		if b.GetEpsilonCap() < capEps {
			capEps, capDelta = b.GetEpsilonCap(), b.GetDeltaCap()
		}
	}
	if math.IsInf(capEps, 1) || !(capEps > 0) || !(capDelta > 0 && capDelta < 1) {
		return 0, 0, errors.New("the ledger reports no hospital cap to plan the rest of the run within; configure the plan's cap")
	}
	return capEps, capDelta, nil
}

func countAsked(asked []bool) int {
	n := 0
	for _, a := range asked {
		if a {
			n++
		}
	}
	return n
}

// askedQueries marks the queries of a run's result (placed, Order naming
// the order asked) that were asked.
func askedQueries(r *Result, n int) []bool {
	asked := make([]bool, n)
	for _, b := range r.Batches {
		for j := range b.Labels {
			q := b.From + j
			if r.Order != nil {
				q = r.Order[q]
			}
			asked[q] = true
		}
	}
	return asked
}

// decodeFallbackRecord reads a kept fallback order of at most n of the
// size queries, none of them asked; ok is false for anything else.
func decodeFallbackRecord(b []byte, size, n int, asked []bool) (order []int, ok bool) {
	var rec fallbackRecord
	if json.Unmarshal(b, &rec) != nil || len(rec.Order) > n || !unaskedOrder(rec.Order, size, asked) {
		return nil, false
	}
	return rec.Order, true
}

// unaskedOrder reports whether order names distinct queries of size, none
// of them asked: a fallback asks (and pays for) each query once.
func unaskedOrder(order []int, size int, asked []bool) bool {
	if !isPartialPermutation(order, size) {
		return false
	}
	for _, q := range order {
		if asked[q] {
			return false
		}
	}
	return true
}

// fallbackOrder returns the first n queries not asked, in the order
// Config.Rank gives from the labels released so far (FallbackConfig.Surest)
// or in the Selection order, and keeps it in the state directory, from
// which a resumed run takes it.
func (c *Client) fallbackOrder(ctx context.Context, d *data.Dataset, r *Result, asked []bool, n int) ([]int, error) {
	path := filepath.Join(c.cfg.StateDir, r.DataHash[:16], "fallback-"+shortHash(fmt.Sprintf("%v/%v/%v", asked, n, c.cfg.Fallback.Surest))+".json")
	if b, err := os.ReadFile(path); err == nil {
		order, ok := decodeFallbackRecord(b, d.Len(), n, asked)
		if !ok {
			return nil, fmt.Errorf("student: state file %s is damaged; move it away to plan the fallback again", path)
		}
		return order, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var order []int
	if c.cfg.Fallback.Surest && c.cfg.Rank != nil {
		ranked, err := c.cfg.Rank(ctx, d, r.Labels, asked)
		if err != nil {
			return nil, fmt.Errorf("student: rank the queries not asked for the fallback: %w", err)
		}
		if !unaskedOrder(ranked, d.Len(), asked) {
			return nil, fmt.Errorf("student: the ranking for the fallback names a query twice, one asked already or one out of range (%d queries ranked of %d)", len(ranked), d.Len())
		}
		order = ranked
	} else {
		all, err := selection.Order(ctx, c.cfg.Selection, d)
		if err != nil {
			return nil, err
		}
		for _, q := range all {
			if !asked[q] {
				order = append(order, q)
			}
		}
	}
	order = order[:min(n, len(order))]
	b, _ := json.Marshal(fallbackRecord{Order: order})
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if err := crypto.WriteFile(path, b, 0o600, true); err != nil {
		return nil, err
	}
	return order, nil
}
