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
	// SureShare, when positive, asks GNMax first: the answers that fit
	// beside the session, on the first queries in the query order. A
	// student trained on them judges the rest of the pool; when it is
	// sure (selection.SureShare) of at least this share, the session
	// opens on the rest, else the rest of the cap buys more GNMax
	// answers, the next queries in the query order: GNMax's answers
	// compose with each other without loss, so on data the student is
	// unsure of the plan releases what GNMax alone would.
	SureShare float64 `json:"sure_share,omitempty"`
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
	if !(pc.SureShare >= 0 && pc.SureShare <= 1) {
		return fmt.Errorf("%w: a plan's sure share %v, want 0 (no GNMax first) to 1", ErrConfig, pc.SureShare)
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
			if cfg.Plan.SureShare > 0 {
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

// probed runs one planned row that asks GNMax first (Plan.SureShare): as
// many GNMax (gn) answers as fit beside the session p, on the first
// queries of pool, noise from gsrc; then, if students trained on them are
// sure of at least Plan.SureShare of the rest, the bootstrapped session on
// the rest (noise from src), else as many more GNMax answers as the rest
// of the cap buys, on the next queries of pool. Its ε is the costlier
// branch's, the same in every draw.
func (s *students) probed(ctx context.Context, agg string, p, gn mechanism.Params, src, gsrc mechanism.Source, k, classes int, hist [][]int, pool []int) (Row, []int, error) {
	cfg := s.cfg
	g := mechanism.DefaultGrid()
	spent, err := p.Charge(g, 0, 0)
	if err != nil {
		return Row{}, nil, err
	}
	n1, e1, err := budget.Rest(spent, gn, cfg.Plan.Cap, cfg.Delta, len(pool))
	if err != nil {
		return Row{}, nil, err
	}
	first, err := gn.Charge(g, n1, 0)
	if err != nil {
		return Row{}, nil, err
	}
	n2, e2, err := budget.Rest(first, gn, cfg.Plan.Cap, cfg.Delta, len(pool)-n1)
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
		Selection: fmt.Sprintf("%s; gnmax first, then the session when its student is sure of %v of the rest", cfg.Selection.Strategy, cfg.Plan.SureShare)}
	row.Params = fmt.Sprintf("cap ε=%v: %d gnmax %s, then nzc-svt %s or %d more gnmax", cfg.Plan.Cap, n1, gn, p, n2)
	row.Epsilon, row.Delta, row.EpsilonSource = max(e1, e2), cfg.Delta, proven
	sure := 0.0
	if answered > 0 {
		asked := make([]bool, s.queries.Len())
		for i := range asked {
			asked[i] = true
		}
		for _, q := range pool[n1:] {
			asked[q] = false
		}
		nets, err := s.rankers(ctx, 0, full)
		if err != nil {
			return row, nil, err
		}
		if sure, err = selection.SureShare(ctx, nets, s.queries, asked, cfg.Confident); err != nil {
			return row, nil, err
		}
	}
	s.log.Info("plan probed", "gnmax_answers", answered, "sure_share", sure, "session", sure >= cfg.Plan.SureShare)
	if sure >= cfg.Plan.SureShare {
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
