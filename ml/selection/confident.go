package selection

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/model"
)

// ConfidentConfig is how Confident ranks a pool.
type ConfidentConfig struct {
	// Shift is how far, in pixels, the four shifted views of an example
	// are moved (0: the example itself only).
	Shift int `json:"shift"`
	// Rotate and Scale, when set, add four more views of an image: turned
	// by ±Rotate degrees and resized by 1±Scale. A clear digit keeps its
	// class under them; one the teachers split on (a 4 near a 9, a 7 near
	// a 1) loses confidence on some view more often than under a shift.
	Rotate float64 `json:"rotate,omitempty"`
	Scale  float64 `json:"scale,omitempty"`
	// Floor is the confidence below which an example waits until every
	// example at or above it was asked (0: none waits).
	Floor float64 `json:"floor,omitempty"`
	// Spread is how many examples of each predicted class, among those at
	// or above Floor, are taken as representatives of as many clusters of
	// them instead of most confident first (0: none).
	Spread int `json:"spread,omitempty"`
	// Seed of the clustering.
	Seed uint64 `json:"seed,omitempty"`
}

// Validate checks the settings.
func (c ConfidentConfig) Validate() error {
	if err := c.views().Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	switch {
	case !(c.Floor >= 0 && c.Floor < 1):
		return fmt.Errorf("%w: confidence floor %v, want 0 (none) up to but not including 1", ErrConfig, c.Floor)
	case c.Spread < 0:
		return fmt.Errorf("%w: spread %d, want 0 (none) or more examples per class", ErrConfig, c.Spread)
	}
	return nil
}

// spreadComponents is the dimension of the principal-component projection
// in which Confident measures how far an example is from those asked.
const spreadComponents = 40

// Confident orders the examples of pool that have not been asked yet
// (asked[i] false) by a student's confidence, balanced by the class the
// student predicts: each example is predicted on itself, on its copies
// moved by cc.Shift pixels up, down, left and right and, with cc.Rotate or
// cc.Scale, turned by ±cc.Rotate degrees and resized by 1±cc.Scale; its
// class is the one
// with the highest mean probability, and its confidence the lowest
// probability any view gives that class. Within each predicted class the
// most confident come first, and the classes are asked in turn, one
// example each (a class the student predicts rarely is not asked about
// less: the student may be under-predicting it).
//
// Examples whose confidence is below cc.Floor come after every example at
// or above it (in the same turns among themselves): a class with few
// confident examples then stops taking its turn instead of pushing
// doubtful ones forward, on which the teachers may disagree. With
// cc.Spread > 0, the first cc.Spread turns of each class go to
// representatives of its examples at or above the floor: k-means with
// cc.Spread clusters in the pool's leading principal components, the
// member nearest each centre, most confident first. The most confident
// examples are near-copies of one another and teach a student least;
// representatives cover the class without its outliers (the examples
// farthest from what was asked are the ones teachers split on).
//
// The student is trained on labels already released and on the pool
// itself, so the order is post-processing of earlier releases: with
// nzc-svt, whose session answers for free until its refusals run out, a
// student that asks about what it is sure of asks about what the teachers
// agree on, and the class balance keeps the easiest digits from crowding
// out the rest.
func Confident(ctx context.Context, net *model.Network, pool *data.Dataset, asked []bool, cc ConfidentConfig) ([]int, error) {
	return ConfidentEnsemble(ctx, []*model.Network{net}, pool, asked, cc)
}

// ConfidentEnsemble is Confident with several students judging together:
// an example's class has the highest probability averaged over every view
// of every student, and its confidence is the lowest probability any view
// of any student gives that class. An example one student is sure of and
// another doubts waits behind those all of them are sure of: students
// trained from different seeds are confidently wrong on different
// examples, while the teachers' splits tend to be where students disagree.
func ConfidentEnsemble(ctx context.Context, nets []*model.Network, pool *data.Dataset, asked []bool, cc ConfidentConfig) ([]int, error) {
	if len(nets) == 0 {
		return nil, fmt.Errorf("%w: no student to rank the pool", ErrConfig)
	}
	k := nets[0].Spec().Classes
	for _, net := range nets[1:] {
		if c := net.Spec().Classes; c != k {
			return nil, fmt.Errorf("%w: students with %d and %d classes cannot rank together", ErrConfig, k, c)
		}
	}
	n := pool.Len()
	if len(asked) != n {
		return nil, fmt.Errorf("%w: %d asked flags for a pool of %d", ErrConfig, len(asked), n)
	}
	if err := cc.Validate(); err != nil {
		return nil, err
	}
	var rest []int
	for i, a := range asked {
		if !a {
			rest = append(rest, i)
		}
	}
	class, conf, err := confidence(ctx, nets, pool.Subset(rest), cc)
	if err != nil {
		return nil, err
	}
	m := len(rest)
	byClass := make([][]int, k)
	for i, c := range class {
		byClass[c] = append(byClass[c], i)
	}
	var feat [][]float64
	if cc.Spread > 0 {
		if feat, err = project(ctx, pool, min(spreadComponents, pool.Dim())); err != nil {
			return nil, err
		}
	}
	place := make([]float64, m)
	for _, idx := range byClass {
		slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(conf[b], conf[a]) })
		sure := 0
		for sure < len(idx) && conf[idx[sure]] >= cc.Floor {
			sure++
		}
		if cc.Spread > 0 {
			if err := representatives(ctx, feat, rest, idx[:sure], cc.Spread, cc.Seed); err != nil {
				return nil, err
			}
		}
		for r, i := range idx {
			place[i] = float64(r)
			if r >= sure {
				// After every confident example of every class.
				place[i] = float64(m + r - sure)
			}
		}
	}
	order := make([]int, m)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if c := cmp.Compare(place[a], place[b]); c != 0 {
			return c
		}
		return cmp.Compare(conf[b], conf[a])
	})
	for j, i := range order {
		order[j] = rest[i]
	}
	return order, nil
}

// views are the views Confident predicts an example on.
func (c ConfidentConfig) views() model.Views {
	return model.Views{Shift: c.Shift, Rotate: c.Rotate, Scale: c.Scale}
}

// confidence predicts every example of sub on each of cc's views by each
// network: its class has the highest mean probability, its confidence is
// the lowest probability a view of a network gives that class.
func confidence(ctx context.Context, nets []*model.Network, sub *data.Dataset, cc ConfidentConfig) ([]int, []float64, error) {
	var probs [][]float32
	for _, net := range nets {
		p, err := net.ViewProbabilities(ctx, sub, cc.views())
		if err != nil {
			return nil, nil, err
		}
		probs = append(probs, p...)
	}
	class, conf := model.MeanClass(probs, nets[0].Spec().Classes)
	return class, conf, nil
}

// representatives moves to the front of cand (indices into rest, which
// indexes feat; most confident first) one example of each of picks k-means
// clusters of cand: the one nearest its cluster's centre. They keep their
// order among themselves, and so do the others after them.
func representatives(ctx context.Context, feat [][]float64, rest, cand []int, picks int, seed uint64) error {
	picks = min(picks, len(cand))
	if picks == 0 {
		return nil
	}
	sub := make([][]float64, len(cand))
	for j, c := range cand {
		sub[j] = feat[rest[c]]
	}
	assign, dist, _, err := kmeans(ctx, sub, picks, 20, seed)
	if err != nil {
		return err
	}
	best := make([]int, picks)
	for c := range best {
		best[c] = -1
	}
	for j, c := range assign {
		if best[c] < 0 || dist[j] < dist[best[c]] {
			best[c] = j
		}
	}
	front := make([]bool, len(cand))
	for _, j := range best {
		if j >= 0 {
			front[j] = true
		}
	}
	var head, tail []int
	for j, c := range cand {
		if front[j] {
			head = append(head, c)
		} else {
			tail = append(tail, c)
		}
	}
	copy(cand, append(head, tail...))
	return nil
}

func sqDist(a, b []float64) float64 {
	s := 0.0
	for i, v := range a {
		e := v - b[i]
		s += e * e
	}
	return s
}
