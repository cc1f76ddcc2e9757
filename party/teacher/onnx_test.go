package teacher

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/ml/onnx"
	"github.com/nzcfed/nzc/ml/onnx/onnxtest"
)

// trainGo trains teachers on one-hot data and returns their directory.
func trainGo(t testing.TB, teachers int, seed uint64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "models")
	if _, err := Train(t.Context(), TrainOptions{Data: onnxtest.OneHotCSV(t, 160, seed), Teachers: teachers, Model: "softmax", Epochs: 30, Seed: seed, Models: dir}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestExportONNXAndItsChecks(t *testing.T) {
	goDir := trainGo(t, 3, 1)
	out := filepath.Join(t.TempDir(), "onnx")
	m, err := ExportONNX(goDir, out)
	if err != nil {
		t.Fatal(err)
	}
	if m.Features != 4 || m.Classes != 4 || len(m.Models) != 3 {
		t.Fatalf("manifest %+v", m)
	}
	if _, err := ExportONNX(goDir, out); err == nil {
		t.Fatal("a second export over the first")
	}
	for _, f := range m.Models {
		if err := onnx.CheckFile(filepath.Join(out, f), 4, 4); err != nil {
			t.Fatal(err)
		}
	}
	// A model for another federation is named at start-up, before any
	// runtime is loaded, in every build.
	for _, tc := range []struct {
		name, mention string
		edit          func(*ONNXManifest)
	}{
		{"other classes", "teacher-0000.onnx", func(m *ONNXManifest) { m.Classes = 10 }},
		{"other features", "want [batch, 784]", func(m *ONNXManifest) { m.Features = 784 }},
		{"a path", "not a file name", func(m *ONNXManifest) { m.Models = []string{"../x.onnx"} }},
		{"no models", "no models", func(m *ONNXManifest) { m.Models = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range m.Models {
				b, err := os.ReadFile(filepath.Join(out, f))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			c := *m
			tc.edit(&c)
			b, _ := json.Marshal(c)
			if err := os.WriteFile(filepath.Join(dir, ONNXManifestFile), b, 0o644); err != nil {
				t.Fatal(err)
			}
			_, _, err := LoadVoter(dir, "")
			if err == nil || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("got %v, want an error saying %q", err, tc.mention)
			}
		})
	}
	if !onnx.Built {
		if _, _, err := LoadVoter(out, "/nonexistent/libonnxruntime.so"); !errors.Is(err, onnx.ErrNotBuilt) {
			t.Fatalf("ONNX teachers in a build without ONNX Runtime: %v, want ErrNotBuilt", err)
		}
	}
	// Without onnx.json the directory's Go ensemble is loaded.
	v, closer, err := LoadVoter(goDir, "")
	if err != nil || v.Teachers() != 3 {
		t.Fatalf("Go ensemble: %v, %v", v, err)
	}
	if err := closer.Close(); err != nil {
		t.Fatal(err)
	}
}
