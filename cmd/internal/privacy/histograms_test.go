package privacy

import (
	"math"
	"strings"
	"testing"
)

// The histogram decoder never panics, and what it accepts is valid.
func FuzzDecodeHistograms(f *testing.F) {
	for _, s := range []string{"[[1,2],[3,4]]", "[]", "[[0]]", "[[1,-1]]", "[[1e3]]", "[[1],[2,3]] x", "{}", "[[9223372036854775807,1]]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hs, err := DecodeHistograms(strings.NewReader(s))
		if err != nil {
			return
		}
		for i, h := range hs {
			if err := h.Validate(0, math.MaxInt); err != nil {
				t.Fatalf("query %d accepted but invalid: %v", i, err)
			}
		}
	})
}

func TestText(t *testing.T) {
	for _, tc := range []struct {
		x    float64
		text string
	}{
		{1.5, "1.5"},
		{1e-5, "1e-05"},
		{math.Inf(1), "inf (unbounded)"},
		{math.Inf(-1), "-Inf"},
		{math.NaN(), "NaN"},
	} {
		if got := Text(tc.x); got != tc.text {
			t.Errorf("%v as text: %q, want %q", tc.x, got, tc.text)
		}
	}
}
