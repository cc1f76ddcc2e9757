//go:build onnx

package onnx

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/model"
	"github.com/nzcfed/nzc/ml/onnx/onnxtest"
)

// TestGoMatchesONNXRuntime exports a network of each kind and checks that
// ONNX Runtime computes the Go network's scores on the same weights, within
// 1e-5, and so the same votes.
func TestGoMatchesONNXRuntime(t *testing.T) {
	rt, err := NewRuntime(onnxtest.Library(t))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	r := rand.New(rand.NewPCG(7, 7))
	for name, spec := range specs() {
		t.Run(name, func(t *testing.T) {
			net := trained(t, spec)
			b, err := Export(net)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), name+".onnx")
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := rt.Open(path, spec.Input.Size(), spec.Classes)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			const n = 37
			x := make([]float32, n*spec.Input.Size())
			for i := range x {
				x[i] = r.Float32()
			}
			want, err := net.Logits(x, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Scores(x)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d scores, want %d", len(got), len(want))
			}
			worst, spread := 0.0, 0.0
			for i := range want {
				worst = max(worst, math.Abs(float64(got[i]-want[i])))
				spread = max(spread, math.Abs(float64(want[i]-want[i%spec.Classes])))
			}
			if spread < 1e-3 {
				t.Fatalf("the scores hardly depend on the input (spread %.3g): the comparison would prove nothing", spread)
			}
			t.Logf("largest difference between Go and ONNX Runtime: %.3g", worst)
			if worst > 1e-5 {
				t.Fatalf("ONNX Runtime differs from Go by %.3g > 1e-5", worst)
			}
			preds, err := net.Predict(x)
			if err != nil {
				t.Fatal(err)
			}
			for q := range n {
				row := got[q*spec.Classes : (q+1)*spec.Classes]
				if model.Argmax(row) != preds[q] {
					t.Fatalf("query %d: ONNX Runtime votes %d, Go %d", q, model.Argmax(row), preds[q])
				}
			}
		})
	}
	t.Run("a model for other classes is refused at load", func(t *testing.T) {
		net, err := model.New(specs()["softmax"], 3)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Export(net)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "m.onnx")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if s, err := rt.Open(path, 7, 10); err == nil {
			s.Close()
			t.Fatal("a 3-class model opened for 10 classes")
		}
	})
}

// trained returns a network of spec trained briefly on random data, so
// that its biases are no longer zero and every weight matters.
func trained(t testing.TB, spec model.Spec) *model.Network {
	t.Helper()
	net, err := model.New(spec, 3)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	const n = 64
	d := &data.Dataset{X: make([]float32, n*spec.Input.Size()), Y: make([]int, n), Shape: spec.Input, Classes: spec.Classes}
	for i := range d.X {
		d.X[i] = r.Float32()
	}
	for i := range d.Y {
		d.Y[i] = r.IntN(spec.Classes)
	}
	cfg := model.TrainConfig{Optimizer: "adam", LearnRate: 0.05, BatchSize: 16, Epochs: 2, Seed: 1}
	if _, err := net.Train(context.Background(), d, cfg, nil); err != nil {
		t.Fatal(err)
	}
	ps := net.Parameters()
	if b := ps[len(ps)-1]; b[0] == 0 && b[1] == 0 {
		t.Fatal("training left the output biases at zero")
	}
	return net
}
