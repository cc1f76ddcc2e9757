package main

import (
	"bufio"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"strconv"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/cmd/internal/privacy"
	"github.com/nzcfed/nzc/mechanism"
)

// seededSource returns a deterministic Source for reproducible runs.
func seededSource(seed uint64) mechanism.Source {
	var s [32]byte
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	return mrand.NewChaCha8(s)
}

// progress returns a function printing progress on w when w is a terminal,
// and a no-op otherwise.
func progress(w io.Writer, what string) func(done, total int) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return func(int, int) {}
	}
	last := -1
	return func(done, total int) {
		pct := 100 * done / max(total, 1)
		if pct == last {
			return
		}
		last = pct
		fmt.Fprintf(w, "\r%s: %d%%", what, pct)
		if done >= total {
			fmt.Fprintln(w)
		}
	}
}

// labelCounts is one histogram's counts, keyed "0", "1", …, "refused".
type labelCounts struct {
	labels  []int
	refused int
}

func (c labelCounts) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, n := range c.labels {
		b = append(b, '"')
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `":`...)
		b = strconv.AppendInt(b, int64(n), 10)
		b = append(b, ',')
	}
	b = append(b, `"refused":`...)
	b = strconv.AppendInt(b, int64(c.refused), 10)
	return append(b, '}'), nil
}

type sampleResult struct {
	Mechanism string           `json:"mechanism"`
	Params    mechanism.Params `json:"params"`
	Trials    int              `json:"trials"`
	Seed      *uint64          `json:"seed,omitempty"`
	Counts    []labelCounts    `json:"counts"`
}

func newPrivacySampleCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sample [histograms.json|-]",
		Short: "Run a mechanism many times on each histogram and count its outputs",
		Long: `Run a mechanism --trials times on each histogram and print how often each
label, and a refusal, came out. For nzc-svt every trial opens a fresh session
(fresh threshold noise) and asks it that one query.`,
		Example: `  # The paper's nzc at its settings always returns the exact argmax:
  echo '[[120,121,9],[121,120,9]]' | nzc privacy sample --mechanism nzc --scale 1e-10 --constant 1e100 --trials 1000 --seed 1 -

  # GNMax output frequencies as JSON:
  nzc privacy sample --mechanism gnmax --sigma 40 --trials 10000 --seed 7 --format json votes.json`,
		Args: cobra.ExactArgs(1),
	}
	mf := addMechFlags(cmd)
	trials := cmd.Flags().Int("trials", 1000, "runs per histogram")
	seed := cmd.Flags().Uint64("seed", 0, "seed of a deterministic noise source (default: crypto/rand)")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, args []string, f string) error {
		if *trials < 1 {
			return fmt.Errorf("--trials must be at least 1, got %d", *trials)
		}
		hs, p, err := mf.read(args[0], cmd.InOrStdin())
		if err != nil {
			return err
		}
		res := sampleResult{Mechanism: string(p.Mechanism), Params: p, Trials: *trials}
		var src mechanism.Source = rand.Reader
		if cmd.Flags().Changed("seed") {
			src = seededSource(*seed)
			res.Seed = seed
		}
		prog := progress(cmd.ErrOrStderr(), "sampling")
		total := *trials * len(hs)
		done := 0
		for qi, h := range hs {
			c := labelCounts{labels: make([]int, len(h))}
			m, err := mechanism.New(p)
			if err != nil {
				return err
			}
			for range *trials {
				if err := cmd.Context().Err(); err != nil {
					return err
				}
				if p.Mechanism.Sessions() {
					if m, err = mechanism.New(p); err != nil {
						return err
					}
				}
				o, err := m.Answer(src, h)
				if err != nil {
					return &privacy.QueryError{Query: qi, Err: err}
				}
				if o.Refused {
					c.refused++
				} else {
					c.labels[o.Label]++
				}
				done++
				if done%1024 == 0 {
					prog(done, total)
				}
			}
			res.Counts = append(res.Counts, c)
		}
		prog(total, total)
		return cli.Print(cmd.OutOrStdout(), f, res, func(w io.Writer) error {
			bw := bufio.NewWriter(w)
			pj, _ := json.Marshal(p)
			fmt.Fprintf(bw, "%s %s, %d trials per histogram\n", p.Mechanism, pj, *trials)
			for i, c := range res.Counts {
				fmt.Fprintf(bw, "query %d:", i)
				for l, n := range c.labels {
					fmt.Fprintf(bw, " %d:%d", l, n)
				}
				fmt.Fprintf(bw, " refused:%d\n", c.refused)
			}
			return bw.Flush()
		})
	})
}
