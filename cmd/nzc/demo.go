package main

import (
	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/federation/demo"
)

func newDemoCommand() *cobra.Command {
	o := demo.Defaults()
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a whole federation on this machine: auditors, aggregator, hospitals and a student",
		Long: `demo provisions a federation in a temporary directory and runs every party as
its own process on loopback: three auditors (raft over mutual TLS), the
aggregator, the hospitals — each training its own teachers on its own part of
MNIST — and a student, all speaking QUIC with mutual TLS and sealing their
payloads with age. The student holds the first --queries test images and asks
about as many of them as every hospital's --cap allows whatever the votes, in
its own order; every label is released only after the auditors' ledger has
committed its privacy charge. The student then trains on its labels and the
rest of its images (consistency training) and is evaluated on the rest of the
test set.

The report gives the labels received and refused, the student's accuracy,
each hospital's ε as the ledger accounts it against its cap, and the result of
verifying the final ledger independently (cosigned checkpoint, Merkle tree,
replay of every charge).

It needs MNIST in --data (scripts/fetch-data.sh puts it in data/mnist, and the
demo runs that script when it finds it) and, unless --bin names a directory
with the four party binaries, a Go toolchain and this source tree to build
them.`,
		Example: `  scripts/fetch-data.sh && go run ./cmd/nzc demo

  # The paper's mechanism, charged honestly: the ledger refuses it.
  go run ./cmd/nzc demo --mechanism nzc

  # Smaller and faster, keeping the directory with every log and the ledger:
  go run ./cmd/nzc demo --hospitals 2 --teachers-per-hospital 80 --queries 2000 --keep

  # The report as JSON:
  go run ./cmd/nzc demo --format json`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().IntVar(&o.Hospitals, "hospitals", o.Hospitals, "number of hospitals, each with its own part of the training data")
	cmd.Flags().IntVar(&o.Teachers, "teachers-per-hospital", o.Teachers, "teachers each hospital trains on disjoint shards")
	cmd.Flags().IntVar(&o.Queries, "queries", o.Queries, "test images the student holds: it asks about as many as --cap allows and learns from the rest unlabelled")
	cmd.Flags().StringVar(&o.Mechanism, "mechanism", o.Mechanism, "confident-gnmax, gnmax, lnmax, nzc-svt or nzc (the paper's)")
	cmd.Flags().StringVar(&o.Model, "model", o.Model, "the teachers' model: softmax, mlp, small-mlp or cnn")
	cmd.Flags().StringVar(&o.Data, "data", o.Data, "directory holding MNIST's idx files")
	cmd.Flags().Float64Var(&o.CapEpsilon, "cap", o.CapEpsilon, "each hospital's privacy cap ε (at δ = 1e-5)")
	cmd.Flags().StringVar(&o.Bin, "bin", o.Bin, "directory with nzc-auditor, nzc-aggregator, nzc-teacher and nzc-student (default: build them)")
	cmd.Flags().StringVar(&o.Dir, "dir", o.Dir, "directory to run in (default: a new temporary directory)")
	cmd.Flags().BoolVar(&o.Keep, "keep", o.Keep, "keep the directory: configurations, logs, ledger data")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", o.Timeout, "give up after this long")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		rep, err := demo.Run(cmd.Context(), o, cmd.ErrOrStderr())
		if err != nil {
			return err
		}
		return cli.Print(cmd.OutOrStdout(), f, rep, rep.Text)
	})
}
