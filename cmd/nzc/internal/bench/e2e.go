package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/ensemble"
	"github.com/nzcfed/nzc/party/student"
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
	Hospitals            int    `json:"hospitals"`
	Auditors             int    `json:"auditors"`
	Students             int    `json:"students"`
	Teachers             int    `json:"teachers"`
	Model                string `json:"model"`
	Mechanism            string `json:"mechanism"`
	BatchSize            int    `json:"batch_size"`
	Queries              int    `json:"queries_per_rep"`
	Data                 string `json:"data"`
}

func runE2E(ctx context.Context, cfg Config, f *federation, progress Progress) (E2ESection, error) {
	sec := E2ESection{Hospitals: hospitals, Auditors: auditors, Students: 1, Teachers: cfg.Teachers, Model: cfg.Model,
		Mechanism: string(benchMechanism().Mechanism), BatchSize: cfg.BatchSize, Queries: cfg.E2EQueries}
	q, what, err := queries(cfg.DataDir, cfg.E2EQueries, cfg.Seed)
	if err != nil {
		return sec, err
	}
	sec.Data = what
	stP := f.m.ByRole(crypto.RoleStudent)[0]
	qc, err := f.net(stP)
	if err != nil {
		return sec, err
	}
	id, err := crypto.LoadIdentity(f.m.Path(stP.AgeIdentity))
	if err != nil {
		return sec, err
	}
	var recipients []*crypto.Recipient
	for _, h := range f.m.ByRole(crypto.RoleHospital) {
		hid, err := crypto.LoadIdentity(f.m.Path(h.AgeIdentity))
		if err != nil {
			return sec, err
		}
		recipients = append(recipients, hid.Recipient())
	}
	var fed, inproc, ratio []float64
	for rep := range cfg.Reps {
		progress("e2e", rep, cfg.Reps)
		// A distinct data set per repetition: the student's batch ids come
		// from its features, and a repeated batch would be answered from the
		// aggregator's outbox without any work.
		d := &data.Dataset{X: append([]float32(nil), q.X...), Y: q.Y, Shape: q.Shape, Classes: q.Classes}
		d.X[0] = float32(rep+1) / 1024
		in, err := inProcess(ctx, f, d, cfg.BatchSize)
		if err != nil {
			return sec, fmt.Errorf("in-process pipeline: %w", err)
		}
		dir, err := os.MkdirTemp(f.dir, "student-")
		if err != nil {
			return sec, err
		}
		st, err := student.New(student.Config{ID: stP.ID, Aggregator: f.aggAddr, Net: qc, Identity: id, Hospitals: recipients,
			BatchSize: cfg.BatchSize, StateDir: dir, Backoff: quicnet.Backoff{Min: 20 * time.Millisecond, Max: 300 * time.Millisecond},
			Logger: f.log.With("party", stP.ID)})
		if err != nil {
			return sec, err
		}
		start := time.Now()
		res, err := st.Label(ctx, d, nil)
		if err != nil {
			return sec, fmt.Errorf("federation: %w", err)
		}
		el := time.Since(start)
		if res.Answered+res.Refused != d.Len() {
			return sec, fmt.Errorf("federation labelled %d of %d queries", res.Answered+res.Refused, d.Len())
		}
		fr := float64(d.Len()) / el.Seconds()
		fed, inproc, ratio = append(fed, fr), append(inproc, in), append(ratio, fr/in)
	}
	progress("e2e", cfg.Reps, cfg.Reps)
	sec.FederationLabelsPerS, sec.InprocessLabelsPerS, sec.Ratio = NewFigure(fed), NewFigure(inproc), NewFigure(ratio)
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
	dim := d.Dim()
	start := time.Now()
	for lo := 0; lo < d.Len(); lo += batch {
		hi := min(lo+batch, d.Len())
		x := d.X[lo*dim : hi*dim]
		sum := make([]mechanism.Histogram, hi-lo)
		for i := range sum {
			sum[i] = make(mechanism.Histogram, 10)
		}
		for _, nets := range f.hospitalNets {
			h, err := ensemble.Votes(ctx, nets, x, 10)
			if err != nil {
				return 0, err
			}
			for i, row := range h {
				for c, v := range row {
					sum[i][c] += v
				}
			}
		}
		answered := 0
		for _, h := range sum {
			o, err := mech.Answer(rand.Reader, h)
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
