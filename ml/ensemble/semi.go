package ensemble

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/metrics"
	"github.com/nzcfed/nzc/ml/model"
)

// SelfTraining configures semi-supervised training of a student on its own
// unlabelled queries (pseudo-labelling). The student first trains on the
// released labels; then, for each round, it labels every query without a
// released label, keeps a pseudo-label only where its prediction is
// confident and consistent across shifted copies of the image, and a fresh
// network trains on the released and the pseudo-labelled queries together.
// Released labels are never replaced.
//
// The unlabelled queries are the student's own public data and the
// pseudo-labels are computed from the released labels only, so this is
// post-processing of the private release: it costs no privacy.
type SelfTraining struct {
	// Rounds of pseudo-labelling; 0 trains on the released labels only.
	Rounds int `json:"rounds"`
	// Confidence sets how many pseudo-labels are kept: the fraction of the
	// consistent predictions whose mean softmax probability (over the views)
	// reaches Confidence. The same fraction of every predicted class is
	// kept, the most confident first, so that easy classes do not crowd out
	// the others. In (0, 1].
	Confidence float64 `json:"confidence"`
	// Shift: the views are the image itself and its copies moved by Shift
	// pixels up, down, left and right; all must predict the same class.
	// 0 uses the image alone (and non-image data always does).
	Shift int `json:"shift"`
	// Train is the training of each round (fresh network, same seed). When
	// its optimizer is empty, the student's own settings are used.
	Train model.TrainConfig `json:"train"`
}

// Validate checks the settings.
func (s SelfTraining) Validate() error {
	if s.Rounds < 0 || s.Rounds > 10 {
		return fmt.Errorf("%w: %d self-training rounds, want 0..10", ErrEnsemble, s.Rounds)
	}
	if s.Rounds == 0 {
		return nil
	}
	if !(s.Confidence > 0 && s.Confidence <= 1) {
		return fmt.Errorf("%w: self-training confidence %v must be in (0,1]", ErrEnsemble, s.Confidence)
	}
	if s.Shift < 0 || s.Shift > 8 {
		return fmt.Errorf("%w: self-training shift %d must be in [0,8]", ErrEnsemble, s.Shift)
	}
	if s.Train.Optimizer != "" {
		if err := s.Train.Validate(); err != nil {
			return fmt.Errorf("self-training rounds: %w", err)
		}
	}
	return nil
}

// StudentResult says what a student learnt from.
type StudentResult struct {
	Labelled int // queries with a released label
	Pseudo   int // queries given a pseudo-label in the last round
	// PseudoCorrect counts the pseudo-labels that agree with the queries'
	// true labels (a diagnostic: the labels are never used for training).
	PseudoCorrect int
}

// TrainStudentSemi trains a student on the released labels (labels[i] ≥ 0;
// refusals and unqueried examples are metrics.Refused) and then, if
// st.Rounds > 0, self-trains on the queries without a released label.
func TrainStudentSemi(ctx context.Context, spec model.Spec, cfg model.TrainConfig, st SelfTraining, seed uint64, queries *data.Dataset, labels []int, prog model.Progress) (*model.Network, StudentResult, error) {
	if err := st.Validate(); err != nil {
		return nil, StudentResult{}, err
	}
	n, k, err := TrainStudent(ctx, spec, cfg, seed, queries, labels, prog)
	res := StudentResult{Labelled: k}
	if err != nil || st.Rounds == 0 || k == len(labels) {
		return n, res, err
	}
	rc := st.Train
	if rc.Optimizer == "" {
		rc = cfg
	}
	var unl []int
	for i, l := range labels {
		if l == metrics.Refused {
			unl = append(unl, i)
		}
	}
	pool := queries.Subset(unl)
	for range st.Rounds {
		pseudo, err := pseudoLabels(n, pool, st)
		if err != nil {
			return nil, res, err
		}
		all := append([]int(nil), labels...)
		res.Pseudo, res.PseudoCorrect = 0, 0
		for j, p := range pseudo {
			if p == metrics.Refused {
				continue
			}
			all[unl[j]] = p
			res.Pseudo++
			if p == queries.Y[unl[j]] {
				res.PseudoCorrect++
			}
		}
		if n, _, err = TrainStudent(ctx, spec, rc, seed, queries, all, prog); err != nil {
			return nil, res, err
		}
	}
	return n, res, nil
}

// pseudoLabels returns, for each example of pool, the class n predicts on
// every view, or metrics.Refused when the views disagree or the prediction
// is not among the most confident of its class (see SelfTraining.Confidence).
func pseudoLabels(n *model.Network, pool *data.Dataset, st SelfTraining) ([]int, error) {
	sh := pool.Shape
	views := [][2]int{{0, 0}}
	if st.Shift > 0 && sh.Height > 1 && sh.Width > 1 {
		s := st.Shift
		views = append(views, [2]int{s, 0}, [2]int{-s, 0}, [2]int{0, s}, [2]int{0, -s})
	}
	N, dim, K := pool.Len(), pool.Dim(), spec(n).Classes
	mean := make([]float64, N*K)
	out := make([]int, N)
	for i := range out {
		out[i] = -2 // not yet seen
	}
	x := make([]float32, len(pool.X))
	for _, v := range views {
		if v == [2]int{0, 0} {
			copy(x, pool.X)
		} else {
			for i := range N {
				model.Translate(x[i*dim:(i+1)*dim], pool.Row(i), sh, v[0], v[1])
			}
		}
		p, err := n.Probabilities(x)
		if err != nil {
			return nil, err
		}
		for i := range N {
			row := p[i*K : (i+1)*K]
			for c, q := range row {
				mean[i*K+c] += float64(q) / float64(len(views))
			}
			best := model.Argmax(row)
			switch out[i] {
			case -2:
				out[i] = best
			case best:
			default:
				out[i] = metrics.Refused // the views disagree
			}
		}
	}
	// Keep the same fraction of every predicted class: the fraction of all
	// consistent predictions whose mean probability reaches Confidence,
	// taken in order of confidence within each class. A global threshold
	// would keep only the easiest classes and bias the retrained student
	// against the others.
	byClass := make([][]int, K)
	sure, cands := 0, 0
	for i, c := range out {
		if c < 0 {
			continue
		}
		cands++
		byClass[c] = append(byClass[c], i)
		if mean[i*K+c] >= st.Confidence {
			sure++
		}
	}
	if cands == 0 {
		return out, nil
	}
	frac := float64(sure) / float64(cands)
	for c, idx := range byClass {
		slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(mean[b*K+c], mean[a*K+c]) })
		keep := int(math.Round(frac * float64(len(idx))))
		for _, i := range idx[keep:] {
			out[i] = metrics.Refused
		}
	}
	return out, nil
}

func spec(n *model.Network) model.Spec { return n.Spec() }
