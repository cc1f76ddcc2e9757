package aggregator

import (
	"errors"
	"testing"

	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/protocol"
)

// A fallback batch runs per query under the configured fallback, outside
// the student's session, at the fallback's cost; a federation that offers
// none refuses it before anything is asked; and New refuses a fallback
// that is not a per-query mechanism beside a session mechanism.
func TestFallbackBatches(t *testing.T) {
	f := newFixture(t, 2, 50)
	for _, h := range f.hospitals {
		h.teachers = 200
		f.cfg.Ensembles[h.id] = h.teachers
	}
	cfg := f.cfg
	cfg.Quorum = 2
	cfg.Mechanism = mechanism.Params{Mechanism: mechanism.NZCSVT, Threshold: 100, Scale: 1, MaxRefusals: 3}
	cfg.Fallback = mechanism.Params{Mechanism: mechanism.GNMax, Sigma: 40}

	t.Run("refused where none is offered", func(t *testing.T) {
		none := cfg
		none.Fallback = mechanism.Params{}
		none.OutboxDir = t.TempDir()
		a := f.start(t, none)
		req, _ := f.request(t, 1, 4)
		req.Fallback = true
		before := len(f.led.charged())
		if _, err := a.Label(t.Context(), "student-1", req); !errors.Is(err, protocol.ErrBadRequest) {
			t.Fatalf("a fallback batch where none is offered: %v, want bad-request", err)
		}
		if len(f.led.charged()) != before {
			t.Fatal("a refused fallback batch reached the ledger")
		}
	})

	t.Run("charged per query at its cost", func(t *testing.T) {
		a := f.start(t, cfg)
		req, want := f.request(t, 2, 6)
		req.Fallback = true
		l := f.open(t, label(t, a, req))
		ch := f.led.charges(t)[batchHex(req)]
		if ch == nil || ch.Session != "" || ch.Mechanism != string(mechanism.GNMax) || ch.Queries != 6 {
			t.Fatalf("charge %+v: want 6 gnmax queries outside any session", ch)
		}
		p := cfg.Fallback
		p.Teachers, p.Classes = 400, classes
		cost, err := p.Charge(mechanism.DefaultGrid(), 6, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range cost.RDP.Values() {
			if ch.Curve[i] < v {
				t.Fatalf("order %d: charged %v, the fallback's cost is %v", i, ch.Curve[i], v)
			}
		}
		// σ = 40 on 400 unanimous votes: every label is the argmax unless
		// two draws differ by 400, 7σ√2 (probability below 1e-6 per query).
		for i, got := range l.GetLabels() {
			if got != want[i] {
				t.Errorf("query %d: %d, want %d", i, got, want[i])
			}
		}
	})

	t.Run("held to the student's quota with its session's answers", func(t *testing.T) {
		q := newFixtureWith(t, 2, 50, rules{quota: 8})
		for _, h := range q.hospitals {
			h.teachers = 200
			q.cfg.Ensembles[h.id] = h.teachers
		}
		c := q.cfg
		c.Quorum, c.Mechanism, c.Fallback = 2, cfg.Mechanism, cfg.Fallback
		a := q.start(t, c)
		req, _ := q.request(t, 3, 6)
		q.open(t, label(t, a, req)) // in the session: 6 answers (each 200 votes from instability, the threshold 100)
		if ch := q.led.charges(t)[batchHex(req)]; ch == nil || ch.Session == "" || ch.Answers != 6 {
			t.Fatalf("charge %+v: want 6 answers in the session", ch)
		}
		before := len(q.led.charged())
		fb, _ := q.request(t, 4, 4)
		fb.Fallback = true
		if _, err := a.Label(t.Context(), "student-1", fb); !errors.Is(err, protocol.ErrBudgetExhausted) {
			t.Fatalf("4 fallback queries after 6 answers against a quota of 8: %v, want budget-exhausted", err)
		}
		if len(q.led.charged()) != before {
			t.Fatal("a fallback batch past the quota was charged")
		}
	})

	t.Run("New checks it", func(t *testing.T) {
		for name, mut := range map[string]func(*Config){
			"beside a per-query mechanism": func(c *Config) { c.Mechanism = mechanism.Params{Mechanism: mechanism.GNMax, Sigma: 40} },
			"a session mechanism":          func(c *Config) { c.Fallback = c.Mechanism },
			"no noise":                     func(c *Config) { c.Fallback.Sigma = 0 },
		} {
			c := cfg
			mut(&c)
			if _, err := New(c); err == nil {
				t.Errorf("%s: accepted", name)
			}
		}
	})
}
