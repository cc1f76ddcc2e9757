package selection

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/model"
)

// Confident orders the examples of pool that have not been asked yet
// (asked[i] false) by a student's confidence, balanced by the class the
// student predicts: each example is predicted on itself and on its copies
// moved by shift pixels up, down, left and right (0: itself only); its
// class is the one with the highest mean probability, and its confidence
// the lowest probability any view gives that class. Within each predicted
// class the most confident come first, and the classes are asked in turn,
// one example each (a class the student predicts rarely is not asked about
// less: the student may be under-predicting it).
//
// The student is trained on labels already released and on the pool
// itself, so the order is post-processing of earlier releases: with
// nzc-svt, whose session answers for free until its refusals run out, a
// student that asks about what it is sure of asks about what the teachers
// agree on, and the class balance keeps the easiest digits from crowding
// out the rest.
func Confident(ctx context.Context, net *model.Network, pool *data.Dataset, asked []bool, shift int) ([]int, error) {
	n := pool.Len()
	if len(asked) != n {
		return nil, fmt.Errorf("%w: %d asked flags for a pool of %d", ErrConfig, len(asked), n)
	}
	if shift < 0 || shift > 8 {
		return nil, fmt.Errorf("%w: shift %d, want 0..8 pixels", ErrConfig, shift)
	}
	k := net.Spec().Classes
	sh := pool.Shape
	views := [][2]int{{0, 0}}
	if shift > 0 && sh.Height > 1 && sh.Width > 1 {
		views = append(views, [2]int{shift, 0}, [2]int{-shift, 0}, [2]int{0, shift}, [2]int{0, -shift})
	}
	var rest []int
	for i, a := range asked {
		if !a {
			rest = append(rest, i)
		}
	}
	sub := pool.Subset(rest)
	m, dim := sub.Len(), sub.Dim()
	probs := make([][]float32, len(views))
	x := make([]float32, len(sub.X))
	for v, d := range views {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if d == [2]int{0, 0} {
			copy(x, sub.X)
		} else {
			for i := range m {
				model.Translate(x[i*dim:(i+1)*dim], sub.Row(i), sh, d[0], d[1])
			}
		}
		p, err := net.Probabilities(x)
		if err != nil {
			return nil, err
		}
		probs[v] = p
	}
	class := make([]int, m)
	conf := make([]float64, m)
	byClass := make([][]int, k)
	for i := range m {
		best, bm := 0, -1.0
		for c := range k {
			s := 0.0
			for _, p := range probs {
				s += float64(p[i*k+c])
			}
			if s > bm {
				best, bm = c, s
			}
		}
		lo := 1.0
		for _, p := range probs {
			lo = min(lo, float64(p[i*k+best]))
		}
		class[i], conf[i] = best, lo
		byClass[best] = append(byClass[best], i)
	}
	place := make([]float64, m)
	for _, idx := range byClass {
		slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(conf[b], conf[a]) })
		for r, i := range idx {
			place[i] = float64(r)
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
