//go:build onnx

package e2e

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/onnx/onnxtest"
	"github.com/nzcfed/nzc/party/aggregator"
	"github.com/nzcfed/nzc/party/student"
	"github.com/nzcfed/nzc/party/teacher"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// oneHotTeachers trains 5 softmax teachers on rows of 4 features, the
// class's near 1 and the others near 0, and returns their directory.
func oneHotTeachers(t *testing.T, seed uint64) string {
	t.Helper()
	csv := onnxtest.OneHotCSV(t, 400, seed)
	dir := filepath.Join(t.TempDir(), "models")
	if _, err := teacher.Train(t.Context(), teacher.TrainOptions{Data: csv, Teachers: 5, Model: "softmax", Epochs: 300, Seed: seed, Models: dir}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestFederationWithONNXTeachers: hospital-1 votes with ONNX teachers run
// by ONNX Runtime, hospital-2 and hospital-3 with Go teachers; every label
// is the teachers' unanimous class, released after its charge, and every
// charge names all three hospitals.
func TestFederationWithONNXTeachers(t *testing.T) {
	lib := onnxtest.Library(t)
	const queries, perHospital = 12, 5
	d := &data.Dataset{X: make([]float32, queries*4), Y: make([]int, queries), Shape: data.Shape{Height: 1, Width: 4, Channels: 1}, Classes: 4}
	for i := range queries {
		d.Y[i] = i % 4
		for f := range 4 {
			d.X[i*4+f] = 0.05 + 0.001*float32(i) // every row distinct
		}
		d.X[i*4+d.Y[i]] = 0.95
	}
	voters := make([]teacher.Voter, 3)
	for i := range voters {
		dir := oneHotTeachers(t, uint64(i+1))
		if i == 0 {
			out := filepath.Join(t.TempDir(), "onnx")
			if _, err := teacher.ExportONNX(dir, out); err != nil {
				t.Fatal(err)
			}
			dir = out
		}
		v, closer, err := teacher.LoadVoter(dir, lib)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closer.Close() })
		if _, onnx := v.(*teacher.ONNXEnsemble); onnx != (i == 0) {
			t.Fatalf("hospital %d votes with %T", i+1, v)
		}
		// The teachers are unanimous on the student's rows, so the
		// labels are known before any noise is drawn.
		h, err := v.Votes(t.Context(), d.X)
		if err != nil {
			t.Fatal(err)
		}
		for q, row := range h {
			if row[d.Y[q]] != perHospital {
				t.Fatalf("hospital %d's teachers vote %v on query %d of class %d", i+1, row, q, d.Y[q])
			}
		}
		voters[i] = v
	}

	f := newFederation(t, 1, nil)
	startAuditors(t, f)
	g := group(t)
	// Noise small against the gap of 15 votes: a threshold of 8 under σ1 = 1
	// refuses a query with probability below 1e-11, and σ2 = 1 changes a
	// label with probability below 1e-20 (discrete Gaussian tails at 7 and
	// 10 standard deviations), so this test fails falsely with probability
	// below 1e-9. The cap is large enough for the cost.
	agg := f.startAggregator(g, "127.0.0.1:0", f.ledgerClient(), aggregator.Config{
		OutboxDir: t.TempDir(), Mechanism: mechanism.Params{Mechanism: mechanism.ConfidentGNMax, Threshold: 8, Sigma1: 1, Sigma2: 1},
		Quorum: 3, Hospitals: 3, BatchDeadline: 10 * time.Second, Classes: d.Classes, Ensemble: perHospital,
	})
	hospitals := f.startHospitals(g, agg, 1000, func(i int) teacher.Voter { return voters[i] })

	stP := f.party(crypto.RoleStudent, "student-1")
	st, err := student.New(student.Config{ID: stP.ID, Aggregator: agg.Addr, Net: f.net(stP), Identity: f.identity(stP), AuditorKeys: f.auditorKeys(),
		Hospitals: hospitals, BatchSize: 4, StateDir: t.TempDir(), Attempts: 50,
		Backoff: quicnet.Backoff{Min: 20 * time.Millisecond, Max: 300 * time.Millisecond}, Logger: logger(t).With("party", "student")})
	if err != nil {
		t.Fatal(err)
	}
	res, err := st.Label(t.Context(), d, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Answered != queries || !slices.Equal(res.Labels, d.Y) {
		t.Fatalf("labels %v (%d answered), want %v", res.Labels, res.Answered, d.Y)
	}
	f.checkCharges(res, "student-1", "hospital-1", "hospital-2", "hospital-3")
	t.Logf("%d labels from 1 hospital on ONNX Runtime and 2 on Go teachers, %d batches each charged once", len(res.Labels), len(res.Batches))
}
