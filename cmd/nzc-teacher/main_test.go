package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/cmd/internal/clitest"
)

func TestBinary(t *testing.T) { clitest.CheckBinary(t, newRootCommand, "nzc-teacher") }

// The commands refuse what they cannot do, naming what is missing.
func TestRefusals(t *testing.T) {
	hospital := "id: hospital-1\ntls: {ca: ca.pem, cert: h.pem, key: h.key}\nage_identity: h.age\n"
	path := clitest.WriteFile(t, "h.yaml", hospital)
	signing := clitest.WriteFile(t, "h.yaml", hospital+"signing_key: h.sig\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "--config", path}, "--data"},
		{[]string{"status", "--config", path, "--models", t.TempDir()}, "nzc-teacher train"},
		{[]string{"cap", "--config", signing}, "--epsilon"},
		{[]string{"cap", "--config", signing, "--epsilon", "4"}, "--auditors"},
		{[]string{"cap", "--config", signing, "--epsilon", "4", "--auditors", "nowhere"}, "auditors"},
	} {
		clitest.Refuses(t, newRootCommand(), tc.want, tc.args...)
	}
}

// Off a terminal, train logs its progress as structured lines and reports
// the ensemble's check on held-out data, in JSON too.
func TestTrainReportsProgressAndCheck(t *testing.T) {
	var csv strings.Builder
	for i := range 400 {
		fmt.Fprintf(&csv, "%d,%d,%d\n", i%2*4, (i/2)%3, i%2)
	}
	dir := t.TempDir()
	data := clitest.WriteFile(t, "d.csv", csv.String())
	hospital := "id: hospital-1\ntls: {ca: ca.pem, cert: h.pem, key: h.key}\nage_identity: h.age\nlog: {format: json}\n"
	cfg := clitest.WriteFile(t, "h.yaml", hospital)
	stdout, stderr, err := clitest.ExecuteSplit(t, newRootCommand(), "train", "--config", cfg, "--data", data, "--teachers", "3",
		"--model", "softmax", "--epochs", "2", "--models", filepath.Join(dir, "models"), "--format", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var out struct {
		Check struct {
			HeldOut  int     `json:"held_out"`
			Accuracy float64 `json:"ensemble_accuracy"`
		} `json:"check"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || out.Check.HeldOut != 40 {
		t.Fatalf("JSON summary %s (%v): want a check on 40 held-out examples", stdout, err)
	}
	if !strings.Contains(stderr, `"msg":"progress"`) || !strings.Contains(stderr, `"done":`) {
		t.Fatalf("no structured progress line on a non-terminal stderr:\n%s", stderr)
	}
}

// train and status print JSON with snake_case keys only, down to the input
// shape, while the saved manifest keeps its own encoding.
func TestJSONKeysAreSnakeCase(t *testing.T) {
	var csv strings.Builder
	for i := range 200 {
		fmt.Fprintf(&csv, "%d,%d,%d\n", i%2*4, (i/2)%3, i%2)
	}
	data := clitest.WriteFile(t, "d.csv", csv.String())
	cfg := clitest.WriteFile(t, "h.yaml", "id: hospital-1\ntls: {ca: ca.pem, cert: h.pem, key: h.key}\nage_identity: h.age\nlog: {format: json}\n")
	models := filepath.Join(t.TempDir(), "models")
	for _, args := range [][]string{
		{"train", "--config", cfg, "--data", data, "--teachers", "2", "--model", "softmax", "--epochs", "1", "--models", models, "--format", "json"},
		{"status", "--config", cfg, "--models", models, "--format", "json"},
	} {
		stdout, stderr, err := clitest.ExecuteSplit(t, newRootCommand(), args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", args[0], err, stderr)
		}
		var out map[string]any
		if err := json.Unmarshal([]byte(stdout), &out); err != nil {
			t.Fatalf("%s: %v\n%s", args[0], err, stdout)
		}
		for _, k := range jsonKeys(out, "") {
			if k != strings.ToLower(k) {
				t.Errorf("%s --format json: key %q is not snake_case", args[0], k)
			}
		}
		shape, _ := out["shape"].(map[string]any)
		if shape["height"] != 1.0 || shape["width"] != 2.0 || shape["channels"] != 1.0 {
			t.Errorf("%s --format json: shape %v, want height 1, width 2, channels 1", args[0], out["shape"])
		}
	}
}

func jsonKeys(v any, prefix string) []string {
	var keys []string
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			keys = append(keys, prefix+k)
			keys = append(keys, jsonKeys(e, prefix+k+".")...)
		}
	case []any:
		for _, e := range v {
			keys = append(keys, jsonKeys(e, prefix)...)
		}
	}
	return keys
}
