package ensemble

import (
	"context"
	"fmt"

	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/metrics"
	"github.com/nzcfed/nzc/ml/model"
)

// ConsistencyResult says what a consistency-trained student learnt from.
type ConsistencyResult struct {
	Labelled  int // queries with a released label
	Unlabeled int // queries without one, learnt from by consistency
	// Masked is the fraction of unlabelled queries confident enough to be
	// trained on in the last pass over them.
	Masked float64
}

// TrainStudentConsistency trains a student on the released labels
// (labels[i] ≥ 0) and, by consistency training (model.Consistency), on the
// queries without one (metrics.Refused: refused or never asked). Like
// self-training it uses only the released labels and the student's own
// data, so it is post-processing of the release and costs no privacy.
func TrainStudentConsistency(ctx context.Context, spec model.Spec, cfg model.TrainConfig, cc model.Consistency, seed uint64, queries *data.Dataset, labels []int, prog model.Progress) (*model.Network, ConsistencyResult, error) {
	if len(labels) != queries.Len() {
		return nil, ConsistencyResult{}, fmt.Errorf("%w: %d labels for %d queries", ErrEnsemble, len(labels), queries.Len())
	}
	var li, ui []int
	for i, l := range labels {
		switch {
		case l == metrics.Refused:
			ui = append(ui, i)
		case l < 0 || l >= spec.Classes:
			return nil, ConsistencyResult{}, fmt.Errorf("%w: label %d of query %d is not a class", ErrEnsemble, l, i)
		default:
			li = append(li, i)
		}
	}
	res := ConsistencyResult{Labelled: len(li), Unlabeled: len(ui)}
	if len(li) == 0 {
		return nil, res, ErrNoLabels
	}
	lab := queries.Subset(li)
	for j, i := range li {
		lab.Y[j] = labels[i]
	}
	n, err := model.New(spec, seed)
	if err != nil {
		return nil, res, err
	}
	r, err := n.TrainConsistency(ctx, lab, queries.Subset(ui), cfg, cc, prog)
	if err != nil {
		return nil, res, err
	}
	res.Masked = r.Masked
	return n, res, nil
}

// DefaultConsistency is consistency training for image students: a
// confidence threshold of 0.9, three unlabelled examples per labelled one,
// six passes over the unlabelled examples, and a strong view rotated by up
// to 12°, scaled by up to 10 %, moved by up to 3 pixels and cut by an
// 8-pixel square. These are FixMatch-like starting values, not tuned: on
// the one MNIST comparison measured (docs/history/2026-11-27-results.md, class-imbalanced
// labels) self-training did better.
func DefaultConsistency() model.Consistency {
	return model.Consistency{Threshold: 0.9, Weight: 1, Ratio: 3, Epochs: 6,
		Strong: model.Augment{Rotate: 12, Scale: 0.1, Shift: 3, Cutout: 8}}
}
