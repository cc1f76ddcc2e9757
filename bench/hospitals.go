package bench

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nzcfed/nzc/internal/cputime"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// FederationSection is how the federation moves with its number of
// hospitals: for each count in Config.FederationHospitals, a whole
// federation on loopback in this process (as e2e: three auditors, the
// aggregator, the hospitals over QUIC, one student) with the same
// FederationTeachers split over its hospitals, against the in-process limit
// — the e2e section's in-process pipeline: the same teachers as one
// ensemble, the same mechanism and cost computation, with no network, no
// encryption and no ledger. Each repetition runs the in-process pipeline
// and then the federation on the same queries, and Ratio is theirs.
type FederationSection struct {
	Teachers  int                `json:"teachers"`
	Model     string             `json:"model"`
	Mechanism string             `json:"mechanism"`
	BatchSize int                `json:"batch_size"`
	Window    int                `json:"student_window"`
	Queries   int                `json:"queries_per_rep"`
	Data      string             `json:"data"`
	Points    []FederationPoint  `json:"points"`
	Growth    []FederationGrowth `json:"growth"`
}

// FederationPoint is the federation with Hospitals hospitals.
type FederationPoint struct {
	Hospitals           int    `json:"hospitals"`
	LabelsPerS          Figure `json:"labels_per_s"`
	InprocessLabelsPerS Figure `json:"inprocess_labels_per_s"`
	Ratio               Figure `json:"ratio"`
	// CPUMsPerLabel and InprocessCPUMsPerLabel are the process's CPU time
	// (every party's) a label took, and CPURatio the in-process pipeline's
	// over the federation's: the work the federation adds, which other
	// load on the machine disturbs less than the rates. Zero where the
	// process's CPU time cannot be read.
	CPUMsPerLabel          Figure `json:"cpu_ms_per_label"`
	InprocessCPUMsPerLabel Figure `json:"inprocess_cpu_ms_per_label"`
	CPURatio               Figure `json:"cpu_ratio"`
	// ChargeBytes is the mean size of the signed charge commands the
	// ledger holds after the run, and ChargeBytesPerHospital that over the
	// hospitals (a charge names each with its ensemble).
	ChargeBytes            float64 `json:"charge_bytes"`
	ChargeBytesPerHospital float64 `json:"charge_bytes_per_hospital"`
	// ApplyUsPerCharge is one auditor's state machine applying the
	// federation's charges again, in this process, one at a time with
	// their signatures checked (µs of wall clock a charge, the fastest of
	// five replays of the log; the batch's reservation is
	// ApplyUsPerReserve); ApplyChargesPerS is its rate and
	// ApplyUsPerHospital the time over the hospitals.
	Charges            int     `json:"charges"`
	ApplyUsPerCharge   float64 `json:"apply_us_per_charge"`
	ApplyChargesPerS   float64 `json:"apply_charges_per_s"`
	ApplyUsPerHospital float64 `json:"apply_us_per_hospital"`
	ApplyUsPerReserve  float64 `json:"apply_us_per_reserve"`
	// AggregatorHeapMiB is the largest heap in use by objects allocated
	// with the aggregator's code on the stack (the sampled heap profile,
	// scaled as pprof scales it), sampled while the federation labels;
	// PeakHeapMiB and PeakRSSMiB are the whole process's (every party).
	AggregatorHeapMiB float64 `json:"aggregator_heap_mib"`
	PeakHeapMiB       float64 `json:"peak_heap_mib"`
	PeakRSSMiB        float64 `json:"peak_rss_mib"`
	// StartS is the time to provision the federation and start its
	// parties until every hospital is connected and has its account.
	StartS float64 `json:"start_s"`
}

// FederationGrowth is the ratio of one point's figures to the point's
// before (its hospitals, From → To); 0 where the earlier figure is 0.
type FederationGrowth struct {
	From        int     `json:"from"`
	To          int     `json:"to"`
	Hospitals   float64 `json:"hospitals"`
	LabelsPerS  float64 `json:"labels_per_s"`
	CPUPerLabel float64 `json:"cpu_per_label"`
	ChargeBytes float64 `json:"charge_bytes"`
	ApplyUs     float64 `json:"apply_us_per_charge"`
	AggHeap     float64 `json:"aggregator_heap"`
}

func runFederation(ctx context.Context, cfg Config, all *data.Dataset, what string, progress Progress, log *slog.Logger) (FederationSection, error) {
	sec := FederationSection{Teachers: cfg.FederationTeachers, Model: cfg.Model, Mechanism: string(benchMechanism().Mechanism),
		BatchSize: cfg.BatchSize, Window: cfg.Window, Queries: cfg.FederationQueries, Data: what}
	q := all.Slice(0, cfg.FederationQueries)
	steps, step := len(cfg.FederationHospitals)*cfg.Reps, 0
	for pi, n := range cfg.FederationHospitals {
		t0 := time.Now()
		f, err := startFederation(ctx, cfg, log, nil, withHospitals(n, cfg.FederationTeachers))
		if err != nil {
			return sec, fmt.Errorf("start a federation of %d hospitals: %w", n, err)
		}
		p := FederationPoint{Hospitals: n, StartS: time.Since(t0).Seconds()}
		err = measureFederation(ctx, cfg, f, q, 1000*(pi+1), &p, func() { step++; progress("federation", step, steps) })
		if cerr := f.close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			return sec, fmt.Errorf("%d hospitals: %w", n, err)
		}
		sec.Points = append(sec.Points, p)
	}
	sec.Growth = federationGrowth(sec.Points)
	return sec, nil
}

// measureFederation labels q Reps times through f (each time a copy no
// other run labelled, tagged from tag) after the in-process pipeline, then
// reads f's ledger for the charges' size and apply time.
func measureFederation(ctx context.Context, cfg Config, f *federation, q *data.Dataset, tag int, p *FederationPoint, stepped func()) error {
	var fed, inproc, ratio, fedCPU, inCPU, cpuRatio []float64
	cpuOK := true
	heap, rss, agg := heapSampler(), sampleRSS(), aggregatorHeapSampler()
	for rep := range cfg.Reps {
		d := distinct(q, tag+rep)
		c0, ok0 := cputime.Process()
		in, err := inProcess(ctx, f, d, cfg.BatchSize)
		c1, ok1 := cputime.Process()
		if err != nil {
			return fmt.Errorf("in-process pipeline: %w", err)
		}
		st, err := f.newStudent(cfg.BatchSize, cfg.Window, quicnet.Backoff{Min: 20 * time.Millisecond, Max: 300 * time.Millisecond})
		if err != nil {
			return err
		}
		start := time.Now()
		res, err := st.Label(ctx, d, nil)
		if err != nil {
			return fmt.Errorf("federation: %w", err)
		}
		el := time.Since(start)
		c2, ok2 := cputime.Process()
		if res.Answered+res.Refused != d.Len() {
			return fmt.Errorf("federation labelled %d of %d queries", res.Answered+res.Refused, d.Len())
		}
		if cpuOK = cpuOK && ok0 && ok1 && ok2; cpuOK {
			perIn, perFed := ms(c1-c0)/float64(d.Len()), ms(c2-c1)/float64(d.Len())
			inCPU, fedCPU, cpuRatio = append(inCPU, perIn), append(fedCPU, perFed), append(cpuRatio, perIn/perFed)
		}
		r := float64(d.Len()) / el.Seconds()
		fed, inproc, ratio = append(fed, r), append(inproc, in), append(ratio, r/in)
		stepped()
	}
	p.AggregatorHeapMiB = float64(agg()) / mib
	p.PeakHeapMiB = float64(heap()) / mib
	p.PeakRSSMiB = rss.end()
	p.LabelsPerS, p.InprocessLabelsPerS, p.Ratio = NewFigure(fed), NewFigure(inproc), NewFigure(ratio)
	if cpuOK {
		p.CPUMsPerLabel, p.InprocessCPUMsPerLabel, p.CPURatio = NewFigure(fedCPU), NewFigure(inCPU), NewFigure(cpuRatio)
	}
	return chargeFigures(f, p)
}

// chargeFigures reads the ledger of f's first auditor, measures its charges'
// size, and applies its log again to fresh state machines, timing the
// charges and reservations: replayRounds times, keeping the fastest round
// (a shared machine only ever slows a round down).
func chargeFigures(f *federation, p *FederationPoint) error {
	st := f.machines[0].State()
	raw, err := st.Entries(0, st.TreeSize())
	if err != nil {
		return err
	}
	var best replayTimes
	for round := range replayRounds {
		t, err := replayLog(raw)
		if err != nil {
			return err
		}
		if round == 0 || t.charge+t.reserve < best.charge+best.reserve {
			best = t
		}
	}
	if best.charges == 0 {
		return fmt.Errorf("the ledger holds no charge after %s labels/s", fmtFigure(p.LabelsPerS))
	}
	n := float64(p.Hospitals)
	p.Charges = best.charges
	p.ChargeBytes = float64(best.chargeBytes) / float64(best.charges)
	p.ChargeBytesPerHospital = p.ChargeBytes / n
	p.ApplyUsPerCharge = float64(best.charge.Nanoseconds()) / 1e3 / float64(best.charges)
	p.ApplyChargesPerS = float64(best.charges) / best.charge.Seconds()
	p.ApplyUsPerHospital = p.ApplyUsPerCharge / n
	if best.reserves > 0 {
		p.ApplyUsPerReserve = float64(best.reserve.Nanoseconds()) / 1e3 / float64(best.reserves)
	}
	return nil
}

// replayRounds is how many times chargeFigures applies the log again.
const replayRounds = 5

// replayTimes is one replay of a log: its accepted charges and
// reservations, and the time applying them took.
type replayTimes struct {
	charges, reserves, chargeBytes int
	charge, reserve                time.Duration
}

// replayLog applies the commands of the encoded entries raw, in order, to a
// fresh state machine, checking that each comes out as the log says, and
// times the charges and reservations.
func replayLog(raw [][]byte) (replayTimes, error) {
	var t replayTimes
	fresh := ledger.New()
	for i, b := range raw {
		e, err := ledger.DecodeEntry(b)
		if err != nil {
			return t, fmt.Errorf("entry %d: %w", i, err)
		}
		if e.Record != nil {
			continue // a refusal record: its command is not in the log
		}
		c, err := ledger.DecodeCommand(e.Command)
		if err != nil {
			return t, fmt.Errorf("entry %d: %w", i, err)
		}
		t0 := time.Now()
		r, err := fresh.Apply(e.Command)
		took := time.Since(t0)
		if err != nil {
			return t, fmt.Errorf("applying entry %d again: %w", i, err)
		}
		if r.Status != e.Status {
			return t, fmt.Errorf("entry %d applied again is %s (%s), not %s as in the log", i, r.Status, r.Message, e.Status)
		}
		if e.Status != ledger.StatusAccepted {
			continue
		}
		switch c.Body.(type) {
		case *ledger.Charge:
			t.charges++
			t.chargeBytes += len(e.Command)
			t.charge += took
		case *ledger.Reserve:
			t.reserves++
			t.reserve += took
		}
	}
	return t, nil
}

func fmtFigure(f Figure) string { return fmt.Sprintf("%.4g", f.Median) }

func federationGrowth(ps []FederationPoint) []FederationGrowth {
	var out []FederationGrowth
	ratio := growthRatio
	for i := 1; i < len(ps); i++ {
		a, b := ps[i-1], ps[i]
		out = append(out, FederationGrowth{From: a.Hospitals, To: b.Hospitals, Hospitals: ratio(float64(b.Hospitals), float64(a.Hospitals)),
			LabelsPerS: ratio(b.LabelsPerS.Median, a.LabelsPerS.Median), CPUPerLabel: ratio(b.CPUMsPerLabel.Median, a.CPUMsPerLabel.Median), ChargeBytes: ratio(b.ChargeBytes, a.ChargeBytes),
			ApplyUs: ratio(b.ApplyUsPerCharge, a.ApplyUsPerCharge), AggHeap: ratio(b.AggregatorHeapMiB, a.AggregatorHeapMiB)})
	}
	return out
}

// federationTargets is the target of the largest federation.
func federationTargets(sec FederationSection) []Target {
	if len(sec.Points) == 0 {
		return nil
	}
	p := sec.Points[len(sec.Points)-1]
	return []Target{{Name: fmt.Sprintf("federation of %d hospitals / in-process, labels/s", p.Hospitals), Measured: p.Ratio.Median, Goal: "≥ 0.5", Met: p.Ratio.Median >= 0.5}}
}

// aggregatorPkg is the prefix of the aggregator's functions' names.
const aggregatorPkg = "github.com/nzcfed/nzc/party/aggregator."

// aggregatorHeapSampler reads, every 250 ms until the returned function is
// called, the heap in use by objects allocated with the aggregator's code on
// the stack, from the runtime's sampled heap profile (as of its last
// collection), and returns the largest reading.
func aggregatorHeapSampler() func() uint64 {
	var peak atomic.Uint64
	stop, done := make(chan struct{}), make(chan struct{})
	read := func() {
		if v := aggregatorHeap(); v > peak.Load() {
			peak.Store(v)
		}
	}
	go func() {
		defer close(done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				read()
			}
		}
	}()
	return func() uint64 {
		close(stop)
		<-done
		read()
		return peak.Load()
	}
}

// aggregatorHeap sums the in-use bytes of the heap profile's records whose
// stack holds an aggregator function, each scaled up for the profile's
// sampling as pprof does.
func aggregatorHeap() uint64 {
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, false)
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, false); ok {
			recs = recs[:n]
			break
		}
	}
	rate := float64(runtime.MemProfileRate)
	var sum float64
	for i := range recs {
		r := &recs[i]
		if r.InUseBytes() <= 0 || !stackHas(r.Stack(), aggregatorPkg) {
			continue
		}
		count, size := float64(r.InUseObjects()), float64(r.InUseBytes())
		if rate > 1 {
			size /= 1 - math.Exp(-size/count/rate)
		}
		sum += size
	}
	return uint64(sum)
}

func stackHas(pcs []uintptr, prefix string) bool {
	frames := runtime.CallersFrames(pcs)
	for {
		fr, more := frames.Next()
		if strings.HasPrefix(fr.Function, prefix) {
			return true
		}
		if !more {
			return false
		}
	}
}
