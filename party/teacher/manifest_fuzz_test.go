package teacher

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzReadManifest feeds arbitrary ensemble manifests to a hospital's
// loader: a manifest is refused as damaged (ErrNoEnsemble), or it names as
// many model files as teachers and at least two classes.
func FuzzReadManifest(f *testing.F) {
	f.Add([]byte(`{"teachers":2,"classes":10,"shape":{"height":28,"width":28,"channels":1},"model":"softmax","files":["teacher-0000.model","teacher-0001.model"]}`))
	f.Add([]byte(`{"teachers":1,"classes":2,"files":["../../etc/passwd"]}`))
	f.Add([]byte(`{"teachers":0,"classes":2,"files":[]}`))
	f.Add([]byte(`{"teachers":1,"classes":1,"files":["a"]}`))
	dir := f.TempDir() // its manifest is rewritten for each input
	f.Fuzz(func(t *testing.T, file []byte) {
		if err := os.WriteFile(filepath.Join(dir, ManifestFile), file, 0o600); err != nil {
			t.Fatal(err)
		}
		m, err := ReadManifest(dir)
		if err != nil {
			if !errors.Is(err, ErrNoEnsemble) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		if m.Teachers < 1 || m.Teachers != len(m.Files) || m.Classes < 2 {
			t.Fatalf("accepted manifest %+v", m)
		}
		// No model file exists: loading must fail, not make up teachers.
		if _, err := LoadEnsemble(dir); err == nil {
			t.Fatal("loaded an ensemble with no model files")
		}
	})
}
