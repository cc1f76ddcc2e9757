package main

import (
	"strings"
	"testing"

	"github.com/nzcfed/nzc/cmd/internal/clitest"
)

func TestBinary(t *testing.T) { clitest.CheckBinary(t, newRootCommand, "nzc") }

func TestVersionJSON(t *testing.T) {
	out, err := clitest.Execute(t, newRootCommand(), "version", "--format", "json")
	if err != nil || !strings.Contains(out, `"binary": "nzc"`) {
		t.Fatalf("version --format json: err=%v, output %q", err, out)
	}
}
