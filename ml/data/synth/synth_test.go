package synth

import (
	"slices"
	"testing"
)

func TestBlobsAreSeeded(t *testing.T) {
	p := Blobs{Classes: 3, Dim: 4, Spread: 2, CentreSeed: [2]uint64{7, 1}}
	a, b := p.Make(1, 50), p.Make(1, 50)
	if !slices.Equal(a.X, b.X) || !slices.Equal(a.Y, b.Y) {
		t.Fatal("the same seed gave different data")
	}
	if c := p.Make(2, 50); slices.Equal(a.X, c.X) {
		t.Fatal("different seeds gave the same data")
	}
	if len(a.X) != 50*4 || len(a.Y) != 50 || a.Classes != 3 || a.Shape.Width != 4 {
		t.Fatalf("shape: %d values, %d labels, %d classes, width %d", len(a.X), len(a.Y), a.Classes, a.Shape.Width)
	}
	for _, y := range a.Y {
		if y < 0 || y >= 3 {
			t.Fatalf("label %d outside the 3 classes", y)
		}
	}
}
