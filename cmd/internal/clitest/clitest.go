// Package clitest checks, for tests, what every NZC binary promises its
// users: examples in every command's help, a version command, and strict
// configuration loading.
package clitest

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
)

// Execute runs a command tree with args and returns what it printed.
func Execute(t testing.TB, root *cobra.Command, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := execute(root, &out, &out, args)
	return out.String(), err
}

// Refuses runs root with args and fails t unless the command fails with an
// error that names want.
func Refuses(t testing.TB, root *cobra.Command, want string, args ...string) {
	t.Helper()
	if _, err := Execute(t, root, args...); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%v: %v, want an error naming %q", args, err, want)
	}
}

// WriteFile writes content to a file named name in a new temporary
// directory (a configuration, say) and returns its path.
func WriteFile(t testing.TB, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// ExecuteSplit runs root with args and returns what it wrote to standard
// output and to standard error apart, for commands whose output is read by
// programs while their progress goes to standard error.
func ExecuteSplit(t testing.TB, root *cobra.Command, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = execute(root, &out, &errOut, args)
	return out.String(), errOut.String(), err
}

func execute(root *cobra.Command, stdout, stderr io.Writer, args []string) error {
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetArgs(args)
	return root.Execute()
}

// CheckBinary checks a binary's command tree: every command a user can run
// shows examples in its help, `version` names the binary and its version,
// and, where the binary has a `config` command, the keys are listed and an
// unknown key in a file is refused by name.
func CheckBinary(t testing.TB, newRoot func() *cobra.Command, binary string) {
	t.Helper()
	var walk func(path []string, c *cobra.Command)
	walk = func(path []string, c *cobra.Command) {
		if c.Name() == "help" || c.Name() == "completion" {
			return
		}
		if c.Runnable() || len(path) == 0 {
			if strings.TrimSpace(c.Example) == "" {
				t.Errorf("%s %s: no examples in its help", binary, strings.Join(path, " "))
			}
			out, err := Execute(t, newRoot(), append(append([]string{}, path...), "--help")...)
			if err != nil || !strings.Contains(out, "Examples:") {
				t.Errorf("%s %s --help: err=%v, no examples shown", binary, strings.Join(path, " "), err)
			}
		}
		for _, sub := range c.Commands() {
			walk(append(append([]string{}, path...), sub.Name()), sub)
		}
	}
	walk(nil, newRoot())

	out, err := Execute(t, newRoot(), "version")
	if err != nil || !strings.Contains(out, binary+" "+cli.Version) {
		t.Errorf("%s version: err=%v, output %q", binary, err, out)
	}
	if c, _, err := newRoot().Find([]string{"config", "show"}); err != nil || c.Name() != "show" {
		return
	}
	out, err = Execute(t, newRoot(), "config", "keys")
	if err != nil || !strings.Contains(out, "NZC_LOG_LEVEL") {
		t.Errorf("%s config keys: err=%v, output %q", binary, err, out)
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("log:\n  levle: debug\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Execute(t, newRoot(), "config", "show", "--config", path); err == nil || !strings.Contains(err.Error(), "log.levle") {
		t.Errorf("%s config show: unknown key not reported: %v", binary, err)
	}
}
