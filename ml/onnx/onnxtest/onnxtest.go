// Package onnxtest is for tests of ONNX teachers only: where the tests
// find the ONNX Runtime library, small data teachers learn at once, and
// the check that ONNX Runtime votes as the teachers did before export.
package onnxtest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// OneHotCSV writes n rows of 4 features and their class (i mod 4), the
// class's feature in [0.9, 1) and the others in [0, 0.1), drawn from seed,
// as a CSV file nzc-teacher train reads, and returns its path.
func OneHotCSV(t testing.TB, n int, seed uint64) string {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	var b strings.Builder
	for i := range n {
		c := i % 4
		for f := range 4 {
			v := 0.1 * r.Float64()
			if f == c {
				v += 0.9
			}
			fmt.Fprintf(&b, "%.4f,", v)
		}
		fmt.Fprintf(&b, "%d\n", c)
	}
	path := filepath.Join(t.TempDir(), "train.csv")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Library returns the ONNX Runtime library the tests use: $NZC_ONNXRUNTIME,
// or the one scripts/fetch-onnxruntime.sh puts in lib/onnxruntime. Without
// one the test skips, unless NZC_REQUIRE_ONNX is set, which makes it fail.
func Library(t testing.TB) string {
	t.Helper()
	lib := os.Getenv("NZC_ONNXRUNTIME")
	if lib == "" {
		_, file, _, _ := runtime.Caller(0)
		lib = filepath.Join(filepath.Dir(file), "..", "..", "..", "lib", "onnxruntime", "libonnxruntime.so.1")
	}
	if _, err := os.Stat(lib); err != nil {
		if os.Getenv("NZC_REQUIRE_ONNX") != "" {
			t.Fatalf("NZC_REQUIRE_ONNX is set but there is no ONNX Runtime library (%v): run scripts/fetch-onnxruntime.sh", err)
		}
		t.Skipf("no ONNX Runtime library (%v): run scripts/fetch-onnxruntime.sh or set NZC_ONNXRUNTIME; NZC_REQUIRE_ONNX=1 makes this a failure", err)
	}
	return lib
}

// SameVotes fails the test at the first query whose vote histogram got,
// from ONNX Runtime, differs from want, from reference (whatever ran the
// same teachers before their export), and returns how many queries split
// the teachers: no class had all of their votes.
func SameVotes(t testing.TB, got, want [][]int, teachers int, reference string) (split int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("ONNX Runtime voted on %d queries, %s on %d", len(got), reference, len(want))
	}
	for q := range want {
		if !slices.Equal(got[q], want[q]) {
			t.Fatalf("query %d: ONNX Runtime votes %v, %s %v", q, got[q], reference, want[q])
		}
		if slices.Max(want[q]) < teachers {
			split++
		}
	}
	return split
}
