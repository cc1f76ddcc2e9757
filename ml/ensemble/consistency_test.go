package ensemble

import (
	"context"
	"errors"
	"testing"

	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/data/synth"
	"github.com/nzcfed/nzc/ml/metrics"
	"github.com/nzcfed/nzc/ml/model"
)

// shapesStudent is a consistency-training setting for synth.Shapes: a small
// MLP, four released labels per class, the rest of the pool unlabelled.
func shapesStudent() (model.Spec, model.TrainConfig, model.Consistency) {
	spec := model.Spec{Kind: model.KindCNN, Input: data.Shape{Height: 10, Width: 10, Channels: 1}, Classes: 4, Conv: []model.Conv{{Filters: 6, Kernel: 3}}}
	tc := model.TrainConfig{Optimizer: model.Adam, LearnRate: 1e-2, BatchSize: 8, Epochs: 1, MinSteps: 300, Cosine: true, Shift: 1}
	cc := model.Consistency{Threshold: 0.8, Weight: 1, Ratio: 4, Epochs: 20, Strong: model.Augment{Rotate: 15, Scale: 0.1, Shift: 2}}
	return spec, tc, cc
}

// firstPerClass releases the labels of the first n queries of each class.
func firstPerClass(d *data.Dataset, n int) []int {
	labels := make([]int, d.Len())
	seen := map[int]int{}
	for i, y := range d.Y {
		labels[i] = metrics.Refused
		if seen[y] < n {
			labels[i] = y
			seen[y]++
		}
	}
	return labels
}

func TestTrainStudentConsistency(t *testing.T) {
	ctx := context.Background()
	shapes := synth.Shapes{Size: 10, Stroke: 5, Noise: 0.2}
	pool, test := shapes.Make(1, 1200), shapes.Make(2, 400)
	labels := firstPerClass(pool, 4)
	spec, tc, cc := shapesStudent()
	acc := func(t *testing.T, cc model.Consistency) (float64, ConsistencyResult) {
		t.Helper()
		n, res, err := TrainStudentConsistency(ctx, spec, tc, cc, 3, pool, labels, nil)
		if err != nil {
			t.Fatal(err)
		}
		a, err := n.Accuracy(test)
		if err != nil {
			t.Fatal(err)
		}
		return a, res
	}
	sup, _ := acc(t, model.Consistency{})
	semi, res := acc(t, cc)
	t.Logf("supervised %.3f, consistency %.3f (masked %.2f)", sup, semi, res.Masked)
	if res.Labelled != 16 || res.Unlabeled != 1184 {
		t.Fatalf("learnt from %+v, want 16 labelled and 1184 unlabelled", res)
	}
	if semi < sup+0.10 {
		t.Fatalf("consistency training %.3f, supervised %.3f: want at least 10 points better", semi, sup)
	}
	// The unlabelled term can fail. A rotation by up to 180° turns
	// horizontal bars into vertical ones: asking for the same class on
	// both views teaches the network to confuse them.
	broken := cc
	broken.Strong = model.Augment{Rotate: 180}
	bad, _ := acc(t, broken)
	// A threshold no prediction reaches trains on the labels only.
	never := cc
	never.Threshold = 1
	none, resNone := acc(t, never)
	t.Logf("broken augmentation %.3f, threshold 1 %.3f (masked %.2f)", bad, none, resNone.Masked)
	if bad > semi-0.05 {
		t.Fatalf("a class-changing augmentation gave %.3f, the right one %.3f: the consistency term has no effect", bad, semi)
	}
	if none > semi-0.05 || resNone.Masked > 0.01 {
		t.Fatalf("threshold 1 gave %.3f (masked %.2f), threshold 0.9 %.3f: the threshold has no effect", none, resNone.Masked, semi)
	}
}

func TestTrainStudentConsistencyErrors(t *testing.T) {
	ctx := context.Background()
	spec, tc, cc := shapesStudent()
	pool := synth.Shapes{Size: 10, Stroke: 5, Noise: 0.2}.Make(1, 50)
	none := make([]int, pool.Len())
	for i := range none {
		none[i] = metrics.Refused
	}
	if _, _, err := TrainStudentConsistency(ctx, spec, tc, cc, 1, pool, none, nil); !errors.Is(err, ErrNoLabels) {
		t.Fatalf("no labels: %v, want ErrNoLabels", err)
	}
	bad := firstPerClass(pool, 1)
	bad[0] = 9
	if _, _, err := TrainStudentConsistency(ctx, spec, tc, cc, 1, pool, bad, nil); !errors.Is(err, ErrEnsemble) {
		t.Fatalf("label 9 of 4 classes: %v, want ErrEnsemble", err)
	}
	if _, _, err := TrainStudentConsistency(ctx, spec, tc, cc, 1, pool, bad[:3], nil); !errors.Is(err, ErrEnsemble) {
		t.Fatalf("3 labels for 50 queries: %v, want ErrEnsemble", err)
	}
	wrong := cc
	wrong.Ratio = 0
	if _, _, err := TrainStudentConsistency(ctx, spec, tc, wrong, 1, pool, firstPerClass(pool, 1), nil); !errors.Is(err, model.ErrConfig) {
		t.Fatalf("ratio 0: %v, want model.ErrConfig", err)
	}
}
