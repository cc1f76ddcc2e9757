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

// nzc-svt's δ is audited too: for K = 1 and only unstable queries the share
// of sessions that answer one is the charged δ itself (0.086 here), so the
// interval, at confidence 1 − 1e-6, must hold it.
func TestAuditSessionDelta(t *testing.T) {
	var rep struct {
		Results []struct {
			Delta    float64 `json:"delta_accounted"`
			OK       bool    `json:"ok"`
			Unstable []struct {
				Strategy string  `json:"strategy"`
				Sessions int     `json:"sessions"`
				Released int     `json:"released"`
				Lower    float64 `json:"probability_lower_bound"`
				Upper    float64 `json:"probability_upper_bound"`
				OK       bool    `json:"ok"`
			} `json:"unstable_answers"`
		} `json:"results"`
	}
	runNZCJSON(t, &rep, "", "audit", "--mechanism", "nzc-svt", "--scale", "2", "--distance-scale", "3", "--threshold", "6", "--max-refusals", "1",
		"--teachers", "250", "--trials", "5000", "--seed", "3", "--format", "json")
	if len(rep.Results) != 1 || len(rep.Results[0].Unstable) != 3 || !rep.Results[0].OK {
		t.Fatalf("results %+v: want one nzc-svt result with three strategies, all ok", rep.Results)
	}
	r := rep.Results[0]
	u := r.Unstable[0]
	if u.Sessions != 5000 || !u.OK || !(u.Lower <= r.Delta && r.Delta <= u.Upper) {
		t.Fatalf("%s: %d of %d, [%v, %v], charged δ %v: want the charge inside the interval", u.Strategy, u.Released, u.Sessions, u.Lower, u.Upper, r.Delta)
	}
}
