package experiment

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/ml/data"
)

// mnist-hard is MNIST with every image hardened the same way each time,
// its labels untouched; mnist is the files as they are.
func TestDerive(t *testing.T) {
	img := func(n int) *data.Dataset {
		d := &data.Dataset{X: make([]float32, n*28*28), Y: make([]int, n), Shape: data.Shape{Height: 28, Width: 28, Channels: 1}, Classes: 10}
		for i := range d.X {
			d.X[i] = 1
		}
		for i := range d.Y {
			d.Y[i] = i % 10
		}
		return d
	}
	split := &data.Split{Train: img(20), Test: img(10)}
	for _, name := range []string{"", "mnist"} {
		got, err := Derive(name, split)
		if err != nil || got != split {
			t.Fatalf("Derive(%q) = %p, %v; want the split itself", name, got, err)
		}
	}
	a, err := Derive(DatasetMNISTHard, split)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Derive(DatasetMNISTHard, split)
	if !slices.Equal(a.Train.X, b.Train.X) || !slices.Equal(a.Test.X, b.Test.X) {
		t.Fatal("mnist-hard differs between two derivations")
	}
	if slices.Equal(a.Train.X, split.Train.X) || !slices.Equal(a.Train.Y, split.Train.Y) || !slices.Equal(a.Test.Y, split.Test.Y) {
		t.Fatal("mnist-hard must change the images and keep the labels")
	}
	// A quarter of every white image is erased: 196 pixels are dark
	// (noise of 0.1 leaves a pixel on its side of 0.5 unless it draws
	// five standard deviations; the draws are fixed by the seed).
	for i := range a.Test.Len() {
		dark := 0
		for _, v := range a.Test.Row(i) {
			if v < 0.5 {
				dark++
			}
		}
		if dark != 196 {
			t.Fatalf("test image %d has %d dark pixels, want the 196 of the erased square", i, dark)
		}
	}
	if _, err := Derive("cifar", split); !errors.Is(err, ErrConfig) {
		t.Fatalf("an unknown data set: %v, want ErrConfig", err)
	}
}

// The paper-mnist preset is valid for MNIST's shape and sizes: its plan's
// session can be planned for 250 teachers, its headline rows are drawn
// five times and the others once, and the plan's provenance is the
// tuning share, not the release ensemble's votes.
func TestPaperMNISTPreset(t *testing.T) {
	cfg, err := Preset(PresetPaperMNIST)
	if err != nil {
		t.Fatal(err)
	}
	shape := data.Shape{Height: 28, Width: 28, Channels: 1}
	cfg.Data = &data.Split{Train: &data.Dataset{Y: make([]int, 60000), Shape: shape, Classes: 10}, Test: &data.Dataset{Y: make([]int, 10000), Shape: shape, Classes: 10}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Draws != 5 || cfg.baselineDraws() != 1 {
		t.Fatalf("%d draws, %d baseline draws; want 5 and 1", cfg.Draws, cfg.baselineDraws())
	}
	for _, p := range cfg.Provenance {
		if strings.HasPrefix(p.Setting, "plan:") && p.ChosenOn == votesPool {
			t.Errorf("the plan's %q is still labelled as chosen on the release ensemble", p.Setting)
		}
	}
}
