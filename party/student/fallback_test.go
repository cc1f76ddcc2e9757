package student

import (
	"encoding/json"
	"testing"
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
