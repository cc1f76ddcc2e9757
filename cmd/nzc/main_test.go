package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"version"}, {"version", "--format", "json"}} {
		var out bytes.Buffer
		root := newRootCommand()
		root.SetOut(&out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		want := map[string]string{"--help": "Examples:", "version": "nzc 0.", "json": `"binary": "nzc"`}[args[len(args)-1]]
		if !strings.Contains(out.String(), want) {
			t.Fatalf("%v: output %q lacks %q", args, out.String(), want)
		}
	}
}
