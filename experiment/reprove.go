package experiment

import (
	"math"

	"github.com/nzcfed/nzc/internal/jsonnum"

	"github.com/nzcfed/nzc/mechanism"
)

// Reprove recomputes each row's proven ε (provenEpsilon) at the total δ
// delta, the worst case over its planned queries (worstCharge), for the
// rows whose parameters are the presets' for their ensemble — the only
// parameters a results.json records exactly enough to recompute from (a
// row's parameters are kept as text, to four digits). It is how `nzc
// experiment --from` shows an earlier run at today's proof: a run made
// before the ledger's gate converted adaptively chosen charges with the
// filter conversion showed confident-GNMax at the lower, fixed-composition
// figure, and one made before a row's ε was the worst case over its
// queries showed confident-GNMax at the cost of the answers it happened to
// give. Other rows keep the ε they were written with. It returns the number of rows recomputed.
func (r *Report) Reprove(delta float64) (int, error) {
	g := mechanism.DefaultGrid()
	n := 0
	for i := range r.Rows {
		row := &r.Rows[i]
		if row.EpsilonSource == notPrivate {
			continue
		}
		p, ok := recordedParams(row)
		if !ok {
			continue
		}
		ch, err := worstCharge(p, g, row.Queries)
		if err != nil {
			return n, err
		}
		eps, err := provenEpsilon(ch, delta)
		if err != nil {
			return n, err
		}
		if math.IsNaN(eps) {
			continue
		}
		row.Epsilon, row.Delta, row.EpsilonSource = eps, delta, proven
		for d := range row.Draws {
			row.Draws[d].Epsilon = jsonnum.Float(eps)
		}
		n++
	}
	return n, nil
}

// earlierPresets are presets of earlier releases whose runs' results.json
// may be re-rendered: nzc-svt's session was K = 2, T = 100, b_ρ = 2,
// b_ν = 4 (pure ε 1.5) before it was planned at ε = 1.
var earlierPresets = [...]mechanism.Params{
	{Mechanism: mechanism.NZCSVT, Scale: 2, Threshold: 100, MaxRefusals: 2, DistanceScale: 4},
}

// recordedParams returns the exact parameters of a row when they are a
// preset's (today's or an earlier release's) for its ensemble.
func recordedParams(row *Row) (mechanism.Params, bool) {
	cands := []mechanism.Params{}
	if p, err := mechanism.Preset(mechanism.Kind(row.Aggregator)); err == nil {
		cands = append(cands, p)
	}
	for _, p := range earlierPresets {
		if string(p.Mechanism) == row.Aggregator {
			cands = append(cands, p)
		}
	}
	for _, c := range cands {
		if p := c.ForEnsemble(row.Teachers, 0); p.String() == row.Params {
			return p, true
		}
	}
	return mechanism.Params{}, false
}

// Redact removes from a report written before the release ensembles' votes
// were kept out of reports every statistic of those votes that no
// mechanism charged for: the ensembles' clean-vote accuracy and gap
// counts, the clean-votes rows, the unperturbed data-dependent ε of the
// smooth-sensitivity rows, and the plot-only ensembles, which trained on
// the release teachers' data. A tuning ensemble's diagnostics stay. It
// returns how many figures or rows it removed.
func (r *Report) Redact() int {
	n := 0
	if r.CleanVotesLabelAccuracy != 0 {
		r.CleanVotesLabelAccuracy = 0
		n++
	}
	ens := r.Ensembles[:0]
	for _, e := range r.Ensembles {
		if !e.TableRows {
			n++
			continue
		}
		if e.CleanVotesLabelAccuracy != 0 || e.GapCounts != nil {
			e.CleanVotesLabelAccuracy, e.GapCounts = 0, nil
			n++
		}
		ens = append(ens, e)
	}
	r.Ensembles = ens
	rows := r.Rows[:0]
	for _, row := range r.Rows {
		if row.Aggregator == CleanVotes {
			n++
			continue
		}
		if row.EpsilonDataDependent != 0 || row.EpsilonReleaseNoiseSD != 0 {
			row.EpsilonDataDependent, row.EpsilonReleaseNoiseSD = 0, 0
			n++
		}
		rows = append(rows, row)
	}
	r.Rows = rows
	return n
}
