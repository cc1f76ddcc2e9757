package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/nzcfed/nzc/internal/cputime"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/ensemble"
	"github.com/nzcfed/nzc/ml/model"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// E2ESection compares labels per second through the whole federation on
// loopback (the student's batches sealed to the hospitals, QUIC with mutual
// TLS, the hospitals' inference, votes sealed to the aggregator, the
// mechanism, the charge committed by the auditors before release, labels
// sealed to the student) with an in-process pipeline doing the same
// inference, aggregation and accounting with the same teachers and
// mechanism, and no network, encryption or ledger. Ratio is federation over
// in-process, per repetition.
type E2ESection struct {
	FederationLabelsPerS Figure `json:"federation_labels_per_s"`
	InprocessLabelsPerS  Figure `json:"inprocess_labels_per_s"`
	Ratio                Figure `json:"ratio"`
	// The CPU time (user and system, every party of the process) per label,
	// and the in-process pipeline's over the federation's: what the
	// protocol costs in work rather than in time, a figure other load on
	// the machine disturbs less than the rates. Absent where the process's
	// CPU time cannot be read.
	FederationCPUMsPerLabel *Figure `json:"federation_cpu_ms_per_label,omitempty"`
	InprocessCPUMsPerLabel  *Figure `json:"inprocess_cpu_ms_per_label,omitempty"`
	CPURatio                *Figure `json:"cpu_ratio,omitempty"`
	Hospitals               int     `json:"hospitals"`
	Auditors                int     `json:"auditors"`
	Students                int     `json:"students"`
	Teachers                int     `json:"teachers"`
	Model                   string  `json:"model"`
	Mechanism               string  `json:"mechanism"`
	BatchSize               int     `json:"batch_size"`
	Window                  int     `json:"student_window"`
	Queries                 int     `json:"queries_per_rep"`
	Data                    string  `json:"data"`
}

func runE2E(ctx context.Context, cfg Config, f *federation, all *data.Dataset, what string, progress Progress) (E2ESection, error) {
	sec := E2ESection{Hospitals: hospitals, Auditors: auditors, Students: 1, Teachers: cfg.Teachers, Model: cfg.Model,
		Mechanism: string(benchMechanism().Mechanism), BatchSize: cfg.BatchSize, Window: cfg.Window, Queries: cfg.E2EQueries}
	q := all.Slice(0, cfg.E2EQueries)
	sec.Data = what
	var fed, inproc, ratio, fedCPU, inCPU, cpuRatio []float64
	cpuOK := true
	for rep := range cfg.Reps {
		progress("e2e", rep, cfg.Reps)
		d := distinct(q, rep)
		c0, ok0 := cputime.Process()
		in, err := inProcess(ctx, f, d, cfg.BatchSize)
		c1, ok1 := cputime.Process()
		if err != nil {
			return sec, fmt.Errorf("in-process pipeline: %w", err)
		}
		st, err := f.newStudent(cfg.BatchSize, cfg.Window, quicnet.Backoff{Min: 20 * time.Millisecond, Max: 300 * time.Millisecond})
		if err != nil {
			return sec, err
		}
		start := time.Now()
		res, err := st.Label(ctx, d, nil)
		if err != nil {
			return sec, fmt.Errorf("federation: %w", err)
		}
		el := time.Since(start)
		c2, ok2 := cputime.Process()
		if cpuOK = cpuOK && ok0 && ok1 && ok2; cpuOK {
			perIn, perFed := ms(c1-c0)/float64(d.Len()), ms(c2-c1)/float64(d.Len())
			inCPU, fedCPU, cpuRatio = append(inCPU, perIn), append(fedCPU, perFed), append(cpuRatio, perIn/perFed)
		}
		if res.Answered+res.Refused != d.Len() {
			return sec, fmt.Errorf("federation labelled %d of %d queries", res.Answered+res.Refused, d.Len())
		}
		fr := float64(d.Len()) / el.Seconds()
		fed, inproc, ratio = append(fed, fr), append(inproc, in), append(ratio, fr/in)
	}
	progress("e2e", cfg.Reps, cfg.Reps)
	sec.FederationLabelsPerS, sec.InprocessLabelsPerS, sec.Ratio = NewFigure(fed), NewFigure(inproc), NewFigure(ratio)
	if cpuOK {
		a, b, c := NewFigure(fedCPU), NewFigure(inCPU), NewFigure(cpuRatio)
		sec.FederationCPUMsPerLabel, sec.InprocessCPUMsPerLabel, sec.CPURatio = &a, &b, &c
	}
	return sec, nil
}

// inProcess labels d in batches the way the federation does — every
// hospital's teachers vote, the histograms are summed, the mechanism answers
// each query with crypto/rand noise and the batch's data-independent cost is
// computed — with no network, no encryption and no ledger, and returns the
// labels per second.
func inProcess(ctx context.Context, f *federation, d *data.Dataset, batch int) (float64, error) {
	g := mechanism.DefaultGrid()
	p := benchMechanism()
	p.Classes = 10
	for _, nets := range f.hospitalNets {
		p.Teachers += len(nets)
	}
	mech, err := mechanism.New(p)
	if err != nil {
		return 0, err
	}
	// One ensemble of every hospital's teachers: the best this machine does
	// in one process (the sum of the hospitals' histograms is the ensemble's).
	var nets []*model.Network
	for _, hn := range f.hospitalNets {
		nets = append(nets, hn...)
	}
	dim := d.Dim()
	start := time.Now()
	for lo := 0; lo < d.Len(); lo += batch {
		hi := min(lo+batch, d.Len())
		sum, err := ensemble.Votes(ctx, nets, d.X[lo*dim:hi*dim], 10)
		if err != nil {
			return 0, err
		}
		answered := 0
		for _, h := range sum {
			o, err := mech.Answer(rand.Reader, mechanism.Histogram(h))
			if err != nil {
				return 0, err
			}
			if !o.Refused {
				answered++
			}
		}
		if _, err := p.Charge(g, answered, len(sum)-answered); err != nil {
			return 0, err
		}
	}
	return float64(d.Len()) / time.Since(start).Seconds(), nil
}
