package ensemble

import (
	"context"
	"errors"
	"testing"

	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/metrics"
	"github.com/nzcfed/nzc/ml/model"
)

func TestSelfTrainingValidate(t *testing.T) {
	tests := []struct {
		name string
		st   SelfTraining
		ok   bool
	}{
		{"off", SelfTraining{}, true},
		{"on", SelfTraining{Rounds: 1, Confidence: 0.9, Shift: 1}, true},
		{"negative rounds", SelfTraining{Rounds: -1}, false},
		{"no confidence", SelfTraining{Rounds: 1}, false},
		{"confidence above 1", SelfTraining{Rounds: 1, Confidence: 1.5}, false},
		{"negative shift", SelfTraining{Rounds: 1, Confidence: 0.9, Shift: -1}, false},
		{"bad round training", SelfTraining{Rounds: 1, Confidence: 0.9, Train: model.TrainConfig{Optimizer: "rmsprop"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.st.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

// fewLabels releases the labels of the first n queries only.
func fewLabels(d *data.Dataset, n int) []int {
	labels := make([]int, d.Len())
	for i := range labels {
		labels[i] = metrics.Refused
		if i < n {
			labels[i] = d.Y[i]
		}
	}
	return labels
}

func TestTrainStudentSemi(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig()
	queries := blobs(2, 600)
	labels := fewLabels(queries, 12)
	st := SelfTraining{Rounds: 2, Confidence: 0.9}

	sup, res0, err := TrainStudentSemi(ctx, cfg.Spec, cfg.Train, SelfTraining{}, 1, queries, labels, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res0.Labelled != 12 || res0.Pseudo != 0 {
		t.Fatalf("supervised only: %+v", res0)
	}
	semi, res, err := TrainStudentSemi(ctx, cfg.Spec, cfg.Train, st, 1, queries, labels, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Labelled != 12 || res.Pseudo < 300 || res.Pseudo > 588 {
		t.Fatalf("self-training used %+v, want 12 released and most of the other 588 pseudo-labelled", res)
	}
	if float64(res.PseudoCorrect) < 0.9*float64(res.Pseudo) {
		t.Fatalf("pseudo-labels %d of %d correct, want ≥ 90%% at confidence 0.9", res.PseudoCorrect, res.Pseudo)
	}
	test := blobs(3, 600)
	a0, _ := sup.Accuracy(test)
	a1, _ := semi.Accuracy(test)
	if a1 < 0.9 || a1 < a0-0.01 {
		t.Fatalf("self-trained student %.3f, supervised %.3f: want ≥ 0.9 and no worse", a1, a0)
	}
	// The same inputs give the same student.
	again, _, err := TrainStudentSemi(ctx, cfg.Spec, cfg.Train, st, 1, queries, labels, nil)
	if err != nil {
		t.Fatal(err)
	}
	b1, _ := semi.MarshalBinary()
	b2, _ := again.MarshalBinary()
	if string(b1) != string(b2) {
		t.Fatal("self-training is not deterministic")
	}
	// With every query labelled there is nothing to pseudo-label.
	if _, r, err := TrainStudentSemi(ctx, cfg.Spec, cfg.Train, st, 1, queries, queries.Y, nil); err != nil || r.Pseudo != 0 || r.Labelled != queries.Len() {
		t.Fatalf("all labelled: %+v, %v", r, err)
	}
	if _, _, err := TrainStudentSemi(ctx, cfg.Spec, cfg.Train, SelfTraining{Rounds: 1}, 1, queries, labels, nil); !errors.Is(err, ErrEnsemble) {
		t.Fatalf("invalid settings: %v, want ErrEnsemble", err)
	}
}

// TestPseudoLabelsShiftConsistency checks that a pseudo-label needs the
// same prediction on every shifted view: an image whose class a one-pixel
// shift changes gets none.
func TestPseudoLabelsShiftConsistency(t *testing.T) {
	// A 1×... softmax "image" model: class 0 when the left pixel is lit,
	// class 1 when the right one is; 2×2 images.
	sh := data.Shape{Height: 2, Width: 2, Channels: 1}
	train := &data.Dataset{Shape: sh, Classes: 2}
	for range 50 {
		train.X = append(train.X, 1, 0, 1, 0)
		train.Y = append(train.Y, 0)
		train.X = append(train.X, 0, 1, 0, 1)
		train.Y = append(train.Y, 1)
	}
	n, err := model.New(model.Spec{Kind: model.KindSoftmax, Input: sh, Classes: 2}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Train(context.Background(), train, model.TrainConfig{Optimizer: model.Adam, LearnRate: 0.1, BatchSize: 10, Epochs: 20}, nil); err != nil {
		t.Fatal(err)
	}
	pool := &data.Dataset{Shape: sh, Classes: 2, X: []float32{1, 0, 1, 0}, Y: []int{0}}
	got, err := pseudoLabels(n, pool, SelfTraining{Rounds: 1, Confidence: 0.6})
	if err != nil || got[0] != 0 {
		t.Fatalf("no shift: %v, %v; want class 0", got, err)
	}
	// Shifting right by one moves the lit column to the right: class 1.
	got, err = pseudoLabels(n, pool, SelfTraining{Rounds: 1, Confidence: 0.6, Shift: 1})
	if err != nil || got[0] != metrics.Refused {
		t.Fatalf("with shifts: %v, %v; want no pseudo-label", got, err)
	}
}
