package main

import (
	"crypto/rand"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/cmd/internal/privacy"
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
	hs, err := privacy.ReadHistograms(path, stdin)
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
			return p, &privacy.QueryError{Query: i, Err: err}
		}
	}
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("%w; see --help for the parameters of each mechanism", err)
	}
	return p, nil
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
		a, err := privacy.Analyze(p, g, hs, *delta, *ss, mechanism.SmoothSensitivityParams{Order: *ssOrder, Beta: *ssBeta, Sigma: *ssSigma, Bound: mechanism.QBound(*qBound)}, src)
		if err != nil {
			return err
		}
		return cli.Print(cmd.OutOrStdout(), f, a, a.Text)
	})
}
