package main

import (
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
