package main

import (
	"math"
	"testing"
)

func TestAuditJSON(t *testing.T) {
	var rep struct {
		Results []map[string]any `json:"results"`
	}
	runNZCJSON(t, &rep, "", "audit", "--trials", "2000", "--teachers", "20", "--seed", "4", "--format", "json")
	if len(rep.Results) < 5 {
		t.Fatalf("%d results", len(rep.Results))
	}
	seen := map[string]bool{}
	for _, r := range rep.Results {
		for _, k := range []string{"mechanism", "params", "epsilon_accounted", "epsilon_lower_bound", "ok"} {
			if _, ok := r[k]; !ok {
				t.Fatalf("result lacks %q: %v", k, r)
			}
		}
		seen[r["mechanism"].(string)] = true
		if r["ok"] != true {
			t.Errorf("accounting below the lower bound: %v", r)
		}
		if _, ok := r["paper_claim_epsilon"]; ok && r["paper_claim_refuted"] != true {
			t.Errorf("paper claim not refuted: %v", r)
		}
	}
	for _, m := range []string{"nzc", "lnmax", "gnmax", "confident-gnmax", "nzc-svt"} {
		if !seen[m] {
			t.Errorf("no audit of %s", m)
		}
	}
}

func TestAuditOneMechanism(t *testing.T) {
	var rep struct {
		Results []struct {
			Mechanism  string  `json:"mechanism"`
			Accounted  float64 `json:"epsilon_accounted"`
			LowerBound float64 `json:"epsilon_lower_bound"`
			OK         bool    `json:"ok"`
		} `json:"results"`
	}
	runNZCJSON(t, &rep, "", "audit", "--mechanism", "lnmax", "--scale", "0.5", "--trials", "3000", "--teachers", "10", "--seed", "2", "--format", "json")
	if len(rep.Results) != 1 || rep.Results[0].Mechanism != "lnmax" || math.Abs(rep.Results[0].Accounted-4) > 1e-9 || !rep.Results[0].OK || rep.Results[0].LowerBound < 1 {
		t.Fatalf("results %+v", rep.Results)
	}
	if _, err := runNZCIn(t, "", "audit", "--mechanism", "lnmax", "--trials", "10"); err == nil {
		t.Fatal("lnmax without a scale accepted")
	}
}
