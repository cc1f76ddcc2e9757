// Package metrics evaluates classifiers and released labels.
package metrics

// Refused marks a query the aggregator declined to answer.
const Refused = -1

// Accuracy is the fraction of positions where pred equals truth, over the
// positions where pred is not Refused, and the number of such positions.
// It is 0 when nothing was answered.
func Accuracy(pred, truth []int) (acc float64, answered int) {
	ok := 0
	for i, p := range pred {
		if p == Refused {
			continue
		}
		answered++
		if i < len(truth) && p == truth[i] {
			ok++
		}
	}
	if answered == 0 {
		return 0, 0
	}
	return float64(ok) / float64(answered), answered
}

// Confusion is a confusion matrix: Counts[true][predicted].
type Confusion struct {
	Counts [][]int
}

// NewConfusion tallies (truth, pred) pairs over classes classes, skipping
// refusals and labels outside [0, classes).
func NewConfusion(pred, truth []int, classes int) Confusion {
	c := Confusion{Counts: make([][]int, classes)}
	for i := range c.Counts {
		c.Counts[i] = make([]int, classes)
	}
	for i, p := range pred {
		if i >= len(truth) || p < 0 || p >= classes || truth[i] < 0 || truth[i] >= classes {
			continue
		}
		c.Counts[truth[i]][p]++
	}
	return c
}

// Accuracy is the trace over the total.
func (c Confusion) Accuracy() float64 {
	ok, n := 0, 0
	for i, row := range c.Counts {
		for j, v := range row {
			n += v
			if i == j {
				ok += v
			}
		}
	}
	if n == 0 {
		return 0
	}
	return float64(ok) / float64(n)
}

// Recall is, per true class, the fraction classified correctly (0 for an absent class).
func (c Confusion) Recall() []float64 {
	out := make([]float64, len(c.Counts))
	for i, row := range c.Counts {
		n := 0
		for _, v := range row {
			n += v
		}
		if n > 0 {
			out[i] = float64(row[i]) / float64(n)
		}
	}
	return out
}
