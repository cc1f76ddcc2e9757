package selection

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/nzcfed/nzc/ml/model"
)

// Confident asks first about what a student trained on a few labels is
// sure of (and right about), every predicted class in turn, and never
// again about what was asked.
func TestConfidentAsksWhatTheStudentIsSureOf(t *testing.T) {
	ctx := context.Background()
	p := pool()
	// A softmax student on the labels of the first 40 examples.
	net, err := model.New(model.Spec{Kind: model.KindSoftmax, Input: p.Shape, Classes: p.Classes}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := net.Train(ctx, p.Slice(0, 40), model.TrainConfig{Optimizer: model.Adam, LearnRate: 1e-2, BatchSize: 8, Epochs: 1, MinSteps: 200}, nil); err != nil {
		t.Fatal(err)
	}
	asked := make([]bool, p.Len())
	for i := range 40 {
		asked[i] = true
	}
	o, err := Confident(ctx, net, p, asked, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(slices.Values(o)); !slices.Equal(got, identity(p.Len())[40:]) {
		t.Fatal("not a permutation of the examples not yet asked")
	}
	pred, err := net.Predict(p.X)
	if err != nil {
		t.Fatal(err)
	}
	wrong := func(idx []int) int {
		w := 0
		for _, i := range idx {
			if pred[i] != p.Y[i] {
				w++
			}
		}
		return w
	}
	m := len(o) / 5
	first, last := wrong(o[:m]), wrong(o[len(o)-m:])
	t.Logf("student wrong on %d of the first %d, %d of the last %d", first, m, last, m)
	if first*4 > last || last == 0 {
		t.Fatalf("student wrong on %d of the first fifth and %d of the last: want the first at most a quarter of the last", first, last)
	}
	seen := map[int]int{}
	for _, i := range o[:80] {
		seen[pred[i]]++
	}
	for k := range p.Classes {
		if seen[k] < 12 {
			t.Fatalf("predicted class %d has %d of the first 80 queries, want ≥ 12 (%v)", k, seen[k], seen)
		}
	}
	if _, err := Confident(ctx, net, p, asked[:5], 0); !errors.Is(err, ErrConfig) {
		t.Fatalf("5 flags for %d examples: %v, want ErrConfig", p.Len(), err)
	}
}
