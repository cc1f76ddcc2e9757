package main

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"time"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/bench"
	"github.com/nzcfed/nzc/cmd/internal/cli"
	mlprogress "github.com/nzcfed/nzc/ml/progress"
)

// benchLong is nzc bench's help: what each section measures.
const benchLong = `Measure, in one run on this machine:

  mechanism  answers per second of every aggregation mechanism, and the time
             to analyse 10,000 queries (data-independent, and GNMax with the
             data-dependent bound)
  ledger     signed charges committed per second, and the p50/p99 latency, on
             a 3-auditor raft cluster over loopback mutual TLS with durable
             stores, each charge's receipt gathered and verified (and the
             same without receipts, for the cost of proofs)
  inference  ensemble votes per second of 250 MNIST teachers (MLP and CNN),
             and the fraction of the machine's measured GEMM throughput
  e2e        labels per second through a whole federation on loopback
             (3 hospitals, 3 auditors, 1 student; QUIC, age, raft) and through
             an in-process pipeline with the same teachers and mechanism, and
             their ratio
  wan        (only when named) the same federation with every link through
             an impairing relay on loopback: labels per second and p50/p99
             batch latency unimpaired, with every link at 40 ms each way and
             1% datagram loss, and with one hospital at 150 ms; the ratios to
             the unimpaired run; and that no batch was lost or charged twice
  hostile    (only when named) the e2e federation's honest labels per second
             alone and beside a hostile hospital that sends junk Hellos,
             opens more connections than allowed, leaves request streams
             half sent, sends oversized and forbidden frames and floods the
             aggregator with relayed ledger commands; their ratio, the
             process's peak resident memory in both, and that no honest
             batch was lost or charged twice; then the honest labels per
             second while one hospital answers every batch only at its
             deadline (--batch-deadline), over those beside none:
             stalling_ratio; and, in a second federation under the nzc-svt
             preset whose last hospital (a third of the teachers) votes
             against the others, the honest hospitals' largest ε and one
             session's ε: svt_burn
  scale      (only when named) the ledger's state machine over an auditor's
             history store, in this process, driven to --scale-charges
             charges: at 1,000, 10,000 and every 100,000 charges the heap above
             the empty ledger, the resident size (anonymous and file-backed
             apart), the apply rate and the snapshot's size; then the
             snapshot's time, restart to ready (open the history, restore
             the snapshot), the rate and peak memory of verifying the
             export (written to a file as an auditor streams it), and the
             growth from decade to decade as ratios
  federation (only when named) federations of --federation-hospitals
             hospitals (10, 30 and 100) on loopback, each with the same
             --federation-teachers (300) split over its hospitals: labels per
             second against the in-process limit (the e2e section's pipeline
             with all the teachers as one ensemble), the size of a charge
             and one auditor's time to apply it, in all and per hospital,
             the heap the aggregator's code holds, and the process's peak
             heap and resident memory

Every figure is measured several times and reported with its median and
spread (min, max). The teachers have random weights: inference costs the same
whatever they learned. Queries are MNIST test images from --data when it holds
MNIST (scripts/fetch-data.sh), random images otherwise. The parties' keys and
data directories live in a temporary directory removed at the end.

The machine should be otherwise idle: other work on it lowers every figure.`

// benchExamples are nzc bench's examples, each runnable as written.
const benchExamples = `  # The standard run (a few minutes):
  nzc bench

  # A quick run (under two minutes), as JSON for a report:
  nzc bench --quick --format json > bench.json

  # Profile the whole federation's run:
  nzc bench --quick --sections e2e --cpuprofile e2e.prof && go tool pprof -top e2e.prof

  # The federation as if across a wide-area network:
  nzc bench --quick --sections wan

  # The federation beside a hostile hospital:
  nzc bench --quick --sections hostile

  # How the ledger grows with its history, to 10⁶ charges (about 5 minutes;
  # --quick: 10,000 charges; --scale-history memory: as before the history
  # moved to disk):
  nzc bench --sections scale
  nzc bench --quick --sections scale

  # Federations of 10, 30 and 100 hospitals sharing 300 teachers:
  nzc bench --sections federation
  nzc bench --quick --sections federation --federation-hospitals 3,10

  # Only the figures' medians, from the JSON:
  nzc bench --quick --format json | jq '.e2e.ratio.median, .ledger.charges_per_s.median'`

func newBenchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "bench",
		Short:   "Measure the mechanisms, the ledger, the teachers' inference and the whole federation on this machine",
		Long:    benchLong,
		Example: benchExamples,
		Args:    cobra.NoArgs,
	}
	quick := cmd.Flags().Bool("quick", false, "fewer repetitions and queries: under two minutes")
	dataDir := cmd.Flags().String("data", "data/mnist", "directory with MNIST's idx files (random images when absent)")
	reps := cmd.Flags().Int("reps", 0, "repetitions of every figure (default 5, or 3 with --quick)")
	teachers := cmd.Flags().Int("teachers", 0, "teachers in the ensemble, split over the 3 hospitals in e2e (default 250)")
	e2eQueries := cmd.Flags().Int("e2e-queries", 0, "queries labelled per e2e repetition (default 2048, or 512 with --quick)")
	charges := cmd.Flags().Int("charges", 0, "ledger charges per repetition (default 5000, or 2000 with --quick)")
	submitters := cmd.Flags().Int("submitters", 0, "concurrent clients submitting ledger charges (default 64)")
	ledgerProofs := cmd.Flags().Bool("ledger-proofs", true, "in the ledger section, also wait for and verify every charge's receipt (a majority's cosigned checkpoint and the inclusion proof), as a release does; the same run without receipts is reported beside it")
	inferQueries := cmd.Flags().Int("inference-queries", 0, "queries per inference repetition for the MLP, a quarter for the CNN (default 1024, or 256 with --quick)")
	mechQueries := cmd.Flags().Int("mechanism-queries", 0, "histograms answered per mechanism and repetition (default 20000, or 5000 with --quick)")
	analysis := cmd.Flags().Int("analysis-queries", 10000, "queries analysed per repetition")
	batch := cmd.Flags().Int("batch", 256, "queries per batch in e2e")
	window := cmd.Flags().Int("window", 2, "batches the student asks at once in e2e")
	modelName := cmd.Flags().String("model", "mlp", "the teachers' architecture in e2e: mlp or cnn")
	wanQueries := cmd.Flags().Int("wan-queries", 0, "queries labelled per wan repetition and scenario (default 512, or 256 with --quick)")
	wanBatch := cmd.Flags().Int("wan-batch", 32, "queries per batch in wan")
	batchDeadline := cmd.Flags().Duration("batch-deadline", bench.DefaultBatchDeadline, "the aggregator's batch deadline outside wan: what the stalling hospital of hostile makes a batch wait once")
	sections := cmd.Flags().StringSlice("sections", nil, "run only these sections: mechanism, inference, ledger, e2e, wan, hostile, scale, federation (default all but wan, hostile, scale and federation)")
	scaleCharges := cmd.Flags().Int("scale-charges", 0, "charges the scale section drives the ledger to (default 1000000, or 10000 with --quick)")
	scaleHistory := cmd.Flags().String("scale-history", "disk", "where the scale section's ledger keeps its history: disk (an auditor's bbolt store) or memory")
	scaleExport := cmd.Flags().String("scale-export", "", "write the scale section's export to this file and keep it (verify it with: nzc ledger verify --export FILE --unpinned)")
	fedHospitals := cmd.Flags().IntSlice("federation-hospitals", []int{10, 30, 100}, "the federation section's sizes, in hospitals")
	fedTeachers := cmd.Flags().Int("federation-teachers", 300, "teachers split over the hospitals of each federation in the federation section")
	fedQueries := cmd.Flags().Int("federation-queries", 0, "queries labelled per federation and repetition in the federation section (default 2048, or 512 with --quick)")
	cpuProfile := cmd.Flags().String("cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	verbose := cmd.Flags().Bool("verbose", false, "log the parties' warnings on stderr")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		cfg := bench.Full()
		if *quick {
			cfg = bench.Quick()
		}
		set := func(name string, v int, dst *int) {
			if cmd.Flags().Changed(name) {
				*dst = v
			}
		}
		set("reps", *reps, &cfg.Reps)
		set("teachers", *teachers, &cfg.Teachers)
		set("e2e-queries", *e2eQueries, &cfg.E2EQueries)
		set("charges", *charges, &cfg.Charges)
		set("submitters", *submitters, &cfg.Submitters)
		cfg.LedgerWithoutProofs = !*ledgerProofs
		set("mechanism-queries", *mechQueries, &cfg.MechanismQueries)
		set("analysis-queries", *analysis, &cfg.AnalysisQueries)
		set("batch", *batch, &cfg.BatchSize)
		set("window", *window, &cfg.Window)
		set("wan-queries", *wanQueries, &cfg.WANQueries)
		set("wan-batch", *wanBatch, &cfg.WANBatchSize)
		set("scale-charges", *scaleCharges, &cfg.ScaleCharges)
		cfg.ScaleHistory = *scaleHistory
		cfg.ScaleExport = *scaleExport
		set("federation-teachers", *fedTeachers, &cfg.FederationTeachers)
		set("federation-queries", *fedQueries, &cfg.FederationQueries)
		if cmd.Flags().Changed("federation-hospitals") {
			cfg.FederationHospitals = *fedHospitals
		}
		if cmd.Flags().Changed("inference-queries") {
			cfg.MLPQueries, cfg.CNNQueries = *inferQueries, max(1, *inferQueries/4)
		}
		cfg.Model, cfg.DataDir, cfg.Sections, cfg.BatchDeadline = *modelName, *dataDir, *sections, *batchDeadline
		if err := cfg.Validate(); err != nil {
			return err
		}
		if *cpuProfile != "" {
			pf, err := os.Create(*cpuProfile)
			if err != nil {
				return fmt.Errorf("create the CPU profile: %w", err)
			}
			defer pf.Close()
			if err := pprof.StartCPUProfile(pf); err != nil {
				return fmt.Errorf("start the CPU profile: %w", err)
			}
			defer pprof.StopCPUProfile()
		}
		log := slog.New(slog.DiscardHandler)
		if *verbose {
			log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
		bar := mlprogress.NewOrLines(cmd.ErrOrStderr(), nil)
		rep, err := bench.Run(cmd.Context(), cfg, func(section string, done, total int) {
			bar.Update(section, done, total, "steps")
		}, log)
		bar.Done()
		if err != nil {
			return err
		}
		return cli.Print(cmd.OutOrStdout(), f, rep, func(w io.Writer) error { return printBench(w, rep) })
	})
}

func printBench(w io.Writer, r *bench.Report) error {
	bw := bufio.NewWriter(w)
	fig := func(name string, f bench.Figure, unit string) {
		fmt.Fprintf(bw, "  %-34s %12.4g %-10s (%d reps, min %.4g, max %.4g)\n", name, f.Median, unit, f.Reps, f.Min, f.Max)
	}
	fmt.Fprintf(bw, "machine: %s/%s, %d CPUs, %s; run took %s\n\n", r.Machine.GOOS, r.Machine.GOARCH, r.Machine.CPUs, r.Machine.GoVersion,
		time.Duration(r.Seconds*float64(time.Second)).Round(time.Second))
	if r.Mechanism.Teachers > 0 {
		fmt.Fprintf(bw, "mechanism (%d teachers, %d classes, crypto/rand noise)\n", r.Mechanism.Teachers, r.Mechanism.Classes)
		for _, name := range bench.MechanismNames() {
			fig(name, r.Mechanism.AnswersPerS[name], "answers/s")
		}
		fig(fmt.Sprintf("analyse %d, data-independent", r.Mechanism.AnalysisCount), r.Mechanism.Analysis.DataIndependentMs, "ms")
		fig(fmt.Sprintf("analyse %d, GNMax data-dependent", r.Mechanism.AnalysisCount), r.Mechanism.Analysis.GNMaxDataDependentMs, "ms")
	}
	if r.Ledger.Nodes > 0 {
		fmt.Fprintf(bw, "\nledger (%d auditors, durable stores, %d charges from %d clients per rep)\n", r.Ledger.Nodes, r.Ledger.Charges, r.Ledger.Submitters)
		what := "charges committed"
		if r.Ledger.Proofs {
			what = "charges committed and proven"
		}
		fig(what, r.Ledger.ChargesPerS, "/s")
		fig("p50 latency", r.Ledger.P50Ms, "ms")
		fig("p99 latency", r.Ledger.P99Ms, "ms")
		if w := r.Ledger.WithoutProofs; w != nil {
			fig("without receipts: charges committed", w.ChargesPerS, "/s")
			fig("without receipts: p50 latency", w.P50Ms, "ms")
			fig("without receipts: p99 latency", w.P99Ms, "ms")
			fig("cost of proofs (rate without / with)", r.Ledger.ProofCost, "×")
		}
	}
	if r.Inference.Teachers > 0 {
		fmt.Fprintf(bw, "\ninference (%d teachers; %s)\n", r.Inference.Teachers, r.Inference.Data)
		fig(fmt.Sprintf("GEMM %d×%d", r.Inference.GEMMSize, r.Inference.GEMMSize), r.Inference.GEMMGFLOPs, "GFLOP/s")
		for _, v := range []struct {
			name string
			v    bench.Votes
		}{{"mlp", r.Inference.MLP}, {"cnn", r.Inference.CNN}} {
			fig(v.name+" votes", v.v.VotesPerS, "queries/s")
			fig(v.name+" throughput", v.v.GFLOPs, "GFLOP/s")
			fig(v.name+" fraction of GEMM", v.v.FractionOfGEMM, "")
			fmt.Fprintf(bw, "    (FLOPs counted as dense; %.0f%% of the inputs are zero, which the GEMM skips)\n", 100*v.v.ZeroInputs)
			if d := v.v.Dense; d != nil {
				fig(v.name+" votes, dense inputs", d.VotesPerS, "queries/s")
				fig(v.name+" throughput, dense inputs", d.GFLOPs, "GFLOP/s")
				fig(v.name+" fraction of GEMM, dense inputs", d.FractionOfGEMM, "")
			}
		}
	}
	if r.E2E.Hospitals > 0 {
		e := r.E2E
		fmt.Fprintf(bw, "\ne2e (%d hospitals, %d auditors, %d student; %d %s teachers, %s, batches of %d, %d in flight, %d queries per rep)\n",
			e.Hospitals, e.Auditors, e.Students, e.Teachers, e.Model, e.Mechanism, e.BatchSize, e.Window, e.Queries)
		fig("federation", e.FederationLabelsPerS, "labels/s")
		fig("in-process", e.InprocessLabelsPerS, "labels/s")
		fig("ratio", e.Ratio, "")
		if e.CPURatio != nil {
			fig("federation CPU", *e.FederationCPUMsPerLabel, "ms/label")
			fig("in-process CPU", *e.InprocessCPUMsPerLabel, "ms/label")
			fig("CPU ratio (in-process/federation)", *e.CPURatio, "")
		}
	}
	if wn := r.WAN; wn.Batches > 0 {
		fmt.Fprintf(bw, "\nwan (every link through a relay; %d batches of %d per rep, one at a time; batch deadline %.0f ms)\n",
			wn.Batches, wn.BatchSize, wn.BatchDeadlineMs)
		for _, sc := range wn.Scenarios {
			fmt.Fprintf(bw, "  %s\n", sc.Name)
			fig("labels", sc.LabelsPerS, "/s")
			fmt.Fprintf(bw, "    p50 %.0f ms, p99 %.0f ms a batch; ratios to unimpaired: labels/s %.2f, p99 %.2f\n", sc.P50Ms, sc.P99Ms, sc.LabelsRatio, sc.P99Ratio)
			fmt.Fprintf(bw, "    %d datagrams dropped; batches lost %d, charged twice %d\n", sc.Dropped, sc.Lost, sc.Twice)
		}
	}
	if h := r.Hostile; h.Queries > 0 {
		fmt.Fprintf(bw, "\nhostile (%d queries per rep in batches of %d, window %d; a hostile hospital beside the honest parties)\n", h.Queries, h.BatchSize, h.Window)
		fig("honest only", h.HonestLabelsPerS, "labels/s")
		fig("under attack", h.UnderAttackLabelsPerS, "labels/s")
		fmt.Fprintf(bw, "  ratio %.2f; peak resident memory %.0f MiB honest, %.0f MiB under attack (bound: +%.0f MiB)\n", h.Ratio, h.HonestPeakRSSMiB, h.AttackPeakRSSMiB, h.RSSBoundMiB)
		a := h.Attacks
		fmt.Fprintf(bw, "  attacks: %d connections tried (%d refused), %d junk Hellos (%d accepted), %d half-sent streams, %d oversized or forbidden frames (%d served), %d relayed commands (%d limited)\n",
			a.Connections, a.ConnectionsRefused, a.Hellos, a.HellosAccepted, a.HalfSentStreams, a.Oversized, a.OversizedServed, a.Relays, a.RelaysLimited)
		fig("one hospital stalling", h.StallingLabelsPerS, "labels/s")
		fmt.Fprintf(bw, "  stalling ratio %.2f (the hospital answers each batch only at the %.0f s deadline)\n", h.StallingRatio, h.BatchDeadlineS)
		b := h.SVTBurn
		fmt.Fprintf(bw, "  nzc-svt (%s), %d of %d teachers voting against the others: %d of %d queries answered; honest hospitals' largest ε %.4g, one session's ε %.4g\n",
			b.Mechanism, b.AdversaryTeachers, b.Teachers, b.Answered, b.Queries, b.HonestMaxEpsilon, b.SessionEpsilon)
		fmt.Fprintf(bw, "  honest batches lost %d, charged twice %d\n", h.Lost, h.Twice)
	}
	if sc := r.Scale; sc.Charges > 0 {
		fmt.Fprintf(bw, "\nscale (the ledger's state machine to %d charges of 3 hospitals, history in %s)\n", sc.Charges, sc.History)
		fmt.Fprintf(bw, "  %10s %10s %9s %9s %9s %9s %10s %13s %12s\n", "charges", "entries", "heap MiB", "RSS MiB", "anon MiB", "file MiB", "applied/s", "CPU µs/charge", "snapshot B")
		for _, p := range sc.Points {
			fmt.Fprintf(bw, "  %10d %10d %9.1f %9.1f %9.1f %9.1f %10.0f %13.0f %12d\n", p.Charges, p.Entries, p.HeapMiB, p.RSSMiB, p.RSSAnonMiB, p.RSSFileMiB, p.ApplyPerS, p.ApplyCPUUs, p.SnapshotBytes)
		}
		fmt.Fprintf(bw, "  (RSS = anon, the process's own memory, + file, bbolt's mapped pages and the binary, which the kernel may drop)\n")
		fmt.Fprintf(bw, "  heap each charge adds: %.0f bytes\n", sc.HeapBytesPerCharge)
		fmt.Fprintf(bw, "  snapshot %d bytes in %.0f ms; restart to ready %.0f ms\n", sc.SnapshotBytes, sc.SnapshotMs, sc.RestartMs)
		fmt.Fprintf(bw, "  verify the export (%d bytes, from a file): %.0f entries/s (%.0f µs of CPU an entry), peak heap %.0f MiB, peak resident %.0f MiB\n", sc.ExportBytes, sc.VerifyEntriesPerS, sc.VerifyCPUUs, sc.VerifyPeakHeapMiB, sc.VerifyPeakRSSMiB)
		for _, g := range sc.Growth {
			fmt.Fprintf(bw, "  growth %-16s heap ×%.2f, RSS ×%.2f (anon ×%.2f), apply rate ×%.2f, CPU a charge ×%.2f, snapshot ×%.2f\n", g.Decade, g.Heap, g.RSS, g.RSSAnon, g.ApplyRate, g.ApplyCPU, g.SnapshotBytes)
		}
	}
	if fd := r.Federation; len(fd.Points) > 0 {
		fmt.Fprintf(bw, "\nfederation (%d %s teachers split over the hospitals, %s, batches of %d, %d in flight, %d queries per rep; in-process: the same teachers as one ensemble)\n",
			fd.Teachers, fd.Model, fd.Mechanism, fd.BatchSize, fd.Window, fd.Queries)
		fmt.Fprintf(bw, "  %9s %9s %9s %6s %9s %9s %9s %9s %10s %8s %9s %8s %8s %8s\n", "hospitals", "labels/s", "in-proc/s", "ratio",
			"CPU ms/l", "in-proc", "CPU ratio", "charge B", "B/hospital", "apply µs", "µs/hosp.", "agg MiB", "heap MiB", "RSS MiB")
		for _, p := range fd.Points {
			fmt.Fprintf(bw, "  %9d %9.1f %9.1f %6.2f %9.2f %9.2f %9.2f %9.0f %10.1f %8.0f %9.2f %8.1f %8.0f %8.0f\n", p.Hospitals, p.LabelsPerS.Median, p.InprocessLabelsPerS.Median,
				p.Ratio.Median, p.CPUMsPerLabel.Median, p.InprocessCPUMsPerLabel.Median, p.CPURatio.Median, p.ChargeBytes, p.ChargeBytesPerHospital,
				p.ApplyUsPerCharge, p.ApplyUsPerHospital, p.AggregatorHeapMiB, p.PeakHeapMiB, p.PeakRSSMiB)
		}
		for _, g := range fd.Growth {
			fmt.Fprintf(bw, "  growth %d→%d hospitals (×%.1f): labels/s ×%.2f, CPU a label ×%.2f, charge size ×%.2f, apply time ×%.2f, aggregator heap ×%.2f\n",
				g.From, g.To, g.Hospitals, g.LabelsPerS, g.CPUPerLabel, g.ChargeBytes, g.ApplyUs, g.AggHeap)
		}
	}
	fmt.Fprintln(bw, "\ntargets")
	for _, t := range r.Targets {
		verdict := "met"
		if !t.Met {
			verdict = "MISSED"
		}
		fmt.Fprintf(bw, "  %-56s %10.4g  goal %-7s %s\n", t.Name, t.Measured, t.Goal, verdict)
	}
	return bw.Flush()
}
