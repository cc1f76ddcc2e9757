package clitest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
)

// recorder collects the failures CheckBinary reports instead of failing.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func tree(exampleOfRun string) func() *cobra.Command {
	return func() *cobra.Command {
		root := &cobra.Command{Use: "nzc-x", Example: "  nzc-x run"}
		run := &cobra.Command{Use: "run", Example: exampleOfRun, RunE: func(*cobra.Command, []string) error { return nil }}
		root.AddCommand(run, cli.VersionCommand("nzc-x"))
		return root
	}
}

func TestCheckBinary(t *testing.T) {
	ok := &recorder{TB: t}
	CheckBinary(ok, tree("  nzc-x run --fast"), "nzc-x")
	if len(ok.errs) != 0 {
		t.Fatalf("a complete binary failed: %v", ok.errs)
	}
	bad := &recorder{TB: t}
	CheckBinary(bad, tree(""), "nzc-x")
	if len(bad.errs) == 0 || !strings.Contains(strings.Join(bad.errs, "\n"), "nzc-x run: no examples") {
		t.Fatalf("a command without examples passed: %v", bad.errs)
	}
}
