package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/internal/config"
	"github.com/nzcfed/nzc/mechanism"
)

func TestDemoMechanismsAreValid(t *testing.T) {
	for _, name := range []string{"confident-gnmax", "gnmax", "lnmax", "nzc", "nzc-svt"} {
		for _, k := range []int{1, 20, 150, 2500} {
			m, err := demoMechanism(name, k)
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
	if _, err := demoMechanism("median", 10); err == nil {
		t.Error("an unknown mechanism was accepted")
	}
	// The default costs what the report promises: 500 queries, every one
	// answered, stay under the default cap of 10 at δ = 1e-5.
	m, _ := demoMechanism("confident-gnmax", 150)
	p := mechanism.Params{Mechanism: mechanism.ConfidentGNMax, Teachers: 150, Threshold: m.Threshold, Sigma1: m.Sigma1, Sigma2: m.Sigma2}
	c, err := p.Charge(mechanism.DefaultGrid(), 500, 0)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := c.Epsilon(1e-5); err != nil || e.Epsilon > 10 {
		t.Errorf("the default demo's worst case costs ε=%v (%v), over its cap 10", e.Epsilon, err)
	}
}

func TestDemoOptionsChecked(t *testing.T) {
	ok := demoOptions{hospitals: 3, teachers: 50, queries: 500, mechanism: "confident-gnmax", capEpsilon: 10}
	if err := ok.check(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*demoOptions){
		"no hospitals":  func(o *demoOptions) { o.hospitals = 0 },
		"no teachers":   func(o *demoOptions) { o.teachers = 0 },
		"too many":      func(o *demoOptions) { o.queries = 9500 },
		"bad cap":       func(o *demoOptions) { o.capEpsilon = 0 },
		"bad mechanism": func(o *demoOptions) { o.mechanism = "median" },
	} {
		o := ok
		mut(&o)
		if err := o.check(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestDemoReportJSON(t *testing.T) {
	b, err := json.Marshal(&demoReport{Hospitals: []demoHospital{{ID: "hospital-1", Epsilon: 1, Cap: 10}}})
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
