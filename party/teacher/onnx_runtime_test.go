//go:build onnx

package teacher

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/nzcfed/nzc/ml/onnx/onnxtest"
)

// TestONNXTeachersVoteAsTheGoOnes: the same teachers, exported to ONNX and
// run by ONNX Runtime, give the same vote histograms as in Go.
func TestONNXTeachersVoteAsTheGoOnes(t *testing.T) {
	lib := onnxtest.Library(t)
	goDir := trainGo(t, 5, 2)
	out := filepath.Join(t.TempDir(), "onnx")
	if _, err := ExportONNX(goDir, out); err != nil {
		t.Fatal(err)
	}
	g, err := LoadEnsemble(goDir)
	if err != nil {
		t.Fatal(err)
	}
	v, closer, err := LoadVoter(out, lib)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	if _, ok := v.(*ONNXEnsemble); !ok || v.Teachers() != 5 || v.Classes() != 4 || v.Dim() != 4 {
		t.Fatalf("loaded %T with %d teachers", v, v.Teachers())
	}
	r := rand.New(rand.NewPCG(3, 3))
	x := make([]float32, 200*4)
	for i := range x {
		x[i] = r.Float32()
	}
	want, err := g.Votes(t.Context(), x)
	if err != nil {
		t.Fatal(err)
	}
	got, err := v.Votes(t.Context(), x)
	if err != nil {
		t.Fatal(err)
	}
	split := onnxtest.SameVotes(t, got, want, 5, "Go")
	t.Logf("%d of %d random queries split the teachers; every histogram agrees", split, len(want))
}
