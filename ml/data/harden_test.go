package data

import (
	"errors"
	"slices"
	"testing"
)

// ones is n images of h×w pixels, every pixel 1, labelled i mod 10.
func ones(n, h, w int) *Dataset {
	d := &Dataset{X: make([]float32, n*h*w), Y: make([]int, n), Shape: Shape{h, w, 1}, Classes: 10}
	for i := range d.X {
		d.X[i] = 1
	}
	for i := range d.Y {
		d.Y[i] = i % 10
	}
	return d
}

func TestHardening(t *testing.T) {
	tests := []struct {
		name    string
		h       Hardening
		erased  int // pixels at 0 in every image, without noise
		changed bool
	}{
		{"nothing", Hardening{}, 0, false},
		{"square", Hardening{Block: 4, Seed: 1}, 16, true},
		{"whole image", Hardening{Block: 8, Seed: 1}, 64, true},
		{"noise", Hardening{Noise: 0.3, Seed: 1}, -1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := ones(50, 8, 8)
			orig := slices.Clone(d.X)
			a, err := tt.h.Apply(d, "train")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(d.X, orig) {
				t.Fatal("Apply changed its input")
			}
			if !slices.Equal(a.Y, d.Y) || a.Shape != d.Shape || a.Classes != d.Classes {
				t.Fatal("Apply changed the labels or the shape")
			}
			if changed := !slices.Equal(a.X, orig); changed != tt.changed {
				t.Fatalf("images changed %v, want %v", changed, tt.changed)
			}
			for i := range a.Len() {
				zeros := 0
				for _, v := range a.Row(i) {
					if v < 0 || v > 1 {
						t.Fatalf("image %d has a pixel %v outside [0,1]", i, v)
					}
					if v == 0 {
						zeros++
					}
				}
				if tt.erased >= 0 && zeros != tt.erased {
					t.Fatalf("image %d has %d pixels erased, want %d", i, zeros, tt.erased)
				}
			}
			// The same hardening makes the same images; another part or
			// seed, others.
			b, _ := tt.h.Apply(d, "train")
			if !slices.Equal(a.X, b.X) {
				t.Fatal("two applications differ")
			}
			if tt.changed && tt.erased != 64 {
				c, _ := tt.h.Apply(d, "test")
				other := tt.h
				other.Seed++
				e, _ := other.Apply(d, "train")
				if slices.Equal(a.X, c.X) || slices.Equal(a.X, e.X) {
					t.Fatal("another part or seed made the same images")
				}
			}
		})
	}
	for _, bad := range []Hardening{{Block: -1}, {Block: 9}, {Noise: -0.1}, {Noise: 2}} {
		d := ones(3, 8, 8)
		if _, err := bad.Apply(d, "train"); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
}
