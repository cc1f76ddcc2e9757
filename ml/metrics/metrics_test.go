package metrics

import (
	"slices"
	"testing"
)

func TestAccuracy(t *testing.T) {
	tests := []struct {
		pred, truth []int
		acc         float64
		answered    int
	}{
		{[]int{0, 1, 2}, []int{0, 1, 1}, 2.0 / 3, 3},
		{[]int{Refused, 1, Refused}, []int{0, 1, 1}, 1, 1},
		{[]int{Refused}, []int{0}, 0, 0},
		{nil, nil, 0, 0},
	}
	for _, tt := range tests {
		acc, n := Accuracy(tt.pred, tt.truth)
		if acc != tt.acc || n != tt.answered {
			t.Errorf("Accuracy(%v, %v) = %v, %d; want %v, %d", tt.pred, tt.truth, acc, n, tt.acc, tt.answered)
		}
	}
}

func TestConfusion(t *testing.T) {
	c := NewConfusion([]int{0, 1, 1, Refused, 2}, []int{0, 0, 1, 2, 2}, 3)
	want := [][]int{{1, 1, 0}, {0, 1, 0}, {0, 0, 1}}
	for i := range want {
		if !slices.Equal(c.Counts[i], want[i]) {
			t.Fatalf("counts %v, want %v", c.Counts, want)
		}
	}
	if c.Accuracy() != 0.75 {
		t.Fatalf("accuracy %v", c.Accuracy())
	}
	if r := c.Recall(); !slices.Equal(r, []float64{0.5, 1, 1}) {
		t.Fatalf("recall %v", r)
	}
}
