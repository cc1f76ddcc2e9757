package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func execute(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := newRootCommand()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestHelpVersionAndConfig(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--help"}, "Examples:"},
		{[]string{"train", "--help"}, "Examples:"},
		{[]string{"run", "--help"}, "Examples:"},
		{[]string{"status", "--help"}, "Examples:"},
		{[]string{"config", "show", "--help"}, "Examples:"},
		{[]string{"version"}, "nzc-teacher 0."},
		{[]string{"config", "keys"}, "NZC_LOG_LEVEL"},
	} {
		out, err := execute(t, tc.args...)
		if err != nil || !strings.Contains(out, tc.want) {
			t.Fatalf("%v: err=%v, output lacks %q:\n%s", tc.args, err, tc.want, out)
		}
	}
}

func TestConfigShowRejectsUnknownKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("log:\n  levle: debug\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := execute(t, "config", "show", "--config", path)
	if err == nil || !strings.Contains(err.Error(), "log.levle") {
		t.Fatalf("unknown key not reported: %v", err)
	}
}

func TestTrainNeedsData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.yaml")
	cfg := "id: hospital-1\ntls: {ca: ca.pem, cert: h.pem, key: h.key}\nage_identity: h.age\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := execute(t, "train", "--config", path)
	if err == nil || !strings.Contains(err.Error(), "--data") {
		t.Fatalf("train without --data: %v", err)
	}
	_, err = execute(t, "status", "--config", path, "--models", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "nzc-teacher train") {
		t.Fatalf("status without teachers: %v", err)
	}
}
