package ledger

import (
	"encoding/json"
	"fmt"
	"math"
)

// JSONFloat is a float64 that JSON carries even when infinite, as "+Inf" or
// "-Inf". An unbounded ε is a real answer ("this spends everything") and
// must survive the trip to a report or a dashboard; encoding/json refuses
// infinities.
type JSONFloat float64

func (f JSONFloat) MarshalJSON() ([]byte, error) {
	switch v := float64(f); {
	case math.IsInf(v, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-Inf"`), nil
	}
	return json.Marshal(float64(f))
}

func (f *JSONFloat) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case `"+Inf"`:
		*f = JSONFloat(math.Inf(1))
		return nil
	case `"-Inf"`:
		*f = JSONFloat(math.Inf(-1))
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("ledger: %s is not a number, \"+Inf\" or \"-Inf\"", b)
	}
	*f = JSONFloat(v)
	return nil
}

// convertFloats converts each element of vs to U, keeping nil as nil.
func convertFloats[U, T ~float64](vs []T) []U {
	if vs == nil {
		return nil
	}
	out := make([]U, len(vs))
	for i, v := range vs {
		out[i] = U(v)
	}
	return out
}

type accountJSON struct {
	plainAccount
	Epsilon                  JSONFloat   `json:"epsilon"`
	EpsilonAtFederationDelta JSONFloat   `json:"epsilon_at_federation_delta"`
	Curve                    []JSONFloat `json:"curve"`
}

type plainAccount Account

// MarshalJSON writes the account with infinite values as "+Inf".
func (a Account) MarshalJSON() ([]byte, error) {
	return json.Marshal(accountJSON{plainAccount(a), JSONFloat(a.Epsilon), JSONFloat(a.EpsilonAtFederationDelta), convertFloats[JSONFloat](a.Curve)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (a *Account) UnmarshalJSON(b []byte) error {
	var j accountJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*a = Account(j.plainAccount)
	a.Epsilon, a.EpsilonAtFederationDelta, a.Curve = float64(j.Epsilon), float64(j.EpsilonAtFederationDelta), convertFloats[float64](j.Curve)
	return nil
}

type plainResult Result

type resultJSON struct {
	plainResult
	SpentEpsilon  JSONFloat `json:"spent_epsilon,omitempty"`
	ChargeEpsilon JSONFloat `json:"charge_epsilon,omitempty"`
	CapEpsilon    JSONFloat `json:"cap_epsilon,omitempty"`
}

// MarshalJSON writes the result with infinite figures as "+Inf".
func (r Result) MarshalJSON() ([]byte, error) {
	return json.Marshal(resultJSON{plainResult(r), JSONFloat(r.SpentEpsilon), JSONFloat(r.ChargeEpsilon), JSONFloat(r.CapEpsilon)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *Result) UnmarshalJSON(b []byte) error {
	var j resultJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = Result(j.plainResult)
	r.SpentEpsilon, r.ChargeEpsilon, r.CapEpsilon = float64(j.SpentEpsilon), float64(j.ChargeEpsilon), float64(j.CapEpsilon)
	return nil
}
