// Package onnxtest is for tests only: where the tests find the ONNX
// Runtime library.
package onnxtest

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

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
