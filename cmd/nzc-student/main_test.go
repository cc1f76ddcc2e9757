package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/cmd/internal/clitest"
	"github.com/nzcfed/nzc/cmd/internal/sizing"
)

func TestBinary(t *testing.T) { clitest.CheckBinary(t, newRootCommand, "nzc-student") }

func TestLabelNeedsData(t *testing.T) {
	path := clitest.WriteFile(t, "s.yaml", "id: student-1\ntls: {ca: ca.pem, cert: s.pem, key: s.key}\nage_identity: s.age\nhospitals: [age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p]\nauditor_keys: [a1+f853fd16+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop]\n")
	clitest.Refuses(t, newRootCommand(), "--data", "label", "--config", path)
}

// TestLabelBootstrapFlags: bad bootstrap settings and query limits are
// refused before anything is asked or written.
func TestLabelBootstrapFlags(t *testing.T) {
	path := clitest.WriteFile(t, "s.yaml", "id: student-1\ntls: {ca: ca.pem, cert: s.pem, key: s.key}\nage_identity: s.age\nhospitals: [age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p]\nauditor_keys: [a1+f853fd16+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop]\n")
	csv := clitest.WriteFile(t, "q.csv", "0.1,0.2,0\n0.3,0.4,1\n0.5,0.1,0\n")
	out := path + ".labels.json"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown model", []string{"--bootstrap-model", "huge"}, "--bootstrap-model"},
		{"floor of one", []string{"--bootstrap-floor", "1"}, "--bootstrap-floor"},
		{"negative floor", []string{"--bootstrap-floor", "-0.5"}, "--bootstrap-floor"},
		{"negative spread", []string{"--bootstrap-spread", "-2"}, "--bootstrap-spread"},
		{"turned too far", []string{"--bootstrap-rotate", "90"}, "--bootstrap-rotate"},
		{"negative resizing", []string{"--bootstrap-scale", "-0.1"}, "--bootstrap-scale"},
		{"negative query count", []string{"--max-queries", "-1"}, "--max-queries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"label", "--config", path, "--data", csv, "--count", "0", "--bootstrap", "2", "--bootstrap-model", "mlp", "--out", out}, tc.args...)
			clitest.Refuses(t, newRootCommand(), tc.want, args...)
			if _, err := os.Stat(out); err == nil {
				t.Fatal("labels were written")
			}
		})
	}
}

// TestTrainRefusesBadSettings: the student's training settings are checked
// before any data is read or any model written.
func TestTrainRefusesBadSettings(t *testing.T) {
	out := filepath.Join(t.TempDir(), "student.model")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"negative passes", []string{"--consistency", "--consistency-passes", "-1"}, "--consistency-passes"},
		{"too many passes", []string{"--consistency", "--consistency-passes", "1001"}, "--consistency-passes"},
		{"negative ratio", []string{"--consistency", "--consistency-ratio", "-1"}, "--consistency-ratio"},
		{"too large a ratio", []string{"--consistency", "--consistency-ratio", "65"}, "--consistency-ratio"},
		{"negative minimum of steps", []string{"--min-steps", "-1"}, "--min-steps"},
		{"mean teacher that never moves", []string{"--consistency", "--consistency-ema", "1"}, "--consistency-ema"},
		{"negative mean-teacher decay", []string{"--consistency", "--consistency-ema", "-0.5"}, "--consistency-ema"},
		{"negative step size", []string{"--learn-rate", "-0.1"}, "--learn-rate"},
		{"rotation past half a turn", []string{"--consistency", "--consistency-rotate", "200"}, "--consistency-rotate"},
		{"scale past a half", []string{"--consistency", "--consistency-scale", "0.7"}, "--consistency-scale"},
		{"two ways to use the unlabelled", []string{"--consistency", "--self-training", "2"}, "pick one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"train", "--data", "no-such-directory", "--labels", "no-such-labels.json", "--out", out}, tc.args...)
			clitest.Refuses(t, newRootCommand(), tc.want, args...)
			if _, err := os.Stat(out); err == nil {
				t.Fatal("a model was written")
			}
		})
	}
}

func TestPlan(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // in the output, or in the error when bad
		bad  bool
	}{
		{"gnmax", []string{"--mechanism", "gnmax", "--sigma", "40", "--teachers", "250", "--target-epsilon", "2"}, "134 queries of gnmax", false},
		{"nzc-svt", []string{"--mechanism", "nzc-svt", "--threshold", "71", "--scale", "2.667", "--distance-scale", "3.2", "--max-refusals", "1", "--teachers", "250", "--target-epsilon", "2.1", "--format", "json"}, `"sessions": 2`, false},
		{"out of budget", []string{"--mechanism", "lnmax", "--scale", "20", "--teachers", "250", "--target-epsilon", "0.05"}, "no query fits", true},
		{"gnmax after a session", []string{"--mechanism", "gnmax", "--sigma", "40", "--teachers", "250", "--target-epsilon", "1", "--after-session", "0.5"}, "queries of gnmax: ε", false},
		{"a session past the target", []string{"--mechanism", "gnmax", "--sigma", "40", "--teachers", "250", "--target-epsilon", "0.4", "--after-session", "0.5"}, "above the cap", true},
		{"no σ", []string{"--mechanism", "gnmax", "--teachers", "250", "--target-epsilon", "2"}, "sigma", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := clitest.Execute(t, newRootCommand(), append([]string{"plan"}, tt.args...)...)
			if tt.bad {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("plan %v: %v, want an error naming %q", tt.args, err, tt.want)
				}
				return
			}
			if err != nil || !strings.Contains(out, tt.want) {
				t.Fatalf("plan %v: %v\n%s\nwant %q", tt.args, err, out, tt.want)
			}
		})
	}
}

// TestEvaluateRefusesBadViews: a bad --views is refused before any data or
// model is read.
func TestEvaluateRefusesBadViews(t *testing.T) {
	for _, v := range []string{"-1", "9"} {
		clitest.Refuses(t, newRootCommand(), "--views", "evaluate", "--model", filepath.Join(t.TempDir(), "none.model"), "--data", "missing.csv", "--views", v)
	}
}

// A run the mechanism mostly refused gets a note saying why: what the
// charged mechanism's plan says of refusals, or that it cannot follow the
// ensemble, or, with no plan, that its threshold may be set for a larger
// ensemble.
func TestRefusalNote(t *testing.T) {
	confident := &sizing.Plan{UnanimousAnswered: 0.63}
	unsound := errors.New("threshold T=200 is not below the 90 teachers")
	for _, tc := range []struct {
		queries, refused int
		plan             *sizing.Plan
		unsound          error
		note             string // "" when none
	}{
		{200, 181, nil, nil, "larger ensemble"},
		{200, 181, nil, unsound, "threshold T=200 is not below the 90 teachers"},
		{160, 88, confident, nil, "unanimously with probability 0.63"},
		{200, 100, confident, nil, ""},
		{200, 0, nil, nil, ""},
		{0, 0, nil, nil, ""},
	} {
		got := refusalNote(tc.queries, tc.refused, tc.plan, tc.unsound)
		if (got != "") != (tc.note != "") || !strings.Contains(got, tc.note) {
			t.Errorf("refusalNote(%d, %d, %v, %v) = %q, want %q", tc.queries, tc.refused, tc.plan, tc.unsound, got, tc.note)
		}
	}
}

// plan reads the aggregator's mechanism and ensemble from its configuration.
func TestPlanFromAggregatorConfig(t *testing.T) {
	agg := clitest.WriteFile(t, "aggregator.yaml", "mechanism:\n  name: gnmax\n  sigma: 40\nteachers: 50\nhospitals: 3\nclasses: 10\n")
	out, err := clitest.Execute(t, newRootCommand(), "plan", "--aggregator-config", agg, "--target-epsilon", "2", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var plan struct {
		Mechanism struct {
			Mechanism string  `json:"mechanism"`
			Sigma     float64 `json:"sigma"`
			Teachers  int     `json:"teachers"`
		} `json:"mechanism"`
		Queries int `json:"queries"`
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if plan.Mechanism.Mechanism != "gnmax" || plan.Mechanism.Sigma != 40 || plan.Mechanism.Teachers != 150 || plan.Queries < 1 {
		t.Fatalf("plan %+v from %s", plan, out)
	}
	clitest.Refuses(t, newRootCommand(), "leave out --mechanism", "plan", "--aggregator-config", agg, "--mechanism", "gnmax", "--target-epsilon", "2")
}
