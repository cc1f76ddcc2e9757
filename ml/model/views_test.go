package model

import (
	"context"
	"slices"
	"testing"

	"github.com/nzcfed/nzc/ml/data"
)

func TestMeanClass(t *testing.T) {
	tests := []struct {
		name  string
		probs [][]float32
		class []int
		least []float64
	}{
		{"one view", [][]float32{{0.2, 0.8, 0.6, 0.4}}, []int{1, 0}, []float64{0.8, 0.6}},
		// The second example's views disagree: class 1 has the larger sum
		// (1.1 against 0.9), and its least probability is the first view's.
		{"two views", [][]float32{{0.5, 0.5, 0.8, 0.2}, {0.25, 0.75, 0.1, 0.9}}, []int{1, 1}, []float64{0.5, 0.2}},
		{"a tie goes to the lower class", [][]float32{{0.5, 0.5}}, []int{0}, []float64{0.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			class, least := MeanClass(tt.probs, 2)
			if !slices.Equal(class, tt.class) {
				t.Errorf("classes %v, want %v", class, tt.class)
			}
			for i := range least {
				if d := least[i] - tt.least[i]; d > 1e-6 || d < -1e-6 {
					t.Errorf("least probabilities %v, want %v", least, tt.least)
					break
				}
			}
		})
	}
}

// Each view is the network's probabilities on the image moved, turned or
// resized as it says, the image itself first; without views AccuracyViews
// is Accuracy.
func TestViewProbabilities(t *testing.T) {
	ctx := context.Background()
	spec := Spec{Kind: KindCNN, Input: data.Shape{Height: 10, Width: 10, Channels: 1}, Classes: 2, Conv: []Conv{{Filters: 4, Kernel: 5}}, Hidden: []int{16}}
	n, err := New(spec, 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Train(ctx, bars(1, 300), TrainConfig{Optimizer: Adam, LearnRate: 0.01, BatchSize: 32, Epochs: 3, Seed: 1}, nil); err != nil {
		t.Fatal(err)
	}
	d := bars(2, 50)
	v := Views{Shift: 2, Rotate: 10, Scale: 0.1}
	probs, err := n.ViewProbabilities(ctx, d, v)
	if err != nil {
		t.Fatal(err)
	}
	if len(probs) != 9 || v.Count(d.Shape) != 9 {
		t.Fatalf("%d views (Count %d), want 9", len(probs), v.Count(d.Shape))
	}
	want := func(f func(dst, src []float32)) []float32 {
		x := make([]float32, len(d.X))
		for i := range d.Len() {
			f(x[i*d.Dim():(i+1)*d.Dim()], d.Row(i))
		}
		p, err := n.Probabilities(x)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for i, f := range map[int]func(dst, src []float32){
		0: func(dst, src []float32) { copy(dst, src) },
		1: func(dst, src []float32) { translate(dst, src, d.Shape, 2, 0) },
		4: func(dst, src []float32) { translate(dst, src, d.Shape, 0, -2) },
		6: func(dst, src []float32) { Warp(dst, src, d.Shape, -10, 1, 0, 0) },
		8: func(dst, src []float32) { Warp(dst, src, d.Shape, 0, 0.9, 0, 0) },
	} {
		if !slices.Equal(probs[i], want(f)) {
			t.Errorf("view %d is not the network's probabilities on the image so changed", i)
		}
	}
	plain, err := n.Accuracy(d)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := n.AccuracyViews(ctx, d, Views{}); err != nil || got != plain {
		t.Errorf("AccuracyViews without views = %v, %v; Accuracy %v", got, err, plain)
	}
	if rows := (Views{Shift: 1}).Count(data.Shape{Height: 1, Width: 8, Channels: 1}); rows != 1 {
		t.Errorf("%d views of a row of features, want the example itself only", rows)
	}
	for _, bad := range []Views{{Shift: -1}, {Shift: 9}, {Rotate: 46}, {Scale: 0.6}} {
		if _, err := n.ViewProbabilities(ctx, d, bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

func TestViewsString(t *testing.T) {
	for _, tt := range []struct {
		v    Views
		want string
	}{
		{Views{}, "the image itself"},
		{Views{Shift: 1}, "the image and its copies moved by 1 pixel(s) up, down, left and right"},
		{Views{Rotate: 10, Scale: 0.1}, "the image and its copies turned by ±10°; resized by 1 ± 0.1"},
	} {
		if got := tt.v.String(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.v, got, tt.want)
		}
	}
}
