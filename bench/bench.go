// Package bench measures the federation's throughput on this machine, in
// one run: the privacy mechanisms, the replicated ledger, the teachers'
// ensemble inference, and labels per second through the whole federation on
// loopback against an in-process pipeline doing the same inference,
// aggregation and accounting with no network, no encryption and no ledger.
//
// Every figure is measured Reps times and reported with its median and
// spread, since a shared machine is noisy.
package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"slices"
	"time"
)

// Config sizes a run. Quick and Full give the two standard sizes; tests use
// smaller ones.
type Config struct {
	// Reps is how many times each figure is measured.
	Reps int
	// Teachers is the ensemble size for inference and the federation (split
	// over the hospitals).
	Teachers int
	// MLPQueries and CNNQueries are the queries per repetition of the
	// inference section.
	MLPQueries, CNNQueries int
	// GEMMSize is the side of the square matrices of the GEMM reference,
	// measured for GEMMTime per repetition.
	GEMMSize int
	GEMMTime time.Duration
	// Charges is the number of signed charges per repetition of the ledger
	// section, sent by Submitters concurrent clients.
	Charges, Submitters int
	// LedgerWithoutProofs measures the ledger section without receipts
	// only; by default each repetition measures the charges without and
	// then with them (the receipt of every charge gathered and verified),
	// and the headline figures are those with proofs.
	LedgerWithoutProofs bool
	// MechanismQueries is the number of histograms answered per mechanism
	// and repetition; AnalysisQueries the number analysed (10,000 in the
	// standard sizes).
	MechanismQueries, AnalysisQueries int
	// E2EQueries is the number of queries labelled per repetition, in
	// batches of BatchSize, by the federation and by the in-process
	// pipeline; Model is the teachers' architecture there.
	E2EQueries, BatchSize int
	Model                 string
	// Window is how many batches the student asks at once in e2e.
	Window int
	// WANQueries is the number of queries labelled per repetition and
	// scenario of the wan section, in batches of WANBatchSize.
	WANQueries, WANBatchSize int
	// DataDir holds MNIST's idx files; queries are its test images. When it
	// has none, queries are random MNIST-shaped images.
	DataDir string
	// Seed seeds the teachers' weights and the synthetic data.
	Seed uint64
	// BatchDeadline is the aggregator's batch deadline outside the wan
	// section; zero means DefaultBatchDeadline.
	BatchDeadline time.Duration
	// Sections, when not empty, limits the run to the named sections; the
	// others stay zero. Empty runs every section but wan and hostile,
	// which run only when named. hostile labels E2EQueries per repetition
	// in batches of BatchSize with Window, as e2e does.
	Sections []string
	// ScaleCharges is the number of charges the scale section drives the
	// ledger to (more than 1,000), over a history on disk or in memory as
	// ScaleHistory says ("disk" or "memory").
	ScaleCharges int
	ScaleHistory string
	// ScaleExport, when set, is the file the scale section writes the
	// ledger's export to (and leaves), for nzc ledger verify.
	ScaleExport string
	// FederationHospitals are the federations' sizes the federation
	// section runs, one after the other, each with FederationTeachers
	// split over its hospitals and FederationQueries labelled per
	// repetition in batches of BatchSize with Window.
	FederationHospitals                   []int
	FederationTeachers, FederationQueries int
}

// Sections are the names of the sections, in the order they run.
func Sections() []string {
	return []string{"mechanism", "inference", "ledger", "e2e", "hostile", "wan", "scale", "federation"}
}

func (c Config) runs(section string) bool {
	if len(c.Sections) == 0 {
		return section != "wan" && section != "hostile" && section != "scale" && section != "federation"
	}
	return slices.Contains(c.Sections, section)
}

// Quick is the --quick size: every section, fewer repetitions and queries
// (about a minute on two cores).
func Quick() Config {
	return Config{Reps: 3, Teachers: 250, MLPQueries: 256, CNNQueries: 64, GEMMSize: 512, GEMMTime: 300 * time.Millisecond,
		Charges: 2000, Submitters: 64, MechanismQueries: 5000, AnalysisQueries: 10000,
		E2EQueries: 512, BatchSize: 256, Model: "mlp", Window: 2, WANQueries: 256, WANBatchSize: 32, Seed: 1,
		ScaleCharges: 10_000, ScaleHistory: "disk",
		FederationHospitals: []int{10, 30, 100}, FederationTeachers: 300, FederationQueries: 512}
}

// Full is the default size.
func Full() Config {
	return Config{Reps: 5, Teachers: 250, MLPQueries: 1024, CNNQueries: 256, GEMMSize: 512, GEMMTime: time.Second,
		Charges: 5000, Submitters: 64, MechanismQueries: 20000, AnalysisQueries: 10000,
		E2EQueries: 2048, BatchSize: 256, Model: "mlp", Window: 2, WANQueries: 512, WANBatchSize: 32, Seed: 1,
		ScaleCharges: 1_000_000, ScaleHistory: "disk",
		FederationHospitals: []int{10, 30, 100}, FederationTeachers: 300, FederationQueries: 2048}
}

// ErrConfig reports a size that cannot be run.
var ErrConfig = errors.New("bench: bad configuration")

// Validate checks that every size is positive.
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"reps", c.Reps}, {"teachers", c.Teachers}, {"MLP queries", c.MLPQueries}, {"CNN queries", c.CNNQueries},
		{"GEMM size", c.GEMMSize}, {"charges", c.Charges}, {"submitters", c.Submitters},
		{"mechanism queries", c.MechanismQueries}, {"analysis queries", c.AnalysisQueries},
		{"e2e queries", c.E2EQueries}, {"batch size", c.BatchSize}, {"window", c.Window},
		{"wan queries", c.WANQueries}, {"wan batch size", c.WANBatchSize}} {
		if f.v <= 0 {
			return fmt.Errorf("%w: %s must be at least 1, got %d", ErrConfig, f.name, f.v)
		}
	}
	if c.Teachers < hospitals {
		return fmt.Errorf("%w: %d teachers cannot be split over %d hospitals; use at least %d", ErrConfig, c.Teachers, hospitals, hospitals)
	}
	if c.GEMMTime <= 0 {
		return fmt.Errorf("%w: the GEMM time must be positive", ErrConfig)
	}
	for _, s := range c.Sections {
		if !slices.Contains(Sections(), s) {
			return fmt.Errorf("%w: unknown section %q (want %v)", ErrConfig, s, Sections())
		}
	}
	if c.WANQueries < c.WANBatchSize {
		return fmt.Errorf("%w: the wan section needs at least one batch (%d queries in batches of %d)", ErrConfig, c.WANQueries, c.WANBatchSize)
	}
	if c.runs("scale") && c.ScaleCharges <= 1000 {
		return fmt.Errorf("%w: the scale section needs more than 1,000 charges, got %d", ErrConfig, c.ScaleCharges)
	}
	if c.runs("scale") && c.ScaleHistory != "disk" && c.ScaleHistory != "memory" {
		return fmt.Errorf("%w: scale history %q (want disk or memory)", ErrConfig, c.ScaleHistory)
	}
	if c.runs("federation") {
		if len(c.FederationHospitals) == 0 || c.FederationQueries <= 0 {
			return fmt.Errorf("%w: the federation section needs at least one size and one query, got sizes %v and %d queries", ErrConfig, c.FederationHospitals, c.FederationQueries)
		}
		for _, n := range c.FederationHospitals {
			if n < 1 || n > c.FederationTeachers {
				return fmt.Errorf("%w: a federation of %d hospitals cannot share %d teachers; use from 1 to %d hospitals", ErrConfig, n, c.FederationTeachers, c.FederationTeachers)
			}
		}
	}
	if c.Model != "mlp" && c.Model != "cnn" {
		return fmt.Errorf("%w: model %q (want mlp or cnn)", ErrConfig, c.Model)
	}
	return nil
}

// Figure is one measured quantity: every repetition's value, their median
// and their spread (min and max, and (max−min)/median).
type Figure struct {
	Median float64   `json:"median"`
	Reps   int       `json:"reps"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Spread float64   `json:"spread"`
	Values []float64 `json:"values"`
}

// NewFigure summarises the values of the repetitions.
func NewFigure(values []float64) Figure {
	if len(values) == 0 {
		return Figure{}
	}
	s := slices.Sorted(slices.Values(values))
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	f := Figure{Median: med, Reps: len(s), Min: s[0], Max: s[len(s)-1], Values: slices.Clone(values)}
	if med != 0 {
		f.Spread = (f.Max - f.Min) / math.Abs(med)
	}
	return f
}

// Report is the result of a run; its JSON shape is stable (fields are
// added, never renamed).
type Report struct {
	Machine   Machine          `json:"machine"`
	Mechanism MechanismSection `json:"mechanism"`
	Ledger    LedgerSection    `json:"ledger"`
	Inference InferenceSection `json:"inference"`
	E2E       E2ESection       `json:"e2e"`
	Targets   []Target         `json:"targets"`
	Seconds   float64          `json:"seconds"`
	// WAN is there only when the wan section ran.
	WAN WANSection `json:"wan,omitzero"`
	// Hostile is there only when the hostile section ran.
	Hostile HostileSection `json:"hostile,omitzero"`
	// Scale is there only when the scale section ran.
	Scale ScaleSection `json:"scale,omitzero"`
	// Federation is there only when the federation section ran.
	Federation FederationSection `json:"federation,omitzero"`
}

// Machine describes where the run happened.
type Machine struct {
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	GoVersion  string `json:"go_version"`
}

// Target is one of the performance targets and whether this run met it.
type Target struct {
	Name     string  `json:"name"`
	Measured float64 `json:"measured"`
	Goal     string  `json:"goal"`
	Met      bool    `json:"met"`
}

// Progress reports what the run is doing (a section and how far it is).
type Progress func(section string, done, total int)

// Run measures every section in turn. progress may be nil; log receives the
// parties' warnings (nil discards them).
func Run(ctx context.Context, cfg Config, progress Progress, log *slog.Logger) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if progress == nil {
		progress = func(string, int, int) {}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	rep := &Report{Machine: machine()}
	q, what, err := loadQueries(cfg.DataDir, max(cfg.MLPQueries, cfg.CNNQueries, cfg.E2EQueries, cfg.WANQueries, cfg.FederationQueries), cfg.Seed)
	if err != nil {
		return nil, fmt.Errorf("bench: queries: %w", err)
	}
	if cfg.runs("mechanism") {
		if rep.Mechanism, err = runMechanism(ctx, cfg, progress); err != nil {
			return nil, fmt.Errorf("bench: mechanism section: %w", err)
		}
	}
	if cfg.runs("inference") {
		if rep.Inference, err = runInference(ctx, cfg, q, what, progress); err != nil {
			return nil, fmt.Errorf("bench: inference section: %w", err)
		}
	}
	if cfg.runs("ledger") || cfg.runs("e2e") || cfg.runs("hostile") {
		fed, err := startFederation(ctx, cfg, log, nil)
		if err != nil {
			return nil, fmt.Errorf("bench: start the federation: %w", err)
		}
		defer fed.close()
		if cfg.runs("ledger") {
			if rep.Ledger, err = runLedger(ctx, cfg, fed, progress); err != nil {
				return nil, fmt.Errorf("bench: ledger section: %w", err)
			}
		}
		if cfg.runs("e2e") {
			if rep.E2E, err = runE2E(ctx, cfg, fed, q, what, progress); err != nil {
				return nil, fmt.Errorf("bench: e2e section: %w", err)
			}
		}
		if cfg.runs("hostile") {
			if rep.Hostile, err = runHostile(ctx, cfg, fed, q, what, progress); err != nil {
				return nil, fmt.Errorf("bench: hostile section: %w", err)
			}
			if rep.Hostile.SVTBurn, err = runSVTBurn(ctx, cfg, log, q.Slice(0, cfg.E2EQueries)); err != nil {
				return nil, fmt.Errorf("bench: hostile section, nzc-svt: %w", err)
			}
		}
	}
	if cfg.runs("wan") {
		w := &wan{seed: cfg.Seed}
		fed, err := startFederation(ctx, cfg, log, w)
		if err != nil {
			return nil, fmt.Errorf("bench: start the federation behind relays: %w", err)
		}
		defer fed.close()
		sec, err := runWAN(ctx, cfg, q, what, progress, fed)
		if err != nil {
			return nil, fmt.Errorf("bench: wan section: %w", err)
		}
		rep.WAN = sec
	}
	if cfg.runs("scale") {
		if rep.Scale, err = runScale(ctx, cfg, progress); err != nil {
			return nil, fmt.Errorf("bench: scale section: %w", err)
		}
	}
	if cfg.runs("federation") {
		if rep.Federation, err = runFederation(ctx, cfg, q, what, progress, log); err != nil {
			return nil, fmt.Errorf("bench: federation section: %w", err)
		}
	}
	rep.Targets = targets(cfg, rep)
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

// targets are the performance targets of the sections that ran.
func targets(cfg Config, r *Report) []Target {
	var ts []Target
	if cfg.runs("e2e") {
		ts = append(ts, Target{Name: "e2e federation / in-process", Measured: r.E2E.Ratio.Median, Goal: "≥ 0.5", Met: r.E2E.Ratio.Median >= 0.5})
	}
	if cfg.runs("hostile") {
		h := r.Hostile
		ts = append(ts,
			Target{Name: "hostile: honest labels/s under attack / honest only", Measured: h.Ratio, Goal: "≥ 0.8", Met: h.Ratio >= 0.8},
			Target{Name: "hostile: resident memory rise under attack (MiB)", Measured: h.AttackPeakRSSMiB - h.HonestPeakRSSMiB,
				Goal: fmt.Sprintf("≤ %d", hostileRSSBoundMiB), Met: h.AttackPeakRSSMiB-h.HonestPeakRSSMiB <= hostileRSSBoundMiB},
			Target{Name: "hostile: honest batches lost or charged twice", Measured: float64(h.Lost + h.Twice), Goal: "0", Met: h.Lost+h.Twice == 0},
			Target{Name: "hostile: honest labels/s beside a hospital stalling to its deadline / beside none", Measured: h.StallingRatio, Goal: "≥ 0.8", Met: h.StallingRatio >= 0.8},
			Target{Name: "hostile: honest hospitals' largest ε / one nzc-svt session's, beside a third voting against them", Measured: h.SVTBurn.HonestMaxEpsilon / h.SVTBurn.SessionEpsilon, Goal: "≤ 1", Met: h.SVTBurn.HonestMaxEpsilon <= h.SVTBurn.SessionEpsilon*(1+1e-9)})
	}
	if cfg.runs("ledger") {
		ts = append(ts,
			Target{Name: "ledger charges per second" + r.Ledger.proofsLabel(), Measured: r.Ledger.ChargesPerS.Median, Goal: "≥ 2000", Met: r.Ledger.ChargesPerS.Median >= 2000},
			Target{Name: "ledger p99 commit latency (ms)" + r.Ledger.proofsLabel(), Measured: r.Ledger.P99Ms.Median, Goal: "≤ 50", Met: r.Ledger.P99Ms.Median <= 50})
	}
	if cfg.runs("scale") {
		ts = append(ts, scaleTargets(r.Scale)...)
	}
	if cfg.runs("federation") {
		ts = append(ts, federationTargets(r.Federation)...)
	}
	if cfg.runs("inference") {
		if d := r.Inference.MLP.Dense; d != nil {
			ts = append(ts, Target{Name: "MLP ensemble inference / GEMM throughput (dense inputs)", Measured: d.FractionOfGEMM.Median, Goal: "≥ 0.3", Met: d.FractionOfGEMM.Median >= 0.3})
		}
	}
	if cfg.runs("mechanism") {
		ts = append(ts, Target{Name: "GNMax data-dependent analysis of 10,000 queries (ms)", Measured: r.Mechanism.Analysis.GNMaxDataDependentMs.Median, Goal: "≤ 100", Met: r.Mechanism.Analysis.GNMaxDataDependentMs.Median <= 100})
	}
	return ts
}

// repeat measures fn reps times.
func repeat(ctx context.Context, reps int, fn func(rep int) (float64, error)) (Figure, error) {
	vals := make([]float64, 0, reps)
	for i := range reps {
		if err := ctx.Err(); err != nil {
			return Figure{}, err
		}
		v, err := fn(i)
		if err != nil {
			return Figure{}, err
		}
		vals = append(vals, v)
	}
	return NewFigure(vals), nil
}

func machine() Machine {
	return Machine{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version()}
}
