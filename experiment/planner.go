package experiment

import (
	"context"
	"fmt"
	"slices"

	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/mechanism/budget"
	"github.com/nzcfed/nzc/ml/metrics"
	"github.com/nzcfed/nzc/ml/selection"
)

// Planner is the aggregator name of the planned rows (Config.Plan).
const Planner = "planner"

// PlanConfig, when Cap is positive, adds a planned row for every
// session-keeping aggregator that is bootstrapped (Config.Bootstrap): one
// bootstrapped session planned at pure SessionEpsilon with Refusals
// refusals (as SessionEpsilons plans one); when it ends before every pool
// query was asked, the rest of the cap buys GNMax answers
// (Mechanisms["gnmax"], budget.Rest). If the session released at least
// MinAnswers labels, GNMax asks about the unasked queries a student
// trained on them is surest of; with fewer, such a student knows too
// little to rank anything, and GNMax asks in the query order, as GNMax
// alone would. Every decision reads released outputs only, and the row's
// ε is the session's and the GNMax answers' composed as the ledger
// composes an account: at most Cap.
type PlanConfig struct {
	Cap            float64 `json:"cap"`
	SessionEpsilon float64 `json:"session_epsilon"`
	// Refusals is the session's refusal bound K (0: Config.SessionRefusals).
	Refusals int `json:"refusals,omitempty"`
	// MinAnswers is the fewest session answers whose student ranks the
	// GNMax queries (0: any answer).
	MinAnswers int `json:"min_answers,omitempty"`
	// Agreement, when positive, asks GNMax first: the answers that fit
	// beside the session, on the first queries in the query order. Two
	// students trained on disjoint halves of those labels predict the
	// queries without one (halvesAgreement); when they agree on at least
	// this share, the data looks easy and the session opens on the rest,
	// else the rest of the cap buys more GNMax answers, the next queries
	// in the query order: GNMax's answers compose with each other without
	// loss, so on data that looks hard the plan releases exactly what
	// GNMax alone would.
	Agreement float64 `json:"agreement,omitempty"`
}

// planSessionParams plans the planned row's session for k teachers.
func (c *Config) planSessionParams(kind mechanism.Kind, k, classes int) (mechanism.Params, error) {
	refusals := c.Plan.Refusals
	if refusals == 0 {
		refusals = c.sessionRefusals()
	}
	return kind.PlanSession(c.Plan.SessionEpsilon, mechanism.PresetSessionDelta, refusals, k, classes)
}

// validatePlan checks the plan against the ensemble and the mechanisms.
func (c *Config) validatePlan() error {
	pc := c.Plan
	if pc.Cap == 0 && pc.SessionEpsilon == 0 {
		return nil
	}
	if !(pc.Cap > 0) || !(pc.SessionEpsilon > 0) || pc.SessionEpsilon > pc.Cap {
		return fmt.Errorf("%w: plan cap ε %v with a session of ε %v: want a positive cap and a session within it", ErrConfig, pc.Cap, pc.SessionEpsilon)
	}
	if !(pc.Agreement >= 0 && pc.Agreement <= 1) {
		return fmt.Errorf("%w: a plan's agreement %v, want 0 (no GNMax first) to 1", ErrConfig, pc.Agreement)
	}
	if pc.Refusals < 0 || pc.Refusals > 100 || pc.MinAnswers < 0 {
		return fmt.Errorf("%w: a planned session of %d refusals switching below %d answers: want 0 (the preset's) to 100 refusals and 0 or more answers", ErrConfig, pc.Refusals, pc.MinAnswers)
	}
	i := slices.IndexFunc(c.Aggregators, func(a string) bool { return c.Mechanisms[a].Mechanism.Sessions() })
	if c.Bootstrap == 0 || i < 0 {
		// A planned row follows a bootstrapped session: there is none.
		return nil
	}
	gn, ok := c.Mechanisms[string(mechanism.GNMax)]
	if !ok || gn.Mechanism != mechanism.GNMax {
		return fmt.Errorf("%w: a planned row spends the rest of its cap on gnmax, which has no parameters", ErrConfig)
	}
	if _, err := c.planSessionParams(c.Mechanisms[c.Aggregators[i]].Mechanism, c.Teachers[0], c.Data.Train.Classes); err != nil {
		return fmt.Errorf("%w: planned session ε %v: %w", ErrConfig, pc.SessionEpsilon, err)
	}
	return nil
}

// plannedRows adds to rep the planned row (Config.Plan) of every
// session-keeping aggregator for the ensemble of k teachers, each drawn
// Config.Draws times.
func (s *students) plannedRows(ctx context.Context, rep *Report, k, classes int, hist [][]int, pool []int) error {
	cfg := s.cfg
	for _, agg := range cfg.Aggregators {
		if !cfg.Mechanisms[agg].Mechanism.Sessions() {
			continue
		}
		p, err := cfg.planSessionParams(cfg.Mechanisms[agg].Mechanism, k, classes)
		if err != nil {
			return fmt.Errorf("%s with %d teachers, a planned session of ε %v: %w", agg, k, cfg.Plan.SessionEpsilon, err)
		}
		gn := ParamsFor(cfg.Mechanisms[string(mechanism.GNMax)], k, classes)
		stream := fmt.Sprintf("answer/%s/%d/%d/planned/%v/%v", agg, k, len(pool), cfg.Plan.Cap, cfg.Plan.SessionEpsilon)
		if p.MaxRefusals != mechanism.PresetSessionRefusals {
			stream += fmt.Sprintf("/refusals/%d", p.MaxRefusals)
		}
		row, err := s.drawn(len(rep.Rows), fmt.Sprintf("%s k=%d planned", agg, k), func(d int) (Row, []int, error) {
			session := func() (Row, []int, []bool, error) {
				// A bootstrapped row with the same session already drew
				// it: the plan continues that release.
				if kept, ok := s.sessions[sessionKey{agg, k, p, d}]; ok {
					return kept.row, slices.Clone(kept.full), slices.Clone(kept.asked), nil
				}
				return s.bootstrap(ctx, agg, p, cfg.noise(stream, d), k, classes, hist, pool)
			}
			var (
				row  Row
				full []int
				err  error
			)
			if cfg.Plan.Agreement > 0 {
				row, full, err = s.probed(ctx, agg, p, gn, cfg.noise(stream, d), cfg.noise(stream+"/gnmax", d), k, classes, hist, pool)
			} else {
				row, full, err = s.planned(ctx, p, gn, session, cfg.noise(stream+"/gnmax", d), hist, pool)
			}
			if err != nil {
				return row, nil, fmt.Errorf("%s with %d teachers, planned: %w", agg, k, err)
			}
			s.log.Info("released", "aggregator", Planner, "params", row.Params, "teachers", k, "draw", d+1, "answered", row.Answered, "gnmax_answers", row.fallback, "epsilon", row.Epsilon)
			return row, full, nil
		})
		if err != nil {
			return err
		}
		rep.Rows = append(rep.Rows, row)
	}
	return nil
}

// planned runs one planned row: the bootstrapped session p (session
// releases it, or returns a bootstrapped row's release of it), then, if
// it ended before the pool was asked, as many GNMax (gn) answers as the
// rest of the cap buys, noise from gsrc, on the unasked queries a student
// trained on the session's labels is surest of, or the first unasked ones
// of the pool when the session released fewer than Plan.MinAnswers
// labels.
func (s *students) planned(ctx context.Context, p, gn mechanism.Params, session func() (Row, []int, []bool, error), gsrc mechanism.Source, hist [][]int, pool []int) (Row, []int, error) {
	cfg := s.cfg
	row, full, asked, err := session()
	if err != nil {
		return row, nil, err
	}
	g := mechanism.DefaultGrid()
	spent, err := p.Charge(g, 0, 0)
	if err != nil {
		return row, nil, err
	}
	unasked := 0
	for _, a := range asked {
		if !a {
			unasked++
		}
	}
	// The plan's ε is its costlier branch, the session and every GNMax
	// answer the cap allows, whether or not the session ended early: the
	// same figure in every draw.
	n, eps, err := budget.Rest(spent, gn, cfg.Plan.Cap, cfg.Delta, len(pool))
	if err != nil {
		return row, nil, err
	}
	row.Aggregator, row.Epsilon, row.Delta, row.EpsilonSource = Planner, eps, cfg.Delta, proven
	row.Params = fmt.Sprintf("cap ε=%v: nzc-svt %s, then up to %d gnmax %s", cfg.Plan.Cap, p, n, gn)
	row.Selection += fmt.Sprintf("; then gnmax on the surest unasked (in the query order below %d session answers)", max(1, cfg.Plan.MinAnswers))
	if unasked == 0 || n == 0 {
		return row, full, nil
	}
	var order []int
	if row.Answered == 0 || row.Answered < cfg.Plan.MinAnswers {
		for _, q := range pool {
			if !asked[q] && len(order) < n {
				order = append(order, q)
			}
		}
	} else {
		nets, err := s.rankers(ctx, cfg.BootstrapRounds+1, full)
		if err != nil {
			return row, nil, err
		}
		if order, err = selection.ConfidentEnsemble(ctx, nets, s.queries, asked, cfg.Confident); err != nil {
			return row, nil, err
		}
		order = order[:min(n, len(order))]
	}
	hs := make([]mechanism.Histogram, len(order))
	for j, q := range order {
		hs[j] = mechanism.Histogram(hist[q])
	}
	m, err := mechanism.New(gn)
	if err != nil {
		return row, nil, err
	}
	res, err := mechanism.AnswerBatch(m, gsrc, hs)
	if err != nil {
		return row, nil, err
	}
	for j, o := range res.Outcomes {
		if !o.Refused {
			full[order[j]] = o.Label
			row.fallback++
		}
	}
	row.Answered += row.fallback
	var labels, qs []int
	for q, l := range full {
		if l != metrics.Refused {
			labels, qs = append(labels, l), append(qs, q)
		}
	}
	row.LabelAccuracy = labelAccuracy(labels, qs, s.queries.Y)
	return row, full, nil
}

// probe is the budget of a plan that asks GNMax first: first GNMax
// answers fit beside the session p under the cap (of pool queries), and
// more the GNMax answers that follow them when the session does not open;
// easy and hard are the ε of the two branches (the session's, the GNMax
// answers' composed), the plan's ε their larger. GNMax composes with
// itself without loss, so first+more answers cost what that many answers
// of GNMax alone cost: the hard branch is GNMax alone at the cap.
func probe(p, gn mechanism.Params, capEps, delta float64, pool int) (first, more int, easy, hard float64, err error) {
	g := mechanism.DefaultGrid()
	spent, err := p.Charge(g, 0, 0)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	if first, easy, err = budget.Rest(spent, gn, capEps, delta, pool); err != nil {
		return 0, 0, 0, 0, err
	}
	asked, err := gn.Charge(g, first, 0)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	if more, hard, err = budget.Rest(asked, gn, capEps, delta, pool-first); err != nil {
		return 0, 0, 0, 0, err
	}
	return first, more, easy, hard, nil
}

// probed runs one planned row that asks GNMax first (Plan.Agreement): as
// many GNMax (gn) answers as fit beside the session p, on the first
// queries of pool, noise from gsrc; then, if students trained on disjoint
// halves of them agree on at least Plan.Agreement of the queries without
// a label (halvesAgreement), the bootstrapped session on the rest (noise
// from src), else as many more GNMax answers as the rest of the cap buys,
// on the next queries of pool. Fewer than two answers read as hard data. Its ε is the
// costlier branch's, the same in every draw.
func (s *students) probed(ctx context.Context, agg string, p, gn mechanism.Params, src, gsrc mechanism.Source, k, classes int, hist [][]int, pool []int) (Row, []int, error) {
	cfg := s.cfg
	n1, n2, e1, e2, err := probe(p, gn, cfg.Plan.Cap, cfg.Delta, len(pool))
	if err != nil {
		return Row{}, nil, err
	}
	m, err := mechanism.New(gn)
	if err != nil {
		return Row{}, nil, err
	}
	full := make([]int, s.queries.Len())
	for i := range full {
		full[i] = metrics.Refused
	}
	gnmax := func(qs []int) (int, error) {
		hs := make([]mechanism.Histogram, len(qs))
		for j, q := range qs {
			hs[j] = mechanism.Histogram(hist[q])
		}
		res, err := mechanism.AnswerBatch(m, gsrc, hs)
		if err != nil {
			return 0, err
		}
		answered := 0
		for j, o := range res.Outcomes {
			if !o.Refused {
				full[qs[j]] = o.Label
				answered++
			}
		}
		return answered, nil
	}
	answered, err := gnmax(pool[:n1])
	if err != nil {
		return Row{}, nil, err
	}
	row := Row{Aggregator: Planner, Teachers: k, Queries: len(pool), Noise: cfg.noiseName(),
		Selection: fmt.Sprintf("%s; gnmax first, then the session when students on halves of its labels agree on %v of the rest", cfg.Selection.Strategy, cfg.Plan.Agreement)}
	row.Params = fmt.Sprintf("cap ε=%v: %d gnmax %s, then nzc-svt %s or %d more gnmax", cfg.Plan.Cap, n1, gn, p, n2)
	row.Epsilon, row.Delta, row.EpsilonSource = max(e1, e2), cfg.Delta, proven
	agreement := 0.0
	if answered >= 2 {
		if agreement, err = s.halvesAgreement(ctx, full); err != nil {
			return row, nil, err
		}
	}
	easy := answered >= 2 && agreement >= cfg.Plan.Agreement
	s.log.Info("plan probed", "gnmax_answers", answered, "agreement", agreement, "session", easy)
	if easy {
		srow, sfull, _, err := s.bootstrap(ctx, agg, p, src, k, classes, hist, pool[n1:])
		if err != nil {
			return row, nil, err
		}
		for q, l := range sfull {
			if l != metrics.Refused {
				full[q] = l
			}
		}
		row.Answered, row.fallback = srow.Answered+answered, answered
	} else {
		more, err := gnmax(pool[n1 : n1+n2])
		if err != nil {
			return row, nil, err
		}
		row.Answered, row.fallback = answered+more, answered+more
	}
	var labels, qs []int
	for q, l := range full {
		if l != metrics.Refused {
			labels, qs = append(labels, l), append(qs, q)
		}
	}
	row.LabelAccuracy = labelAccuracy(labels, qs, s.queries.Y)
	return row, full, nil
}

// halvesAgreement is the share of the queries without a released label
// on which two bootstrap students, trained on disjoint halves of the
// released labels (alternate ones in query index order), predict the
// same class. It reads released labels and the unlabelled queries only:
// post-processing, free of charge. Where the teachers agree and the data
// is easy to learn, students of a few labels each generalise alike.
func (s *students) halvesAgreement(ctx context.Context, full []int) (float64, error) {
	key := labelsKey(full)
	if a, ok := s.agreements[key]; ok {
		return a, nil
	}
	var labelled, rest []int
	for q, l := range full {
		if l != metrics.Refused {
			labelled = append(labelled, q)
		} else {
			rest = append(rest, q)
		}
	}
	if len(labelled) < 2 || len(rest) == 0 {
		return 0, fmt.Errorf("%w: %d released labels and %d queries without one: want two labels and a query to judge", ErrConfig, len(labelled), len(rest))
	}
	x := s.queries.Subset(rest).X
	var preds [2][]int
	for h := range preds {
		half := slices.Clone(full)
		for i, q := range labelled {
			if i%2 != h {
				half[q] = metrics.Refused
			}
		}
		net, err := s.fit(ctx, s.bootSpec, fmt.Sprintf("signal student on half %d", h+1), half, true, uint64(h))
		if err != nil {
			return 0, err
		}
		if preds[h], err = net.Predict(x); err != nil {
			return 0, err
		}
	}
	same := 0
	for i := range rest {
		if preds[0][i] == preds[1][i] {
			same++
		}
	}
	if s.agreements == nil {
		s.agreements = map[[32]byte]float64{}
	}
	s.agreements[key] = float64(same) / float64(len(rest))
	return s.agreements[key], nil
}
