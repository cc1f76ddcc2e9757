// Package golden is for tests only: the check of an encoding against its
// golden file in testdata/, which `go test -update` rewrites. An encoding
// pinned this way is one that files already written or peers already
// running must keep reading.
package golden

import (
	"bytes"
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// Check fails the test unless got is the content of the golden file at
// path, and returns that content. With -update it writes got to path
// first.
func Check(t testing.TB, path string, got []byte) []byte {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: the encoding changed:\n got %q\nwant %q\nIf the change is intended, run with -update and review the diff.", path, got, want)
	}
	return want
}
