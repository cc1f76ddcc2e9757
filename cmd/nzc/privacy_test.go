package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/cmd/internal/privacy"
	"github.com/nzcfed/nzc/mechanism"
)

// runNZCJSON runs nzc with stdin and decodes what it printed into v.
func runNZCJSON(t *testing.T, v any, stdin string, args ...string) {
	t.Helper()
	out, err := runNZCIn(t, stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

func runNZCIn(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRootCommand()
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestPrivacyAnalyzeJSON(t *testing.T) {
	var m map[string]any
	runNZCJSON(t, &m, "[[120,121,9],[250,0,0]]", "privacy", "analyze", "--mechanism", "gnmax", "--sigma", "40", "--orders", "2,10,100", "--format", "json", "-")
	for _, k := range []string{"mechanism", "params", "queries", "delta", "orders", "rdp_data_independent", "epsilon_data_independent", "rdp_data_dependent", "epsilon_data_dependent", "logq", "rdp_data_dependent_discrete", "epsilon_data_dependent_discrete", "logq_discrete"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	if m["queries"].(float64) != 2 || len(m["logq"].([]any)) != 2 {
		t.Fatalf("queries/logq wrong: %v", m)
	}
	// RDP(2) of two GNMax answers at σ = 40 is 2·2/1600.
	if v := m["rdp_data_independent"].([]any)[0].(float64); v < 0.0025 || v > 0.0025*(1+1e-12) {
		t.Fatalf("rdp_data_independent[0] = %v, want 0.0025", v)
	}
}

func TestPrivacyAnalyzeUnboundedIsInf(t *testing.T) {
	var m map[string]any
	runNZCJSON(t, &m, "[[1,2]]", "privacy", "analyze", "--mechanism", "nzc", "--noise", "gaussian", "--sigma", "1e-10", "--constant", "1e200", "--format", "json", "-")
	if m["epsilon_data_independent"] != "inf" || m["paper_claim_epsilon"] != 0.0 {
		t.Fatalf("nzc at overflowing settings: ε = %v, claim %v", m["epsilon_data_independent"], m["paper_claim_epsilon"])
	}
}

// A mechanism whose own δ is not below --delta guarantees nothing there: no
// finite ε is shown beside that δ (an nzc-svt session of 5 teachers whose
// threshold sits at its noise has δ ≈ 0.4).
func TestPrivacyAnalyzeNoEpsilonAtATooSmallDelta(t *testing.T) {
	var m map[string]any
	runNZCJSON(t, &m, "[[3,2]]", "privacy", "analyze", "--mechanism", "nzc-svt", "--scale", "1", "--threshold", "2", "--max-refusals", "1", "--format", "json", "-")
	for _, k := range []string{"epsilon_ledger", "epsilon_data_independent", "epsilon_data_independent_classic", "epsilon_pure"} {
		if m[k] != "inf" {
			t.Errorf("%s = %v beside δ = %v, want inf", k, m[k], m["delta_total"])
		}
	}
	if m["delta_total"] != 1e-5 || m["delta_note"] == nil {
		t.Fatalf("δ %v, note %v", m["delta_total"], m["delta_note"])
	}
	text, err := runNZCIn(t, "[[3,2]]", "privacy", "analyze", "--mechanism", "nzc-svt", "--scale", "1", "--threshold", "2", "--max-refusals", "1", "-")
	if err != nil || !strings.Contains(text, "ε = inf at δ = 1e-05") || strings.Contains(text, "at δ = 0.39") {
		t.Fatalf("text output: %v\n%s", err, text)
	}
}

func TestPrivacyAnalyzeSmoothSensitivity(t *testing.T) {
	var m struct {
		SS map[string]any `json:"smooth_sensitivity"`
	}
	runNZCJSON(t, &m, "[[200,30,20],[150,60,40]]", "privacy", "analyze", "--mechanism", "gnmax", "--sigma", "40", "--smooth-sensitivity", "--ss-order", "20", "--seed", "3", "--format", "json", "-")
	if m.SS["order"] != 20.0 || m.SS["beta"] != 0.02 {
		t.Fatalf("release %v", m.SS)
	}
	if _, err := runNZCIn(t, "[[2,1]]", "privacy", "analyze", "--mechanism", "lnmax", "--scale", "2", "--smooth-sensitivity", "-"); err == nil {
		t.Fatal("smooth sensitivity of lnmax accepted")
	}
}

func TestPrivacyBadInput(t *testing.T) {
	for _, c := range []struct {
		in   string
		args []string
		want error
	}{
		{"[[1,2],[3,-1]]", nil, mechanism.ErrNegativeVotes},
		{"[[1,2],[]]", nil, mechanism.ErrEmptyHistogram},
		{"[[1,2],[1.5]]", nil, privacy.ErrHistograms},
		{"{}", nil, privacy.ErrHistograms},
		{"[[1,2]]", []string{"--teachers", "2"}, mechanism.ErrTooManyVotes},
		{"[[1,2],[1,2,3]]", nil, mechanism.ErrClassCount},
		{"[[1,2]]", []string{"--sigma", "-1"}, mechanism.ErrBadParams},
		{"[[1,2]]", []string{"--sigma", "1", "--scale", "2"}, mechanism.ErrBadParams},
	} {
		args := append([]string{"privacy", "analyze", "--mechanism", "gnmax", "-"}, c.args...)
		if c.args == nil {
			args = append(args, "--sigma", "1")
		}
		_, err := runNZCIn(t, c.in, args...)
		if !errors.Is(err, c.want) {
			t.Errorf("%s %v: %v, want %v", c.in, c.args, err, c.want)
		}
		var qe *privacy.QueryError
		if (c.want == mechanism.ErrNegativeVotes || c.want == mechanism.ErrEmptyHistogram || c.want == mechanism.ErrClassCount) && (!errors.As(err, &qe) || qe.Query != 1) {
			t.Errorf("%s: error %v does not name query 1", c.in, err)
		}
	}
}

func TestPrivacySampleJSON(t *testing.T) {
	var m struct {
		Counts []map[string]int `json:"counts"`
	}
	runNZCJSON(t, &m, "[[120,121,9],[121,120,9]]", "privacy", "sample", "--mechanism", "nzc", "--scale", "1e-10", "--constant", "1e100", "--trials", "200", "--seed", "5", "--format", "json", "-")
	if len(m.Counts) != 2 || m.Counts[0]["1"] != 200 || m.Counts[1]["0"] != 200 || m.Counts[0]["refused"] != 0 {
		t.Fatalf("counts %v: the paper's nzc must return the exact argmax", m.Counts)
	}
	// Same seed, same counts.
	out2, _ := runNZCIn(t, "[[5,4,1]]", "privacy", "sample", "--mechanism", "confident-gnmax", "--threshold", "5", "--sigma1", "2", "--sigma2", "2", "--trials", "300", "--seed", "9", "--format", "json", "-")
	out3, _ := runNZCIn(t, "[[5,4,1]]", "privacy", "sample", "--mechanism", "confident-gnmax", "--threshold", "5", "--sigma1", "2", "--sigma2", "2", "--trials", "300", "--seed", "9", "--format", "json", "-")
	if out2 != out3 || !strings.Contains(out2, `"refused"`) {
		t.Fatalf("seeded sampling not reproducible:\n%s\n%s", out2, out3)
	}
}
