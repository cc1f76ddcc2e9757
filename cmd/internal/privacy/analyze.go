// Package privacy is the engine of `nzc privacy analyze`: it reads vote
// histograms and reports every cost of answering them with a mechanism
// (mechanism does the arithmetic): the proven, data-independent cost the
// ledger charges, the data-dependent one (never to be published) and its
// smooth-sensitivity release. It prints unbounded figures as "inf", for
// `nzc audit` too.
package privacy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"

	"github.com/nzcfed/nzc/internal/jsonnum"
	"github.com/nzcfed/nzc/mechanism"
)

// Report is every cost of answering a set of histograms with a mechanism:
// what `nzc privacy analyze` prints.
type Report struct {
	Mechanism string           `json:"mechanism"`
	Params    mechanism.Params `json:"params"`
	Queries   int              `json:"queries"`
	Delta     jsonnum.Float    `json:"delta"`
	Orders    []float64        `json:"orders"`
	// Data-independent (safe to publish and to charge).
	Note               string          `json:"note,omitempty"`
	RDPDataIndependent []jsonnum.Float `json:"rdp_data_independent"`
	// Per query: the curve of an answered and of a refused query (absent
	// for nzc-svt, whose session has one fixed cost).
	RDPPerAnswered []jsonnum.Float `json:"rdp_data_independent_per_answered_query,omitempty"`
	RDPPerRefused  []jsonnum.Float `json:"rdp_data_independent_per_refused_query,omitempty"`
	// EpsilonLedger is the proven ε of an account holding only this
	// charge, as the ledger's gate converts: the smaller of the filter
	// conversion and the pure-ε sum. EpsilonDataIndependent is the tight
	// conversion, valid only for a composition fixed in advance.
	EpsilonLedger               jsonnum.Float   `json:"epsilon_ledger"`
	EpsilonDataIndependent      jsonnum.Float   `json:"epsilon_data_independent"`
	OrderDataIndependent        float64         `json:"epsilon_data_independent_order,omitempty"`
	EpsilonClassic              jsonnum.Float   `json:"epsilon_data_independent_classic"`
	DeltaTotal                  jsonnum.Float   `json:"delta_total"`
	MechanismDelta              jsonnum.Float   `json:"delta_mechanism"`
	DeltaNote                   string          `json:"delta_note,omitempty"`
	EpsilonPure                 jsonnum.Float   `json:"epsilon_pure"`
	PaperClaimEpsilon           *float64        `json:"paper_claim_epsilon,omitempty"`
	RDPDataDependent            []jsonnum.Float `json:"rdp_data_dependent,omitempty"`
	EpsilonDataDependent        *jsonnum.Float  `json:"epsilon_data_dependent,omitempty"`
	EpsilonDataDependentClassic *jsonnum.Float  `json:"epsilon_data_dependent_classic,omitempty"`
	DataDependentNote           string          `json:"data_dependent_note,omitempty"`
	LogQ                        []jsonnum.Float `json:"logq,omitempty"`
	// The same with the q bound that holds for the discrete Gaussian noise
	// the mechanisms sample (mechanism.QDiscrete).
	RDPDataDependentDiscrete     []jsonnum.Float `json:"rdp_data_dependent_discrete,omitempty"`
	EpsilonDataDependentDiscrete *jsonnum.Float  `json:"epsilon_data_dependent_discrete,omitempty"`
	LogQDiscrete                 []jsonnum.Float `json:"logq_discrete,omitempty"`

	SmoothSensitivity *SmoothSensitivity `json:"smooth_sensitivity,omitempty"`
}

// SmoothSensitivity is the publishable release of the data-dependent cost.
type SmoothSensitivity struct {
	QBound                  string        `json:"q_bound"`
	Order                   float64       `json:"order"`
	Beta                    float64       `json:"beta"`
	Sigma                   float64       `json:"sigma"`
	ReleasedRDP             jsonnum.Float `json:"released_rdp"`
	ReleaseRDP              jsonnum.Float `json:"release_rdp"`
	Epsilon                 jsonnum.Float `json:"epsilon"`
	EpsilonClassic          jsonnum.Float `json:"epsilon_classic"`
	Delta                   jsonnum.Float `json:"delta"`
	UnsafeDataDependent     jsonnum.Float `json:"unsafe_data_dependent_rdp"`
	UnsafeSmoothSensitivity jsonnum.Float `json:"unsafe_smooth_sensitivity"`
}

// Analyze returns the costs of answering hs with p, on the orders of g, at
// the whole δ delta: the data-independent cost the ledger charges and, for
// gnmax and confident-gnmax, the data-dependent one (not private); with ss,
// also its smooth-sensitivity release (parameters ssp, noise from src).
func Analyze(p mechanism.Params, g mechanism.Grid, hs []mechanism.Histogram, delta float64, ss bool, ssp mechanism.SmoothSensitivityParams, src mechanism.Source) (*Report, error) {
	a := &Report{Mechanism: string(p.Mechanism), Params: p, Queries: len(hs), Delta: jsonnum.Float(delta), Orders: g.Orders()}
	ch, err := p.Charge(g, len(hs), 0)
	if err != nil {
		return nil, err
	}
	// delta is the whole δ: the mechanism's own additive δ comes out of it,
	// and when that is not below delta nothing is guaranteed at delta.
	inf := mechanism.Conversion{Epsilon: math.Inf(1), Delta: delta}
	conv, classic, filter, pure := inf, inf, inf, math.Inf(1)
	if rest := delta - ch.Delta; rest > 0 {
		if conv, err = ch.RDP.Epsilon(rest); err != nil {
			return nil, err
		}
		classic, _ = ch.RDP.EpsilonClassic(rest)
		filter, _ = ch.RDP.FilterEpsilon(rest)
		pure = ch.PureEpsilon
	} else {
		a.DeltaNote = fmt.Sprintf("the mechanism's own δ %.3g is not below δ = %g: no ε holds at that δ", ch.Delta, delta)
	}
	a.EpsilonLedger = jsonnum.Float(min(filter.Epsilon, pure))
	a.RDPDataIndependent = jsonnum.Floats(ch.RDP.Values())
	if !p.Mechanism.Sessions() {
		qc, err := p.QueryCost(g)
		if err != nil {
			return nil, err
		}
		a.RDPPerAnswered, a.RDPPerRefused = jsonnum.Floats(qc.Answered.Values()), jsonnum.Floats(qc.Refused.Values())
	}
	a.EpsilonDataIndependent, a.OrderDataIndependent = jsonnum.Float(conv.Epsilon), conv.Order
	a.EpsilonClassic = jsonnum.Float(classic.Epsilon)
	a.DeltaTotal, a.MechanismDelta = jsonnum.Float(delta), jsonnum.Float(ch.Delta)
	a.EpsilonPure = jsonnum.Float(pure)
	switch p.Mechanism {
	case mechanism.NZC:
		zero := 0.0
		a.PaperClaimEpsilon = &zero
		a.Note = "with c far above the noise the output is the exact argmax, which one teacher can flip: the true cost is the one printed"
	case mechanism.ConfidentGNMax:
		a.Note = "every query is counted as answered (an upper bound)"
	}
	if p.Mechanism.Sessions() {
		a.Note = "one session's fixed cost, whatever the number of queries; an unstable answer has probability within delta_mechanism"
	}
	if p.Mechanism == mechanism.GNMax || p.Mechanism == mechanism.ConfidentGNMax {
		var dd, ddd mechanism.Curve
		var logq, logqd []float64
		if p.Mechanism == mechanism.GNMax {
			if dd, logq, err = mechanism.GNMaxDataDependent(g, hs, p.Sigma); err != nil {
				return nil, err
			}
			if ddd, logqd, err = mechanism.GNMaxDataDependentBound(g, hs, p.Sigma, mechanism.QDiscrete); err != nil {
				return nil, err
			}
			a.LogQ, a.LogQDiscrete = jsonnum.Floats(logq), jsonnum.Floats(logqd)
		} else {
			if dd, err = mechanism.ConfidentDataDependent(g, hs, p.Threshold, p.Sigma1, p.Sigma2); err != nil {
				return nil, err
			}
			if ddd, err = mechanism.ConfidentDataDependentBound(g, hs, p.Threshold, p.Sigma1, p.Sigma2, mechanism.QDiscrete); err != nil {
				return nil, err
			}
		}
		c, err := dd.Epsilon(delta)
		if err != nil {
			return nil, err
		}
		cc, _ := dd.EpsilonClassic(delta)
		cd, _ := ddd.Epsilon(delta)
		e, ec, ed := jsonnum.Float(c.Epsilon), jsonnum.Float(cc.Epsilon), jsonnum.Float(cd.Epsilon)
		a.RDPDataDependent, a.EpsilonDataDependent, a.EpsilonDataDependentClassic = jsonnum.Floats(dd.Values()), &e, &ec
		a.RDPDataDependentDiscrete, a.EpsilonDataDependentDiscrete = jsonnum.Floats(ddd.Values()), &ed
		a.DataDependentNote = "computed from the raw votes (PATE 2018, Theorem 6): NOT differentially private, never publish it unsanitised; use --smooth-sensitivity. " +
			"rdp_data_dependent and logq use PATE 2018's bound for continuous Gaussian noise; the _discrete fields use a bound that holds for the discrete Gaussian noise sampled here"
	}
	if ss {
		if p.Mechanism != mechanism.GNMax && p.Mechanism != mechanism.ConfidentGNMax {
			return nil, fmt.Errorf("--smooth-sensitivity applies to gnmax and confident-gnmax, not %s", p.Mechanism)
		}
		if ssp.Order == 0 {
			ssp.Order = conv.Order
			if ssp.Order == 0 {
				ssp.Order = 20
			}
		}
		rel, err := mechanism.ReleaseSmoothSensitivity(src, p, hs, ssp, delta)
		if err != nil {
			return nil, err
		}
		a.SmoothSensitivity = &SmoothSensitivity{
			QBound: string(rel.Bound), Order: rel.Order, Beta: rel.Beta, Sigma: rel.Sigma,
			ReleasedRDP: jsonnum.Float(rel.Released), ReleaseRDP: jsonnum.Float(rel.ReleaseCost),
			Epsilon: jsonnum.Float(rel.Epsilon), EpsilonClassic: jsonnum.Float(rel.EpsilonClassic), Delta: jsonnum.Float(rel.Delta),
			UnsafeDataDependent: jsonnum.Float(rel.DataDependent), UnsafeSmoothSensitivity: jsonnum.Float(rel.SmoothSensitivity),
		}
	}
	return a, nil
}

// Text writes the report for a reader.
func (a *Report) Text(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "mechanism      %s\n", a.Mechanism)
	pj, _ := json.Marshal(a.Params)
	fmt.Fprintf(bw, "params         %s\n", pj)
	fmt.Fprintf(bw, "queries        %d\n", a.Queries)
	fmt.Fprintf(bw, "orders         %d (%v … %v)\n", len(a.Orders), a.Orders[0], a.Orders[len(a.Orders)-1])
	fmt.Fprintf(bw, "\ndata-independent (what the ledger charges)\n")
	if a.DeltaNote != "" {
		fmt.Fprintf(bw, "  ε = inf at δ = %s: %s\n", Text(float64(a.DeltaTotal)), a.DeltaNote)
	} else {
		fmt.Fprintf(bw, "  ε = %s at δ = %s (proven, as the ledger's gate converts an account's charges)\n", Text(float64(a.EpsilonLedger)), Text(float64(a.DeltaTotal)))
		fmt.Fprintf(bw, "  ε = %s at δ = %s (tight conversion, order %v: holds only for a composition fixed in advance)\n", Text(float64(a.EpsilonDataIndependent)), Text(float64(a.DeltaTotal)), a.OrderDataIndependent)
		fmt.Fprintf(bw, "  ε = %s at δ = %s (classic conversion)\n", Text(float64(a.EpsilonClassic)), Text(float64(a.DeltaTotal)))
		if !math.IsInf(float64(a.EpsilonPure), 1) {
			fmt.Fprintf(bw, "  ε = %s at δ = %s (pure DP, summed; the mechanism's own δ is %s)\n", Text(float64(a.EpsilonPure)), Text(float64(a.DeltaTotal)), Text(float64(a.MechanismDelta)))
		}
	}
	if a.PaperClaimEpsilon != nil {
		fmt.Fprintf(bw, "  the paper claims ε ≈ %v: false\n", *a.PaperClaimEpsilon)
	}
	if a.Note != "" {
		fmt.Fprintf(bw, "  note: %s\n", a.Note)
	}
	if a.EpsilonDataDependent != nil {
		fmt.Fprintf(bw, "\ndata-dependent, UNSAFE TO PUBLISH (PATE 2018 Theorem 6, from the raw votes)\n")
		fmt.Fprintf(bw, "  ε = %s at δ = %v (tight), %s (classic): PATE 2018's q bound for continuous noise\n", Text(float64(*a.EpsilonDataDependent)), float64(a.Delta), Text(float64(*a.EpsilonDataDependentClassic)))
		fmt.Fprintf(bw, "  ε = %s at δ = %v (tight): q bound valid for the discrete Gaussian noise sampled\n", Text(float64(*a.EpsilonDataDependentDiscrete)), float64(a.Delta))
	}
	if s := a.SmoothSensitivity; s != nil {
		fmt.Fprintf(bw, "\nsmooth-sensitivity release (publishable: a private estimate of the data-dependent cost, PATE 2018 §4; the proven cost is the data-independent one)\n")
		fmt.Fprintf(bw, "  order %v, β = %v, σ_s = %v, %s q bound\n", s.Order, s.Beta, s.Sigma, s.QBound)
		fmt.Fprintf(bw, "  released RDP %s + release cost %s → ε = %s at δ = %v (classic %s)\n",
			Text(float64(s.ReleasedRDP)), Text(float64(s.ReleaseRDP)), Text(float64(s.Epsilon)), float64(s.Delta), Text(float64(s.EpsilonClassic)))
	}
	return bw.Flush()
}
