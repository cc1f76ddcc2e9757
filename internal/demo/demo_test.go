package demo

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/internal/config"
	"github.com/nzcfed/nzc/mechanism"
)

func TestMechanismsAreValid(t *testing.T) {
	for _, name := range []string{"confident-gnmax", "gnmax", "lnmax", "nzc", "nzc-svt"} {
		for _, k := range []int{1, 20, 150, 2500} {
			m, err := Mechanism(name, k)
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
	if _, err := Mechanism("median", 10); err == nil {
		t.Error("an unknown mechanism was accepted")
	}
	// The default costs what the report promises: its queries, every one
	// answered, stay under its cap at δ = CapDelta.
	d := Defaults()
	k := d.Hospitals * d.Teachers
	m, err := Mechanism(d.Mechanism, k)
	if err != nil {
		t.Fatal(err)
	}
	m.Teachers = k
	c, err := m.Charge(mechanism.DefaultGrid(), d.Queries, 0)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := c.Epsilon(CapDelta); err != nil || e.Epsilon > d.CapEpsilon {
		t.Errorf("the default demo's worst case costs ε=%v (%v), over its cap %v", e.Epsilon, err, d.CapEpsilon)
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
