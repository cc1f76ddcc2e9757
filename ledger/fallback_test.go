package ledger

import (
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/mechanism/budget"
)

// TestFallbackAfterSession: a student whose nzc-svt session has ended asks
// the rest of its cap under a per-query fallback (GNMax). The ledger
// charges each fallback query its data-independent cost in the same
// account as the session, accepts exactly the queries budget.Rest says the
// rest of the cap buys, and refuses a fallback charge past the cap,
// whichever way it is split into batches: a student cannot exceed the cap
// by switching mechanisms.
func TestFallbackAfterSession(t *testing.T) {
	g := mechanism.DefaultGrid()
	session := svtParams(1) // pure ε = 2
	sessionCost, err := session.Charge(g, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		sigma float64
		batch int // fallback queries per charge
	}{
		{"one charge", 40, 0},
		{"batches of 7", 40, 7},
		{"a noisier fallback in batches of 25", 80, 25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFed(t) // h3: cap ε 4 at δ 1e-5
			fb := mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Classes: 10, Sigma: tc.sigma}
			n, eps, err := budget.Rest(sessionCost, fb, 4, 1e-5, 100000)
			if err != nil || n < 2 || eps > 4 {
				t.Fatalf("the rest of cap 4 after the session buys %d queries at ε %v (%v)", n, eps, err)
			}
			o := openSession(t, "svt-1", "s2", []string{"h3"}, 1)
			o.Timestamp = f.now()
			f.must(o, "agg")
			charge := func(id string, q int) Result {
				c, err := fb.Charge(g, q, 0)
				if err != nil {
					t.Fatal(err)
				}
				return f.apply(f.sign(&Charge{BatchID: id, Student: "s2", Hospitals: []string{"h3"}, Mechanism: string(fb.Mechanism), Params: fb.LedgerParams(),
					Queries: uint64(q), Answers: uint64(q), Curve: c.RDP.Values(), Delta: c.Delta, AnswersHash: sha256.Sum256([]byte(id)), Timestamp: f.now()}, "agg"))
			}
			size := tc.batch
			if size == 0 {
				size = n
			}
			for done, i := 0, 0; done < n; i++ {
				q := min(size, n-done)
				if r := charge(fmt.Sprintf("fallback-%d", i), q); r.Status != StatusAccepted {
					t.Fatalf("fallback charge %d of %d queries (%d of the %d the rest buys): %s/%s: %s", i, q, done+q, n, r.Status, r.Code, r.Message)
				}
				done += q
			}
			r := charge("fallback-over", 1)
			if r.Status != StatusRefused || r.Code != CodeCapExceeded {
				t.Fatalf("one fallback query past the %d the rest of the cap buys: %s/%s: %s; want refused for the cap", n, r.Status, r.Code, r.Message)
			}
			a, _ := f.st.Account("h3")
			if a.Epsilon > 4 || a.Answers != uint64(n) {
				t.Fatalf("h3 spent ε %v on %d answers; want at most its cap 4 on the %d fallback answers", a.Epsilon, a.Answers, n)
			}
		})
	}
}
