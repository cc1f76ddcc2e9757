// Package jsonnum is the JSON form of a float that may be unbounded: the
// standard encoder refuses ±Inf and NaN, and an ε or a δ can be either.
// Every read command of the nzc tool writes them as the strings "inf",
// "-inf" and "nan" (Float); the dashboard sends null to its page, which
// shows ∞ (OrNull). (The ledger's export keeps its own "+Inf", pinned by
// its golden files, in the ledger package, which imports nothing of ours.)
package jsonnum

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Float is a float64 whose JSON form is a number, or "inf", "-inf" or
// "nan".
type Float float64

// MarshalJSON encodes f as the shortest number that reads back as f, or as
// "inf", "-inf", "nan".
func (f Float) MarshalJSON() ([]byte, error) {
	x := float64(f)
	switch {
	case math.IsInf(x, 1):
		return []byte(`"inf"`), nil
	case math.IsInf(x, -1):
		return []byte(`"-inf"`), nil
	case math.IsNaN(x):
		return []byte(`"nan"`), nil
	}
	return strconv.AppendFloat(nil, x, 'g', -1, 64), nil
}

// UnmarshalJSON decodes what MarshalJSON writes, and null as NaN (the form
// of an unknown value in results written before this type).
func (f *Float) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case `"inf"`:
		*f = Float(math.Inf(1))
		return nil
	case `"-inf"`:
		*f = Float(math.Inf(-1))
		return nil
	case `"nan"`, `null`:
		*f = Float(math.NaN())
		return nil
	}
	var x float64
	if err := json.Unmarshal(b, &x); err != nil {
		return fmt.Errorf("jsonnum: %s is not a number, \"inf\", \"-inf\" or \"nan\": %w", b, err)
	}
	*f = Float(x)
	return nil
}

// Floats converts xs.
func Floats(xs []float64) []Float {
	out := make([]Float, len(xs))
	for i, x := range xs {
		out[i] = Float(x)
	}
	return out
}

// OrNull is a float64 whose JSON form is a number, or null when it is not
// finite: for a reader that shows an unbounded value in its own way.
type OrNull float64

// MarshalJSON encodes f as encoding/json encodes a float64, or as null.
func (f OrNull) MarshalJSON() ([]byte, error) {
	if x := float64(f); math.IsInf(x, 0) || math.IsNaN(x) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(f))
}
