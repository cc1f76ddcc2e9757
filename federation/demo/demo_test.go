package demo

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/federation/config"
	"github.com/nzcfed/nzc/mechanism"
)

func TestMechanismsAreValid(t *testing.T) {
	for _, name := range []string{"confident-gnmax", "gnmax", "lnmax", "nzc", "nzc-svt"} {
		for _, k := range []int{1, 20, 150, 2500} {
			m, err := Mechanism(name, k, 2)
			if name == "nzc-svt" && k < 150 {
				// No session of the preset's ε and δ can answer with so
				// few teachers: the demo says so instead of starting an
				// aggregator the configuration check would refuse.
				if err == nil || !strings.Contains(err.Error(), "use more teachers") {
					t.Errorf("nzc-svt with %d teachers: %+v, %v; want a plain refusal", k, m, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s with %d teachers: %v", name, k, err)
			}
			agg := config.DefaultAggregator()
			agg.Auditors, agg.TLS, agg.AgeIdentity, agg.SigningKey = []string{"127.0.0.1:1"}, config.TLS{CA: "a", Cert: "b", Key: "c"}, "x", "y"
			agg.AuditorKeys = []string{"a1+f853fd16+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"}
			agg.Mechanism = m
			if err := agg.Validate(); err != nil {
				t.Errorf("%s with %d teachers: the aggregator refuses %+v: %v", name, k, m, err)
			}
			if m.String() == "" {
				t.Errorf("%s: no description", name)
			}
		}
	}
	if _, err := Mechanism("median", 10, 2); err == nil {
		t.Error("an unknown mechanism was accepted")
	}
	// The default costs what the report promises: the queries it asks,
	// every one answered, stay under its cap at δ = CapDelta as the
	// ledger's gate converts an account (FilterEpsilon), and one more
	// would not.
	d := Defaults()
	k := d.Hospitals * d.Teachers
	m, err := Mechanism(d.Mechanism, k, d.CapEpsilon)
	if err != nil {
		t.Fatal(err)
	}
	asked := Asked(m, k, d.Queries, d.CapEpsilon)
	if asked < 1 || asked >= d.Queries {
		t.Fatalf("the default demo asks %d of %d queries", asked, d.Queries)
	}
	m.Teachers = k
	for _, tc := range []struct {
		n    int
		fits bool
	}{{asked, true}, {asked + 1, false}} {
		c, err := m.Charge(mechanism.DefaultGrid(), tc.n, 0)
		if err != nil {
			t.Fatal(err)
		}
		e, err := c.RDP.FilterEpsilon(CapDelta - c.Delta)
		if err != nil || (e.Epsilon <= d.CapEpsilon) != tc.fits {
			t.Errorf("the default demo's worst case for %d queries costs ε=%v (%v) against its cap %v; want fits %v", tc.n, e.Epsilon, err, d.CapEpsilon, tc.fits)
		}
	}
}

func TestAsked(t *testing.T) {
	svt, err := Mechanism("nzc-svt", 300, 2)
	if err != nil {
		t.Fatal(err)
	}
	nzc, err := Mechanism("nzc", 300, 2)
	if err != nil {
		t.Fatal(err)
	}
	gn, err := Mechanism("gnmax", 300, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		m       mechanism.Params
		queries int
		cap     float64
		want    int
	}{
		{"a session answers until its refusals are used", svt, 9000, 2, 9000},
		{"a mechanism no cap pays for is asked one batch", nzc, 9000, 2, StudentBatch},
		{"a small pool is asked whole", gn, 50, 2, 50},
		{"a larger cap asks more", gn, 9000, 4, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Asked(tc.m, 300, tc.queries, tc.cap)
			if tc.want == -1 {
				if base := Asked(gn, 300, tc.queries, 2); got <= base {
					t.Fatalf("Asked at cap %v = %d, not more than %d at cap 2", tc.cap, got, base)
				}
				return
			}
			if got != tc.want {
				t.Fatalf("Asked = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestOptionsChecked(t *testing.T) {
	ok := Defaults()
	if err := ok.Check(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Options){
		"no hospitals":  func(o *Options) { o.Hospitals = 0 },
		"no teachers":   func(o *Options) { o.Teachers = 0 },
		"too many":      func(o *Options) { o.Queries = 9500 },
		"bad cap":       func(o *Options) { o.CapEpsilon = 0 },
		"bad mechanism": func(o *Options) { o.Mechanism = "median" },
	} {
		o := ok
		mut(&o)
		if err := o.Check(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestReportJSON(t *testing.T) {
	b, err := json.Marshal(&Report{Hospitals: []Hospital{{ID: "hospital-1", Epsilon: 1, Cap: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"labels", "refused", "student_accuracy", "hospitals", "ledger_verified", "student_verified_every_proof",
		"hospital_proofs", "hospitals_matched_votes_to_proofs"} {
		if _, ok := m[k]; !ok {
			t.Errorf("the JSON report lacks %q", k)
		}
	}
	h := m["hospitals"].([]any)[0].(map[string]any)
	for _, k := range []string{"id", "epsilon", "cap"} {
		if _, ok := h[k]; !ok {
			t.Errorf("a hospital in the JSON report lacks %q", k)
		}
	}
}

func TestSessionFitsTheCap(t *testing.T) {
	for _, tc := range []struct {
		teachers int
		cap      float64
		pure     float64 // the session's pure ε, at least
	}{
		{300, 2, 1.98},
		{300, 10, 1.99},
		{300, 1.5, 1.48},
		{150, 2, 1.98},
	} {
		p, err := Session(mechanism.NZCSVT, tc.teachers, tc.cap)
		if err != nil {
			t.Fatalf("%d teachers, cap %v: %v", tc.teachers, tc.cap, err)
		}
		p.Teachers, p.Classes = tc.teachers, 10
		ch, err := p.Charge(mechanism.DefaultGrid(), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		// The ledger gates a pure-DP account on the smaller of the
		// conversion and the summed pure ε.
		conv, err := ch.RDP.FilterEpsilon(CapDelta - ch.Delta)
		if err != nil || min(conv.Epsilon, ch.PureEpsilon) > tc.cap || ch.PureEpsilon < tc.pure || ch.PureEpsilon > min(tc.cap, 2) || p.MaxRefusals != SessionRefusals {
			t.Errorf("%d teachers, cap %v: session %v of pure ε %v costs ε %v (%v) in the ledger", tc.teachers, tc.cap, p, ch.PureEpsilon, conv.Epsilon, err)
		}
	}
	if _, err := Session(mechanism.NZCSVT, 300, 0.05); err == nil {
		t.Error("a session was planned within a cap of 0.05")
	}
}

// A demo federation that answers in sessions offers GNMax beside them, a
// configuration the aggregator accepts; one that answers per query offers
// none.
func TestFallbackOffered(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{{"nzc-svt", true}, {"gnmax", false}, {"confident-gnmax", false}} {
		m, err := Mechanism(tc.name, 300, 4)
		if err != nil {
			t.Fatal(err)
		}
		fb, ok, err := Fallback(m, 300, 4)
		if err != nil || ok != tc.want || (fb.Mechanism == mechanism.GNMax) != tc.want {
			t.Fatalf("%s: fallback %+v, %v, %v; want offered %v", tc.name, fb, ok, err, tc.want)
		}
		agg := config.DefaultAggregator()
		agg.Auditors, agg.TLS, agg.AgeIdentity, agg.SigningKey = []string{"127.0.0.1:1"}, config.TLS{CA: "a", Cert: "b", Key: "c"}, "x", "y"
		agg.AuditorKeys = []string{"a1+f853fd16+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"}
		agg.Mechanism, agg.Fallback = m, fb
		if err := agg.Validate(); err != nil {
			t.Errorf("%s: the aggregator refuses its fallback %+v: %v", tc.name, fb, err)
		}
	}
}
