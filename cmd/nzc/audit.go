package main

import (
	"bufio"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/cmd/internal/privacy"
	"github.com/nzcfed/nzc/internal/jsonnum"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/mechanism/audit"
)

type auditResult struct {
	Mechanism         string           `json:"mechanism"`
	Params            mechanism.Params `json:"params"`
	EpsilonAccounted  jsonnum.Float    `json:"epsilon_accounted"`
	DeltaAccounted    jsonnum.Float    `json:"delta_accounted"`
	EpsilonLowerBound jsonnum.Float    `json:"epsilon_lower_bound"`
	Witness           string           `json:"witness,omitempty"`
	EpsilonExact      *jsonnum.Float   `json:"epsilon_exact_two_class,omitempty"`
	ExactWitness      string           `json:"exact_witness,omitempty"`
	Pairs             []string         `json:"pairs"`
	PaperClaim        *float64         `json:"paper_claim_epsilon,omitempty"`
	PaperClaimRefuted *bool            `json:"paper_claim_refuted,omitempty"`
	// Unstable is nzc-svt's δ audit: how often a session answered a query
	// one teacher could flip, under each query strategy.
	Unstable []audit.UnstableResult `json:"unstable_answers,omitempty"`
	OK       bool                   `json:"ok"`
}

// deltaAuditConfidence is the confidence of nzc-svt's δ audit, whatever
// --confidence says: for K = 1 the first strategy's probability is the
// charged δ itself, so at confidence c a correct accounting would be
// called a violation in a share 1 − c of audits.
const deltaAuditConfidence = 1 - 1e-6

type auditReport struct {
	Trials     int           `json:"trials"`
	Teachers   int           `json:"teachers"`
	Confidence float64       `json:"confidence"`
	Delta      float64       `json:"delta"`
	Results    []auditResult `json:"results"`
}

func newAuditCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Bound every mechanism's ε from below by running it on worst-case neighbours",
		Long: `Run every mechanism many times on pairs of neighbouring vote histograms
(one teacher moves its vote) and bound its ε from below with Clopper–Pearson
intervals. With probability at least --confidence (per mechanism), the true ε
is at least the printed lower bound. The pairs have top-two gaps 0, 1 and 2,
gaps of one to eight noise scales (σ, or b for Laplace noise, where a noisy
argmax loses the most privacy) and the worst pair of the exact analysis;
nzc-svt runs whole sessions of several queries at its threshold, refusing and
stopping at its limit, with and without an unstable query; and its δ is
audited too: sessions are asked only unstable queries, or unstable ones after
queries far above or at the threshold, and the share of sessions that answer
an unstable query (the event the δ bounds) must not exceed the δ charged,
at confidence 1 − 1e-6 (for one refusal and only unstable queries that share
is the charged δ itself, so a lower confidence would call a correct
accounting a violation in as many audits).

Beside the sampled bound, the exact two-class ε is computed from the noise's
probability mass functions over every pair of two-class neighbours, without
sampling error (all mechanisms but nzc-svt).

The accounted ε (what the ledger charges per query; pure ε when the mechanism
has one, else the tight RDP conversion at --delta; nzc-svt: one session) must
never be below either: the verdict says whether it is.

For the source paper's nzc settings (c = 1e100, scale or σ 1e-10) the paper's
claim, ε≈0, is printed beside the lower bound, which refutes it.`,
		Example: `  # The default audit (about a minute):
  nzc audit

  # A quick, reproducible audit as JSON:
  nzc audit --trials 5000 --seed 1 --format json

  # Audit one mechanism at other parameters:
  nzc audit --mechanism gnmax --sigma 2 --trials 50000`,
		Args: cobra.NoArgs,
	}
	mf := addMechFlags(cmd)
	trials := cmd.Flags().Int("trials", 200000, "runs per histogram")
	cmd.Flags().Lookup("teachers").Usage = "number of teachers of the audited histograms, at least 4 (default 100)"
	teachers := &mf.P.Teachers
	confidence := cmd.Flags().Float64("confidence", 0.95, "probability that each mechanism's lower bound holds")
	delta := cmd.Flags().Float64("delta", 1e-5, "δ for mechanisms without a pure ε")
	seed := cmd.Flags().Uint64("seed", 0, "seed of a deterministic noise source (default: crypto/rand)")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		if *teachers == 0 {
			*teachers = 100
		}
		if *teachers < 4 {
			return fmt.Errorf("--teachers must be at least 4, got %d", *teachers)
		}
		var src mechanism.Source = rand.Reader
		if cmd.Flags().Changed("seed") {
			src = seededSource(*seed)
		}
		cases := audit.DefaultCases(*teachers)
		if cmd.Flags().Changed("mechanism") {
			// Audit only the mechanism given by the flags.
			p, err := mf.params([]mechanism.Histogram{{*teachers / 2, *teachers - *teachers/2}})
			if err != nil {
				return err
			}
			cases = []audit.Case{{Params: p}}
		}
		rep := auditReport{Trials: *trials, Teachers: *teachers, Confidence: *confidence, Delta: *delta}
		cfg := audit.Config{Trials: *trials, Confidence: *confidence, Delta: *delta}
		prog := progress(cmd.ErrOrStderr(), "auditing")
		total, base := 0, 0
		for _, c := range cases {
			total += len(audit.CasePairs(c.Params)) * 2 * *trials
			if c.Params.Mechanism.Sessions() {
				total += len(audit.Strategies(c.Params)) * *trials
			}
		}
		for _, c := range cases {
			pairs := audit.CasePairs(c.Params)
			r, err := audit.Run(cmd.Context(), src, c, pairs, cfg, func(done int) { prog(base+done, total) })
			if err != nil {
				return err
			}
			base += len(pairs) * 2 * *trials
			ar := auditResult{
				Mechanism: string(r.Params.Mechanism), Params: r.Params,
				EpsilonAccounted: jsonnum.Float(r.EpsilonAccounted), DeltaAccounted: jsonnum.Float(r.DeltaAccounted),
				EpsilonLowerBound: jsonnum.Float(r.EpsilonLowerBound), Witness: r.Witness, PaperClaim: r.PaperClaim, OK: r.OK,
			}
			for _, p := range pairs {
				ar.Pairs = append(ar.Pairs, fmt.Sprintf("%s: %v vs %v", p.Name, p.D, p.D2))
			}
			if r.Exact != nil {
				e := jsonnum.Float(r.Exact.Epsilon)
				ar.EpsilonExact, ar.ExactWitness = &e, r.Exact.Witness
			}
			if r.PaperClaim != nil {
				refuted := r.EpsilonLowerBound > *r.PaperClaim || (r.Exact != nil && r.Exact.Epsilon > *r.PaperClaim)
				ar.PaperClaimRefuted = &refuted
			}
			if c.Params.Mechanism.Sessions() {
				for _, s := range audit.Strategies(c.Params) {
					u, err := audit.UnstableAudit(cmd.Context(), src, c.Params, s, *trials, deltaAuditConfidence, nil)
					if err != nil {
						return err
					}
					base += *trials
					prog(base, total)
					ar.Unstable = append(ar.Unstable, u)
					ar.OK = ar.OK && u.OK
				}
			}
			rep.Results = append(rep.Results, ar)
		}
		return cli.Print(cmd.OutOrStdout(), f, rep, func(w io.Writer) error { return printAudit(w, rep) })
	})
}

func printAudit(w io.Writer, rep auditReport) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%d runs per input, %d teachers, confidence %v per mechanism, δ = %v\n", rep.Trials, rep.Teachers, rep.Confidence, rep.Delta)
	fmt.Fprintln(bw)
	fmt.Fprintf(bw, "%-16s %-62s %14s %12s %12s %12s  %s\n", "mechanism", "params", "ε accounted", "δ", "ε ≥ (lower)", "ε exact", "verdict")
	for _, r := range rep.Results {
		pj, _ := json.Marshal(r.Params)
		params := string(pj)
		params = params[len(`{"mechanism":"`+r.Mechanism+`",`):]
		params = params[:len(params)-1]
		verdict := "ok: accounting ≥ lower bound"
		exact := "-"
		if r.EpsilonExact != nil {
			verdict = "ok: accounting ≥ exact ε and lower bound"
			exact = privacy.Text(float64(*r.EpsilonExact))
		}
		if !r.OK {
			verdict = "VIOLATION: accounted ε below the exact ε or the lower bound, or δ below the unstable answers' share"
		}
		fmt.Fprintf(bw, "%-16s %-62s %14s %12s %12s %12s  %s\n", r.Mechanism, params, privacy.Text(float64(r.EpsilonAccounted)), privacy.Text(float64(r.DeltaAccounted)), privacy.Text(float64(r.EpsilonLowerBound)), exact, verdict)
		fmt.Fprintf(bw, "%-16s   sampled witness: %s\n", "", r.Witness)
		if r.ExactWitness != "" {
			fmt.Fprintf(bw, "%-16s   exact witness:   %s\n", "", r.ExactWitness)
		}
		if r.PaperClaim != nil {
			state := "holds so far"
			if *r.PaperClaimRefuted {
				state = "REFUTED"
			}
			fmt.Fprintf(bw, "%-16s   the paper claims ε ≈ %v; measured ε ≥ %s, exact ε %s: claim %s\n", "", *r.PaperClaim, privacy.Text(float64(r.EpsilonLowerBound)), exact, state)
		}
		for _, u := range r.Unstable {
			state := "ok: δ ≥ lower bound"
			if !u.OK {
				state = "VIOLATION: δ below the lower bound"
			}
			fmt.Fprintf(bw, "%-16s   δ audit, %s: an unstable query answered in %d of %d sessions (probability in [%s, %s]): %s\n",
				"", u.Strategy, u.Released, u.Trials, privacy.Text(u.Lower), privacy.Text(u.Upper), state)
		}
	}
	return bw.Flush()
}
