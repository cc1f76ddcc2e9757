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
		jsonRoundTrip[Account](t, "account", b)
		jsonRoundTrip[Result](t, "result", b)
	})
}

// jsonRoundTrip checks that b, when it decodes as a T, encodes again and
// decodes to the same value.
func jsonRoundTrip[T any](t *testing.T, what string, b []byte) {
	t.Helper()
	var v T
	if json.Unmarshal(b, &v) != nil {
		return
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("a decoded %s does not encode: %v", what, err)
	}
	var back T
	if err := json.Unmarshal(out, &back); err != nil || !reflect.DeepEqual(v, back) {
		t.Fatalf("%s round trip: %+v → %s → %+v (%v)", what, v, out, back, err)
	}
}
