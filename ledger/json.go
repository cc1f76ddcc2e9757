package ledger

import (
	"encoding/json"
	"math"
)

// jsonFloat returns v, or "+Inf" / "-Inf" for infinities, which JSON numbers
// cannot carry. An unbounded ε is a real answer ("this spends everything")
// and must survive the trip to a report or a dashboard.
func jsonFloat(v float64) any {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return v
}

func jsonFloats(vs []float64) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = jsonFloat(v)
	}
	return out
}

// MarshalJSON writes the account with infinite values as "+Inf".
func (a Account) MarshalJSON() ([]byte, error) {
	type plain Account
	return json.Marshal(struct {
		plain
		Epsilon any   `json:"epsilon"`
		Curve   []any `json:"curve"`
	}{plain(a), jsonFloat(a.Epsilon), jsonFloats(a.Curve)})
}

// MarshalJSON writes the result with infinite figures as "+Inf".
func (r Result) MarshalJSON() ([]byte, error) {
	type plain Result
	return json.Marshal(struct {
		plain
		SpentEpsilon  any `json:"spent_epsilon,omitempty"`
		ChargeEpsilon any `json:"charge_epsilon,omitempty"`
		CapEpsilon    any `json:"cap_epsilon,omitempty"`
	}{plain(r), omitZero(r.SpentEpsilon), omitZero(r.ChargeEpsilon), omitZero(r.CapEpsilon)})
}

func omitZero(v float64) any {
	if v == 0 {
		return nil
	}
	return jsonFloat(v)
}
