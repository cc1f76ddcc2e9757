package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/nzcfed/nzc/mechanism"
)

// MechanismSection is the privacy core's speed: answers per second of each
// mechanism with the production noise source (crypto/rand), and the time to
// analyse AnalysisQueries queries.
type MechanismSection struct {
	Teachers      int               `json:"teachers"`
	Classes       int               `json:"classes"`
	AnswersPerS   map[string]Figure `json:"answers_per_s"`
	Analysis      AnalysisFigures   `json:"analysis"`
	AnalysisCount int               `json:"analysis_queries"`
}

// AnalysisFigures are the times to analyse the queries: the data-independent
// GNMax charge and its (ε, δ) conversion, and the GNMax data-dependent bound
// (PATE 2018 Thm 6 with the discrete-Gaussian q bound) and its conversion.
type AnalysisFigures struct {
	DataIndependentMs    Figure `json:"data_independent_ms"`
	GNMaxDataDependentMs Figure `json:"gnmax_data_dependent_ms"`
}

// benchMechanisms are the mechanisms measured, by MechanismNames: the
// presets (mechanism.Presets) for the given ensemble of 10-class voters,
// nzc also with Gaussian noise, and sessions whose K is large enough never
// to stop during the run.
func benchMechanisms(teachers int) map[string]mechanism.Params {
	out := map[string]mechanism.Params{}
	for name, p := range mechanism.Presets() {
		out[name] = p.ForEnsemble(teachers, 10)
	}
	lap := out[string(mechanism.NZC)]
	gauss := lap
	gauss.Noise, gauss.Sigma, gauss.Scale = mechanism.NoiseGaussian, lap.Scale, 0
	delete(out, string(mechanism.NZC))
	out["nzc-laplace"], out["nzc-gaussian"] = lap, gauss
	for name, p := range out {
		if p.Mechanism.Sessions() {
			p.MaxRefusals = 1 << 30
			out[name] = p
		}
	}
	return out
}

// MechanismNames lists the mechanisms a run measures, in the order a
// report shows them: every registered mechanism, nzc once with each noise.
func MechanismNames() []string {
	var names []string
	for _, k := range mechanism.Kinds() {
		if k == mechanism.NZC {
			names = append(names, "nzc-laplace", "nzc-gaussian")
			continue
		}
		names = append(names, string(k))
	}
	return names
}

// histograms returns n 10-class histograms of the given number of teachers
// in which between half and all of them agree.
func histograms(n, teachers int, seed uint64) []mechanism.Histogram {
	r := mrand.New(mrand.NewPCG(seed, 2))
	hs := make([]mechanism.Histogram, n)
	for i := range hs {
		h := make(mechanism.Histogram, 10)
		agree := teachers/2 + r.IntN(teachers-teachers/2+1)
		h[r.IntN(10)] = agree
		for range teachers - agree {
			h[r.IntN(10)]++
		}
		hs[i] = h
	}
	return hs
}

func runMechanism(ctx context.Context, cfg Config, progress Progress) (MechanismSection, error) {
	const teachers = 250
	sec := MechanismSection{Teachers: teachers, Classes: 10, AnswersPerS: map[string]Figure{}, AnalysisCount: cfg.AnalysisQueries}
	hs := histograms(cfg.MechanismQueries, teachers, cfg.Seed)
	params := benchMechanisms(teachers)
	names := MechanismNames()
	total := len(names) + 2
	for i, name := range names {
		progress("mechanism "+name, i, total)
		f, err := repeat(ctx, cfg.Reps, func(int) (float64, error) {
			m, err := mechanism.New(params[name])
			if err != nil {
				return 0, err
			}
			start := time.Now()
			if _, err := mechanism.AnswerBatch(m, rand.Reader, hs); err != nil {
				return 0, fmt.Errorf("%s: %w", name, err)
			}
			return float64(len(hs)) / time.Since(start).Seconds(), nil
		})
		if err != nil {
			return sec, err
		}
		sec.AnswersPerS[name] = f
	}
	g := mechanism.DefaultGrid()
	ahs := histograms(cfg.AnalysisQueries, teachers, cfg.Seed+1)
	gn := params["gnmax"]
	var err error
	progress("mechanism analysis", len(names), total)
	sec.Analysis.DataIndependentMs, err = repeat(ctx, cfg.Reps, func(int) (float64, error) {
		start := time.Now()
		ch, err := gn.Charge(g, len(ahs), 0)
		if err != nil {
			return 0, err
		}
		if _, err := ch.Epsilon(1e-5); err != nil {
			return 0, err
		}
		return ms(time.Since(start)), nil
	})
	if err != nil {
		return sec, err
	}
	progress("mechanism analysis", len(names)+1, total)
	sec.Analysis.GNMaxDataDependentMs, err = repeat(ctx, cfg.Reps, func(int) (float64, error) {
		start := time.Now()
		c, _, err := mechanism.GNMaxDataDependentBound(g, ahs, gn.Sigma, mechanism.QDiscrete)
		if err != nil {
			return 0, err
		}
		if _, err := c.Epsilon(1e-5); err != nil {
			return 0, err
		}
		return ms(time.Since(start)), nil
	})
	progress("mechanism", total, total)
	return sec, err
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
