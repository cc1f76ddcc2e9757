package jsonnum

import (
	"encoding/json"
	"math"
	"testing"
)

func same(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }

func TestFloat(t *testing.T) {
	for _, tc := range []struct {
		x    float64
		json string
	}{
		{1.5, "1.5"},
		{1e-5, "1e-05"},
		{0, "0"},
		{-2.25, "-2.25"},
		{1.8e114, "1.8e+114"},
		{math.Inf(1), `"inf"`},
		{math.Inf(-1), `"-inf"`},
		{math.NaN(), `"nan"`},
	} {
		b, err := json.Marshal(Float(tc.x))
		if err != nil || string(b) != tc.json {
			t.Errorf("%v as JSON: %s, %v; want %s", tc.x, b, err, tc.json)
		}
		var back Float
		if err := json.Unmarshal(b, &back); err != nil || !same(float64(back), tc.x) {
			t.Errorf("%s read back as %v, %v; want %v", b, back, err, tc.x)
		}
	}
	var f Float
	if err := json.Unmarshal([]byte(`null`), &f); err != nil || !math.IsNaN(float64(f)) {
		t.Errorf("null read as %v, %v; want NaN", f, err)
	}
	for _, bad := range []string{`"Inf"`, `"+inf"`, `"1"`, `true`, `[1]`} {
		if err := json.Unmarshal([]byte(bad), &f); err == nil {
			t.Errorf("%s read as %v, want an error", bad, f)
		}
	}
}

func TestOrNull(t *testing.T) {
	b, err := json.Marshal([]OrNull{1.5, 1e-5, OrNull(math.Inf(1)), OrNull(math.Inf(-1)), OrNull(math.NaN())})
	if want := "[1.5,0.00001,null,null,null]"; err != nil || string(b) != want {
		t.Fatalf("OrNull as JSON: %s, %v; want %s", b, err, want)
	}
}

// Whatever decodes, encodes and decodes again to the same value.
func FuzzFloat(f *testing.F) {
	for _, s := range []string{`1.5`, `"inf"`, `"-inf"`, `"nan"`, `null`, `-0`, `1e308`, `"x"`, `1e400`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var x Float
		if err := x.UnmarshalJSON(b); err != nil {
			return
		}
		enc, err := json.Marshal(x)
		if err != nil {
			t.Fatalf("%s decoded to %v, which does not encode: %v", b, x, err)
		}
		var y Float
		if err := json.Unmarshal(enc, &y); err != nil || !same(float64(x), float64(y)) {
			t.Fatalf("%s → %v → %s → %v, %v", b, x, enc, y, err)
		}
	})
}
