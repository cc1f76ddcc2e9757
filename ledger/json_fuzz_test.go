package ledger

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzAccountJSON feeds arbitrary JSON to the decoders of the accounts and
// results the compliance API serves and `nzc ledger accounts` reads: what
// decodes encodes again (infinite ε included) and decodes to the same value.
func FuzzAccountJSON(f *testing.F) {
	f.Add([]byte(`{"hospital":"hospital-1","cap_epsilon":8,"cap_delta":1e-5,"epsilon":"+Inf","curve":[1,"+Inf",3],"charges":2}`))
	f.Add([]byte(`{"status":"refused","spent_epsilon":"-Inf","charge_epsilon":1e308,"cap_epsilon":"+Inf"}`))
	f.Add([]byte(`{"epsilon":"NaN"}`))
	f.Add([]byte(`{"curve":null,"epsilon":1e999}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var a Account
		if json.Unmarshal(b, &a) == nil {
			out, err := json.Marshal(a)
			if err != nil {
				t.Fatalf("a decoded account does not encode: %v", err)
			}
			var back Account
			if err := json.Unmarshal(out, &back); err != nil || !reflect.DeepEqual(a, back) {
				t.Fatalf("account round trip: %+v → %s → %+v (%v)", a, out, back, err)
			}
		}
		var r Result
		if json.Unmarshal(b, &r) == nil {
			out, err := json.Marshal(r)
			if err != nil {
				t.Fatalf("a decoded result does not encode: %v", err)
			}
			var back Result
			if err := json.Unmarshal(out, &back); err != nil || !reflect.DeepEqual(r, back) {
				t.Fatalf("result round trip: %+v → %s → %+v (%v)", r, out, back, err)
			}
		}
	})
}
