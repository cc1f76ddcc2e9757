package mechanism

import (
	"errors"
	"fmt"
)

// Histogram is one query's vote histogram: Histogram[i] is the number of
// teachers that voted for class i. Teachers that did not vote are simply not
// counted, so the counts sum to at most the number of teachers.
type Histogram []int

// Errors about histograms. They come wrapped in a *HistogramError that says
// which class is wrong.
var (
	ErrEmptyHistogram = errors.New("mechanism: the vote histogram is empty; give one count per class")
	ErrClassCount     = errors.New("mechanism: the vote histogram has the wrong number of classes; give one count per class, the same classes for every query")
	ErrNegativeVotes  = errors.New("mechanism: a vote count is negative; counts are numbers of teachers")
	ErrTooManyVotes   = errors.New("mechanism: the histogram has more votes than there are teachers; check the counts or the number of teachers")
)

// HistogramError reports an invalid histogram. Class is the offending class,
// or −1 when the histogram as a whole is wrong.
type HistogramError struct {
	Class int
	Err   error
	Msg   string
}

func (e *HistogramError) Error() string {
	if e.Class >= 0 {
		return fmt.Sprintf("%v (class %d: %s)", e.Err, e.Class, e.Msg)
	}
	if e.Msg != "" {
		return fmt.Sprintf("%v (%s)", e.Err, e.Msg)
	}
	return e.Err.Error()
}

func (e *HistogramError) Unwrap() error { return e.Err }

// Validate checks h against the number of classes and teachers. classes ≤ 0
// accepts any non-empty number of classes.
func (h Histogram) Validate(classes, teachers int) error {
	if len(h) == 0 {
		return &HistogramError{Class: -1, Err: ErrEmptyHistogram}
	}
	if classes > 0 && len(h) != classes {
		return &HistogramError{Class: -1, Err: ErrClassCount, Msg: fmt.Sprintf("%d counts for %d classes", len(h), classes)}
	}
	total := 0
	for i, n := range h {
		if n < 0 {
			return &HistogramError{Class: i, Err: ErrNegativeVotes, Msg: fmt.Sprintf("count %d", n)}
		}
		total += n
		if total > teachers || total < 0 {
			return &HistogramError{Class: -1, Err: ErrTooManyVotes, Msg: fmt.Sprintf("more than %d votes", teachers)}
		}
	}
	return nil
}

// Top returns the class with the most votes, the lowest index among ties
// (a rule that does not depend on the data).
func (h Histogram) Top() int {
	top := 0
	for i, n := range h {
		if n > h[top] {
			top = i
		}
	}
	return top
}

// Distance returns the distance to instability of the argmax: the largest d
// such that every histogram reachable by moving at most d votes (one teacher
// changing its vote, or starting or stopping to vote, per step) has the same
// argmax as h, with ties going to the lowest index. Distance 0 means one
// teacher can change the argmax. Moving one vote changes Distance by at most
// 1. A histogram with one class has distance teachers (nothing can change).
//
// For a class j ≠ top with gap g = h[top] − h[j], a step lowers the gap by at
// most 2 (a vote moving from top to j); j takes over when the gap reaches 0
// (j < top) or −1 (j > top), so it needs ⌈g/2⌉ or ⌊g/2⌋+1 steps.
func (h Histogram) Distance(teachers int) int {
	top := h.Top()
	best := teachers + 1
	for j, n := range h {
		if j == top {
			continue
		}
		g := h[top] - n
		steps := g/2 + 1
		if j < top {
			steps = (g + 1) / 2
		}
		best = min(best, steps)
	}
	return best - 1
}
