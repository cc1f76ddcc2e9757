package main

import (
	"strings"
	"testing"

	"github.com/nzcfed/nzc/cmd/internal/clitest"
)

func TestBinary(t *testing.T) { clitest.CheckBinary(t, newRootCommand, "nzc-teacher") }

func TestTrainNeedsData(t *testing.T) {
	path := clitest.WriteFile(t, "h.yaml", "id: hospital-1\ntls: {ca: ca.pem, cert: h.pem, key: h.key}\nage_identity: h.age\n")
	_, err := clitest.Execute(t, newRootCommand(), "train", "--config", path)
	if err == nil || !strings.Contains(err.Error(), "--data") {
		t.Fatalf("train without --data: %v", err)
	}
	_, err = clitest.Execute(t, newRootCommand(), "status", "--config", path, "--models", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "nzc-teacher train") {
		t.Fatalf("status without teachers: %v", err)
	}
}

func TestCapNeedsACapAndTheAuditors(t *testing.T) {
	path := clitest.WriteFile(t, "h.yaml", "id: hospital-1\ntls: {ca: ca.pem, cert: h.pem, key: h.key}\nage_identity: h.age\nsigning_key: h.sig\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cap", "--config", path}, "--epsilon"},
		{[]string{"cap", "--config", path, "--epsilon", "4"}, "--auditors"},
		{[]string{"cap", "--config", path, "--epsilon", "4", "--auditors", "nowhere"}, "auditors"},
	} {
		if _, err := clitest.Execute(t, newRootCommand(), tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}
