package ledger

import (
	"encoding/json"
	"math"
	"strings"
	"sync"
	"testing"
)

func TestJSONWithInfinity(t *testing.T) {
	f := newFed(t)
	inf := gaussCurve(40, 1)
	for i := range inf {
		inf[i] = math.Inf(1)
	}
	r := f.apply(f.sign(chargeBody("b1", []string{"h1"}, inf, 1), "agg"))
	if r.Code != CodeCapExceeded || !math.IsInf(r.ChargeEpsilon, 1) {
		t.Fatalf("%s %v", r.Code, r.ChargeEpsilon)
	}
	b, err := json.Marshal(r)
	if err != nil || !strings.Contains(string(b), `"charge_epsilon":"+Inf"`) || !strings.Contains(string(b), `"code":20`) {
		t.Fatalf("%s %v", b, err)
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil || back.Code != r.Code || back.Subject != "h1" || back.Index != r.Index ||
		!math.IsInf(back.ChargeEpsilon, 1) || back.SpentEpsilon != r.SpentEpsilon || back.CapEpsilon != 8 || back.Message != r.Message {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	// Lower h1's δ to what a charge already spent: its ε becomes unbounded.
	c := chargeBody("b2", []string{"h1"}, gaussCurve(40, 1), 1)
	c.Delta = 5e-6
	f.must(c, "agg")
	f.must(&ChangeCap{Hospital: "h1", Version: 1, CapEpsilon: 8, CapDelta: 5e-6, Timestamp: f.now()}, "h1")
	acc := f.st.Accounts()[0]
	if !math.IsInf(acc.Epsilon, 1) {
		t.Fatalf("h1 ε %v with no δ left", acc.Epsilon)
	}
	ab, err := json.Marshal(acc)
	if err != nil || !strings.Contains(string(ab), `"epsilon":"+Inf"`) {
		t.Fatalf("%s %v", ab, err)
	}
	var accBack Account
	if err := json.Unmarshal(ab, &accBack); err != nil || !math.IsInf(accBack.Epsilon, 1) || accBack.Hospital != "h1" ||
		len(accBack.Curve) != len(acc.Curve) || accBack.Curve[7] != acc.Curve[7] || accBack.DeltaSpent != acc.DeltaSpent {
		t.Fatalf("account round trip: %+v %v", accBack, err)
	}
}

// TestReadsDuringApply runs the compliance reads while commands apply; run
// with -race.
func TestReadsDuringApply(t *testing.T) {
	f := newFed(t)
	cmds := make([][]byte, 50)
	for i := range cmds {
		cmds[i] = f.sign(chargeBody(strings.Repeat("b", i+1), []string{"h1", "h3"}, gaussCurve(200, 1), 1), "agg")
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			n := f.st.TreeSize()
			f.st.Accounts()
			if _, err := f.st.Entries(0, n); err != nil {
				t.Error(err)
				return
			}
			if c, err := f.st.Checkpoint(); err != nil || c.Size < n {
				t.Errorf("checkpoint %v %v", c, err)
				return
			}
		}
	})
	for _, c := range cmds {
		if _, err := f.st.Apply(c); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
}
