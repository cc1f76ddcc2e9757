package ledger

import (
	"crypto/sha256"
	"testing"

	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/mechanism/mechanismtest"
)

// A mechanism registered outside package mechanism is charged what its own
// definition says, and the ledger refuses a charge of it that states less:
// the ledger derives costs from the registry, not from a list of names.
func TestRegisteredMechanismCost(t *testing.T) {
	mechanismtest.Register(t)
	g := mechanism.DefaultGrid()
	p := mechanism.Params{Mechanism: mechanismtest.Toy, Teachers: 250, Classes: 10, Scale: 4, Threshold: 100}
	const q, a = 10, 6
	want, err := p.Charge(g, a, q-a)
	if err != nil {
		t.Fatal(err)
	}
	// 6 answers at 3/4 and 4 refusals at 1/4: pure ε 5.5, rounded up.
	if want.PureEpsilon < 5.5 || want.PureEpsilon > 5.5+1e-12 {
		t.Fatalf("toy charge: pure ε %v, want 5.5", want.PureEpsilon)
	}
	toyCharge := func(batch string, curve []float64) *Charge {
		return &Charge{BatchID: batch, Student: "s2", Hospitals: []string{"h1"}, Mechanism: string(p.Mechanism),
			Params: p.LedgerParams(), Queries: q, Answers: a, Curve: curve, AnswersHash: sha256.Sum256([]byte(batch)),
			Timestamp: 1_700_000_001_000_000_000}
	}
	cases := []struct {
		name   string
		body   *Charge
		status Status
		code   Code
	}{
		{"its true cost", toyCharge("toy-honest", want.RDP.Values()), StatusAccepted, CodeOK},
		{"no cost", toyCharge("toy-free", make([]float64, g.Len())), StatusRefused, CodeUnderCost},
		{"one query's cost", toyCharge("toy-cheap", mechanism.PureDP(g, 0.75).Values()), StatusRefused, CodeUnderCost},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFed(t)
			r := f.apply(f.sign(c.body, "agg"))
			if r.Status != c.status || r.Code != c.code {
				t.Fatalf("got %s/%s (%s), want %s/%s", r.Status, r.Code, r.Message, c.status, c.code)
			}
			acc, _ := f.st.Account("h1")
			if c.status != StatusAccepted {
				if acc.Charges != 0 {
					t.Fatalf("a refused charge changed h1's account: %+v", acc)
				}
				if CostCheck(Command{Body: c.body}) == nil {
					t.Error("CostCheck passes an under-costed charge")
				}
				return
			}
			// The account's pure-ε sum is the toy's, as its definition prices it.
			if acc.Charges != 1 || acc.Epsilon > want.PureEpsilon+1e-9 || acc.Epsilon <= 0 {
				t.Fatalf("h1 after the charge: %+v, want one charge of at most ε %v", acc, want.PureEpsilon)
			}
		})
	}
}
