package student

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/ml/data"
)

// FuzzDecodeFallbackRecord: a kept fallback order is read back only as
// distinct queries of the data, none asked before, at most as many as the
// plan bought; anything else is refused, and nothing panics.
func FuzzDecodeFallbackRecord(f *testing.F) {
	good, _ := json.Marshal(fallbackRecord{Order: []int{5, 2, 7}})
	f.Add(good, 8, 3)
	f.Add([]byte(`{"order":[1,1]}`), 4, 2)
	f.Add([]byte(`{"order":[-1]}`), 4, 2)
	f.Add([]byte(`{"order":[0]}`), 4, 2)
	f.Add([]byte(`{"order":null}`), 0, 0)
	f.Fuzz(func(t *testing.T, b []byte, size, n int) {
		if size < 0 || size > 1<<12 {
			return
		}
		asked := make([]bool, size)
		for q := 0; q < size; q += 4 {
			asked[q] = true
		}
		order, ok := decodeFallbackRecord(b, size, n, asked)
		if !ok {
			return
		}
		if len(order) > n || !isPartialPermutation(order, size) {
			t.Fatalf("accepted %v for %d queries, at most %d", order, size, n)
		}
		for _, q := range order {
			if asked[q] {
				t.Fatalf("accepted %v, which names query %d asked already", order, q)
			}
		}
	})
}

func TestDecodeFallbackRecord(t *testing.T) {
	asked := []bool{true, false, false, false}
	for _, tc := range []struct {
		rec  string
		n    int
		want bool
	}{
		{`{"order":[3,1]}`, 2, true},
		{`{"order":[3,1]}`, 1, false}, // more than the plan bought
		{`{"order":[0]}`, 2, false},   // asked in the session
		{`{"order":[4]}`, 2, false},   // no such query
		{`{"order":[2,2]}`, 2, false}, // twice
		{`{"order":`, 2, false},
	} {
		if _, ok := decodeFallbackRecord([]byte(tc.rec), len(asked), tc.n, asked); ok != tc.want {
			t.Errorf("%s with %d planned: ok %v, want %v", tc.rec, tc.n, ok, tc.want)
		}
	}
}

// A ranking that names a query twice, one the session asked, or one out of
// range is refused before anything is asked: the fallback pays for each
// query once.
func TestFallbackOrderRefusesABadRanking(t *testing.T) {
	d := &data.Dataset{X: make([]float32, 4), Y: make([]int, 4), Shape: data.Shape{Height: 1, Width: 1, Channels: 1}, Classes: 2}
	asked := []bool{true, false, false, false}
	for _, tc := range []struct {
		ranked []int
		ok     bool
	}{
		{[]int{3, 1, 2}, true},
		{[]int{3, 3}, false},
		{[]int{2, 0}, false},
		{[]int{4}, false},
		{[]int{-1}, false},
	} {
		c := &Client{cfg: Config{StateDir: t.TempDir(), Fallback: &FallbackConfig{Surest: true},
			Rank: func(context.Context, *data.Dataset, []int, []bool) ([]int, error) { return tc.ranked, nil }}}
		r := &Result{DataHash: strings.Repeat("ab", 16), Labels: []int{1, -1, -1, -1}}
		order, err := c.fallbackOrder(context.Background(), d, r, asked, 3)
		if (err == nil) != tc.ok {
			t.Errorf("ranking %v: order %v, error %v; want accepted %v", tc.ranked, order, err, tc.ok)
		}
	}
}
