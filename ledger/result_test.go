package ledger

import (
	"errors"
	"math"
	"testing"
)

// goldenResults are one Result of each kind the auditors send back.
var goldenResults = map[string]Result{
	"accepted": {Index: 12, Outcome: Outcome{Status: StatusAccepted}, Message: "charge batch-7 accepted"},
	"duplicate": {Index: 14, Outcome: Outcome{Status: StatusDuplicate, Original: 12},
		Message: "batch-7 was already charged at index 12"},
	"refused": {Index: 15, Outcome: Outcome{Status: StatusRefused, Code: CodeCapExceeded, Subject: "hospital-a"},
		Message: "over the cap", SpentEpsilon: 1.5, ChargeEpsilon: math.Inf(1), CapEpsilon: 2},
}

func TestResultGolden(t *testing.T) {
	for name, r := range goldenResults {
		t.Run(name, func(t *testing.T) {
			enc := EncodeResult(r)
			golden(t, "result-"+name+".bin", enc)
			got, err := DecodeResult(enc)
			if err != nil {
				t.Fatal(err)
			}
			if got != r {
				t.Fatalf("got %+v, want %+v", got, r)
			}
		})
	}
}

func TestResultEncodingRoundTrip(t *testing.T) {
	for _, r := range []Result{
		{},
		{Index: 7, Outcome: Outcome{Status: StatusRefused, Code: 9, Subject: "h1", Original: 3},
			Message: "over the cap", SpentEpsilon: 1.5, ChargeEpsilon: math.Inf(1), CapEpsilon: 2},
	} {
		enc := EncodeResult(r)
		got, err := DecodeResult(enc)
		if err != nil {
			t.Fatal(err)
		}
		if got != r {
			t.Fatalf("got %+v, want %+v", got, r)
		}
		for cut := range len(enc) {
			if _, err := DecodeResult(enc[:cut]); !errors.Is(err, ErrMalformed) {
				t.Fatalf("a result cut to %d bytes: got %v, want ErrMalformed", cut, err)
			}
		}
		if _, err := DecodeResult(append(enc, 0)); !errors.Is(err, ErrMalformed) {
			t.Fatalf("a result with a trailing byte: got %v, want ErrMalformed", err)
		}
	}
}

func FuzzDecodeResult(f *testing.F) {
	for _, r := range goldenResults {
		f.Add(EncodeResult(r))
	}
	f.Add(EncodeResult(Result{Index: 1, Message: "m"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeResult(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		// Decoding is exact: a decoded result encodes back to its input.
		if again := EncodeResult(r); string(again) != string(b) {
			t.Fatalf("result does not re-encode to its input:\n in %x\nout %x", b, again)
		}
	})
}
