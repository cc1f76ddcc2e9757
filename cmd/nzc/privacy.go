package main

import (
	"bufio"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/mechanism"
)

func newPrivacyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "privacy",
		Short: "Analyse and sample the aggregation mechanisms",
		Long: `Analyse the privacy cost of answering vote histograms with an aggregation
mechanism, or sample its outputs.

Histograms are a JSON array of arrays of non-negative integers, one histogram
(one count per class) per query, read from a file or from standard input (-).`,
		Example: `  nzc privacy analyze --mechanism gnmax --sigma 40 votes.json
  nzc privacy sample --mechanism lnmax --scale 20 --trials 10000 --seed 1 votes.json`,
	}
	cmd.AddCommand(newPrivacyAnalyzeCommand(), newPrivacySampleCommand())
	return cmd
}

// mechFlags are the flags that describe a mechanism.
type mechFlags struct{ *cli.MechanismFlags }

func addMechFlags(cmd *cobra.Command) *mechFlags {
	return &mechFlags{cli.AddMechanismFlags(cmd, "gnmax", "number of teachers (default: the largest number of votes in any histogram)")}
}

// read reads the histograms from path ("-" for stdin) and the mechanism's
// parameters for them.
func (f *mechFlags) read(path string, stdin io.Reader) ([]mechanism.Histogram, mechanism.Params, error) {
	hs, err := readHistograms(path, stdin)
	if err != nil {
		return nil, mechanism.Params{}, err
	}
	p, err := f.params(hs)
	return hs, p, err
}

func (f *mechFlags) params(hs []mechanism.Histogram) (mechanism.Params, error) {
	p := f.Params()
	if p.Teachers == 0 {
		for _, h := range hs {
			s := 0
			for _, n := range h {
				s += n
			}
			p.Teachers = max(p.Teachers, s, 1)
		}
	}
	if len(hs) > 0 {
		// Every query has the classes of the first.
		p.Classes = len(hs[0])
	}
	for i, h := range hs {
		if err := h.Validate(p.Classes, p.Teachers); err != nil {
			return p, &QueryError{Query: i, Err: err}
		}
	}
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("%w; see --help for the parameters of each mechanism", err)
	}
	return p, nil
}

// ErrHistograms reports an unreadable histogram file.
var ErrHistograms = errors.New("histograms must be a JSON array of arrays of non-negative integers, one array per query")

// QueryError names the query whose histogram is bad.
type QueryError struct {
	Query int // 0-based
	Err   error
}

func (e *QueryError) Error() string { return fmt.Sprintf("query %d: %v", e.Query, e.Err) }
func (e *QueryError) Unwrap() error { return e.Err }

// readHistograms reads the histograms from path ("-" for r).
func readHistograms(path string, stdin io.Reader) ([]mechanism.Histogram, error) {
	var r io.Reader
	if path == "-" {
		r = stdin
	} else {
		fh, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("reading histograms: %w", err)
		}
		defer fh.Close()
		r = fh
	}
	return decodeHistograms(bufio.NewReader(r))
}

func decodeHistograms(r io.Reader) ([]mechanism.Histogram, error) {
	var raw []json.RawMessage
	dec := json.NewDecoder(r)
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHistograms, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the array", ErrHistograms)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("%w: the array is empty", ErrHistograms)
	}
	hs := make([]mechanism.Histogram, len(raw))
	for i, m := range raw {
		var h []int
		if err := json.Unmarshal(m, &h); err != nil {
			return nil, &QueryError{Query: i, Err: fmt.Errorf("%w: %v", ErrHistograms, err)}
		}
		if err := mechanism.Histogram(h).Validate(0, math.MaxInt); err != nil {
			return nil, &QueryError{Query: i, Err: err}
		}
		hs[i] = h
	}
	return hs, nil
}

// jfloat is a float64 whose JSON form is the string "inf" when unbounded.
type jfloat float64

func (f jfloat) MarshalJSON() ([]byte, error) {
	x := float64(f)
	switch {
	case math.IsInf(x, 1):
		return []byte(`"inf"`), nil
	case math.IsInf(x, -1):
		return []byte(`"-inf"`), nil
	case math.IsNaN(x):
		return []byte(`"nan"`), nil
	}
	return []byte(strconv.FormatFloat(x, 'g', -1, 64)), nil
}

func jfloats(xs []float64) []jfloat {
	out := make([]jfloat, len(xs))
	for i, x := range xs {
		out[i] = jfloat(x)
	}
	return out
}

func ftext(x float64) string {
	if math.IsInf(x, 1) {
		return "inf (unbounded)"
	}
	return strconv.FormatFloat(x, 'g', 6, 64)
}

func parseOrders(s string) (mechanism.Grid, error) {
	if s == "" {
		return mechanism.DefaultGrid(), nil
	}
	var os []float64
	for _, part := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
		if err != nil {
			return mechanism.Grid{}, fmt.Errorf("--orders: %q is not a number", part)
		}
		os = append(os, v)
	}
	g, err := mechanism.NewGrid(os)
	if err != nil {
		return g, fmt.Errorf("--orders: %w", err)
	}
	return g, nil
}

type analysis struct {
	Mechanism string           `json:"mechanism"`
	Params    mechanism.Params `json:"params"`
	Queries   int              `json:"queries"`
	Delta     jfloat           `json:"delta"`
	Orders    []float64        `json:"orders"`
	// Data-independent (safe to publish and to charge).
	Note               string   `json:"note,omitempty"`
	RDPDataIndependent []jfloat `json:"rdp_data_independent"`
	// Per query: the curve of an answered and of a refused query (absent
	// for nzc-svt, whose session has one fixed cost).
	RDPPerAnswered []jfloat `json:"rdp_data_independent_per_answered_query,omitempty"`
	RDPPerRefused  []jfloat `json:"rdp_data_independent_per_refused_query,omitempty"`
	// EpsilonLedger is the proven ε of an account holding only this
	// charge, as the ledger's gate converts: the smaller of the filter
	// conversion and the pure-ε sum. EpsilonDataIndependent is the tight
	// conversion, valid only for a composition fixed in advance.
	EpsilonLedger               jfloat   `json:"epsilon_ledger"`
	EpsilonDataIndependent      jfloat   `json:"epsilon_data_independent"`
	OrderDataIndependent        float64  `json:"epsilon_data_independent_order,omitempty"`
	EpsilonClassic              jfloat   `json:"epsilon_data_independent_classic"`
	DeltaTotal                  jfloat   `json:"delta_total"`
	MechanismDelta              jfloat   `json:"delta_mechanism"`
	DeltaNote                   string   `json:"delta_note,omitempty"`
	EpsilonPure                 jfloat   `json:"epsilon_pure"`
	PaperClaimEpsilon           *float64 `json:"paper_claim_epsilon,omitempty"`
	RDPDataDependent            []jfloat `json:"rdp_data_dependent,omitempty"`
	EpsilonDataDependent        *jfloat  `json:"epsilon_data_dependent,omitempty"`
	EpsilonDataDependentClassic *jfloat  `json:"epsilon_data_dependent_classic,omitempty"`
	DataDependentNote           string   `json:"data_dependent_note,omitempty"`
	LogQ                        []jfloat `json:"logq,omitempty"`
	// The same with the q bound that holds for the discrete Gaussian noise
	// the mechanisms sample (mechanism.QDiscrete).
	RDPDataDependentDiscrete     []jfloat `json:"rdp_data_dependent_discrete,omitempty"`
	EpsilonDataDependentDiscrete *jfloat  `json:"epsilon_data_dependent_discrete,omitempty"`
	LogQDiscrete                 []jfloat `json:"logq_discrete,omitempty"`

	SmoothSensitivity *ssOut `json:"smooth_sensitivity,omitempty"`
}

type ssOut struct {
	QBound                  string  `json:"q_bound"`
	Order                   float64 `json:"order"`
	Beta                    float64 `json:"beta"`
	Sigma                   float64 `json:"sigma"`
	ReleasedRDP             jfloat  `json:"released_rdp"`
	ReleaseRDP              jfloat  `json:"release_rdp"`
	Epsilon                 jfloat  `json:"epsilon"`
	EpsilonClassic          jfloat  `json:"epsilon_classic"`
	Delta                   jfloat  `json:"delta"`
	UnsafeDataDependent     jfloat  `json:"unsafe_data_dependent_rdp"`
	UnsafeSmoothSensitivity jfloat  `json:"unsafe_smooth_sensitivity"`
}

func newPrivacyAnalyzeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "analyze [histograms.json|-]",
		Short: "Print the privacy cost of answering the given vote histograms",
		Long: `Print the privacy cost of answering every histogram with a mechanism.

The data-independent cost holds whatever the votes are: it is what the ledger
charges. For nzc it is the paper mechanism's true cost, 2(c+1)/b (Laplace) or
α(c+1)²/σ² (Gaussian): astronomically large or unbounded ("inf"), not the
paper's ε≈0. For confident-gnmax every query is counted as answered (an upper
bound). For nzc-svt it is the session's fixed (ε, δ).

For gnmax and confident-gnmax the data-dependent bound of PATE 2018 is printed
too. It is computed from the raw votes and is NOT private: it must not be
published. --smooth-sensitivity publishes it properly: the data-dependent RDP
at one order plus Gaussian noise scaled by its smooth sensitivity, with the
release's own cost added.`,
		Example: `  # GNMax with σ = 40 on histograms in a file, data-independent and data-dependent:
  nzc privacy analyze --mechanism gnmax --sigma 40 votes.json

  # The paper's mechanism at its own settings (c = 1e100, γ = 1e10):
  echo '[[120,121,9]]' | nzc privacy analyze --mechanism nzc --noise laplace --scale 1e-10 --constant 1e100 -

  # Publish the data-dependent cost through smooth sensitivity, as JSON:
  nzc privacy analyze --mechanism gnmax --sigma 40 --smooth-sensitivity --ss-order 20 --format json votes.json`,
		Args: cobra.ExactArgs(1),
	}
	mf := addMechFlags(cmd)
	delta := cmd.Flags().Float64("delta", 1e-5, "δ of the (ε, δ) conversion")
	orders := cmd.Flags().String("orders", "", "comma-separated Rényi orders (default: the ledger's 153-order grid)")
	ss := cmd.Flags().Bool("smooth-sensitivity", false, "release the data-dependent cost with smooth-sensitivity noise (gnmax, confident-gnmax)")
	ssOrder := cmd.Flags().Float64("ss-order", 0, "Rényi order of the smooth-sensitivity release (default: the order of the data-independent optimum)")
	ssBeta := cmd.Flags().Float64("ss-beta", 0, "smoothness β of the release, below 1/(2·order) (default 0.4/order)")
	ssSigma := cmd.Flags().Float64("ss-sigma", 10, "noise multiplier of the smooth-sensitivity release")
	qBound := cmd.Flags().String("q-bound", "discrete", "bound on P[answer ≠ argmax] used by the release: discrete (holds for the noise sampled) or continuous (PATE 2018's formula)")
	seed := cmd.Flags().Uint64("seed", 0, "seed for the release noise, for reproducible analyses only (default: crypto/rand)")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, args []string, f string) error {
		g, err := parseOrders(*orders)
		if err != nil {
			return err
		}
		if math.IsNaN(*delta) || *delta <= 0 || *delta >= 1 {
			return fmt.Errorf("--delta must be in (0, 1), got %v", *delta)
		}
		hs, p, err := mf.read(args[0], cmd.InOrStdin())
		if err != nil {
			return err
		}
		var src mechanism.Source = rand.Reader
		if cmd.Flags().Changed("seed") {
			src = seededSource(*seed)
		}
		a, err := analyze(p, g, hs, *delta, *ss, mechanism.SmoothSensitivityParams{Order: *ssOrder, Beta: *ssBeta, Sigma: *ssSigma, Bound: mechanism.QBound(*qBound)}, src)
		if err != nil {
			return err
		}
		return cli.Print(cmd.OutOrStdout(), f, a, func(w io.Writer) error { return printAnalysis(w, a) })
	})
}

func analyze(p mechanism.Params, g mechanism.Grid, hs []mechanism.Histogram, delta float64, ss bool, ssp mechanism.SmoothSensitivityParams, src mechanism.Source) (*analysis, error) {
	a := &analysis{Mechanism: string(p.Mechanism), Params: p, Queries: len(hs), Delta: jfloat(delta), Orders: g.Orders()}
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
	a.EpsilonLedger = jfloat(min(filter.Epsilon, pure))
	a.RDPDataIndependent = jfloats(ch.RDP.Values())
	if p.Mechanism != mechanism.NZCSVT {
		qc, err := p.QueryCost(g)
		if err != nil {
			return nil, err
		}
		a.RDPPerAnswered, a.RDPPerRefused = jfloats(qc.Answered.Values()), jfloats(qc.Refused.Values())
	}
	a.EpsilonDataIndependent, a.OrderDataIndependent = jfloat(conv.Epsilon), conv.Order
	a.EpsilonClassic = jfloat(classic.Epsilon)
	a.DeltaTotal, a.MechanismDelta = jfloat(delta), jfloat(ch.Delta)
	a.EpsilonPure = jfloat(pure)
	switch p.Mechanism {
	case mechanism.NZC:
		zero := 0.0
		a.PaperClaimEpsilon = &zero
		a.Note = "with c far above the noise the output is the exact argmax, which one teacher can flip: the true cost is the one printed"
	case mechanism.ConfidentGNMax:
		a.Note = "every query is counted as answered (an upper bound)"
	case mechanism.NZCSVT:
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
			a.LogQ, a.LogQDiscrete = jfloats(logq), jfloats(logqd)
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
		e, ec, ed := jfloat(c.Epsilon), jfloat(cc.Epsilon), jfloat(cd.Epsilon)
		a.RDPDataDependent, a.EpsilonDataDependent, a.EpsilonDataDependentClassic = jfloats(dd.Values()), &e, &ec
		a.RDPDataDependentDiscrete, a.EpsilonDataDependentDiscrete = jfloats(ddd.Values()), &ed
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
		a.SmoothSensitivity = &ssOut{
			QBound: string(rel.Bound), Order: rel.Order, Beta: rel.Beta, Sigma: rel.Sigma,
			ReleasedRDP: jfloat(rel.Released), ReleaseRDP: jfloat(rel.ReleaseCost),
			Epsilon: jfloat(rel.Epsilon), EpsilonClassic: jfloat(rel.EpsilonClassic), Delta: jfloat(rel.Delta),
			UnsafeDataDependent: jfloat(rel.DataDependent), UnsafeSmoothSensitivity: jfloat(rel.SmoothSensitivity),
		}
	}
	return a, nil
}

func printAnalysis(w io.Writer, a *analysis) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "mechanism      %s\n", a.Mechanism)
	pj, _ := json.Marshal(a.Params)
	fmt.Fprintf(bw, "params         %s\n", pj)
	fmt.Fprintf(bw, "queries        %d\n", a.Queries)
	fmt.Fprintf(bw, "orders         %d (%v … %v)\n", len(a.Orders), a.Orders[0], a.Orders[len(a.Orders)-1])
	fmt.Fprintf(bw, "\ndata-independent (what the ledger charges)\n")
	if a.DeltaNote != "" {
		fmt.Fprintf(bw, "  ε = inf at δ = %s: %s\n", ftext(float64(a.DeltaTotal)), a.DeltaNote)
	} else {
		fmt.Fprintf(bw, "  ε = %s at δ = %s (proven, as the ledger's gate converts an account's charges)\n", ftext(float64(a.EpsilonLedger)), ftext(float64(a.DeltaTotal)))
		fmt.Fprintf(bw, "  ε = %s at δ = %s (tight conversion, order %v: holds only for a composition fixed in advance)\n", ftext(float64(a.EpsilonDataIndependent)), ftext(float64(a.DeltaTotal)), a.OrderDataIndependent)
		fmt.Fprintf(bw, "  ε = %s at δ = %s (classic conversion)\n", ftext(float64(a.EpsilonClassic)), ftext(float64(a.DeltaTotal)))
		if !math.IsInf(float64(a.EpsilonPure), 1) {
			fmt.Fprintf(bw, "  ε = %s at δ = %s (pure DP, summed; the mechanism's own δ is %s)\n", ftext(float64(a.EpsilonPure)), ftext(float64(a.DeltaTotal)), ftext(float64(a.MechanismDelta)))
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
		fmt.Fprintf(bw, "  ε = %s at δ = %v (tight), %s (classic): PATE 2018's q bound for continuous noise\n", ftext(float64(*a.EpsilonDataDependent)), float64(a.Delta), ftext(float64(*a.EpsilonDataDependentClassic)))
		fmt.Fprintf(bw, "  ε = %s at δ = %v (tight): q bound valid for the discrete Gaussian noise sampled\n", ftext(float64(*a.EpsilonDataDependentDiscrete)), float64(a.Delta))
	}
	if s := a.SmoothSensitivity; s != nil {
		fmt.Fprintf(bw, "\nsmooth-sensitivity release (publishable: a private estimate of the data-dependent cost, PATE 2018 §4; the proven cost is the data-independent one)\n")
		fmt.Fprintf(bw, "  order %v, β = %v, σ_s = %v, %s q bound\n", s.Order, s.Beta, s.Sigma, s.QBound)
		fmt.Fprintf(bw, "  released RDP %s + release cost %s → ε = %s at δ = %v (classic %s)\n",
			ftext(float64(s.ReleasedRDP)), ftext(float64(s.ReleaseRDP)), ftext(float64(s.Epsilon)), float64(s.Delta), ftext(float64(s.EpsilonClassic)))
	}
	return bw.Flush()
}
